"""Step-wise decoding models: `encode` once, then `step` one token at a time.

`InferenceDecoder` runs its search inside the graph. A server that drives
decoding itself (streaming tokens out, a search of its own, another runtime)
needs the two halves instead: `stepwise_models` builds them as Keras models
that `export_model` turns into SavedModel signatures and ONNX files,

    encode: source inputs -> values, keys, memory_mask, state_0, ..., state_n
    step:   ids, values, keys, memory_mask, state_0, ..., state_n
            -> logits, alignment, next_state_0, ..., next_state_n

with the keys projected once in `encode` (as the in-graph decoder does) and
`step` exactly the decoder's step (`InferenceDecoder.decode_step`): a loop
that feeds each step's chosen ids back decodes what the in-graph search
decodes.
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.cells.base import AttentionMemory
from keras_attention.decoders.inference_decoder import InferenceDecoder

__all__ = ["stepwise_models"]


class _DecoderHalf(keras.layers.Layer):
    """A layer that runs part of an `InferenceDecoder` (saved with it)."""

    def __init__(self, decoder, **kwargs):
        super().__init__(**kwargs)
        self.decoder = _checks.resolve_layer(
            self, "decoder", decoder, lambda given: isinstance(given, InferenceDecoder), "an InferenceDecoder"
        )

    def get_config(self):
        return {**super().get_config(), "decoder": keras.saving.serialize_keras_object(self.decoder)}


@keras.saving.register_keras_serializable(package="keras_attention")
class StepwiseEncode(_DecoderHalf):
    """The memory prepared for the cell, and the decoder's initial states."""

    def call(self, memory, memory_mask=None, initial_state=None, mask=None):
        memory_mask = mask if memory_mask is None else memory_mask
        cell = self.decoder.cell
        prepared = cell.prepare_memory(memory, memory_mask, owner=self.decoder)
        states = cell.initial_state_for(prepared, ops.shape(memory)[0], initial_state)
        valid = prepared.mask
        if valid is None:  # one signature whatever the model: every position valid
            valid = ops.ones(ops.shape(memory)[:2], "bool")
        outputs = {"values": prepared.values, "keys": prepared.keys, "memory_mask": valid}
        outputs.update({f"state_{i}": state for i, state in enumerate(states)})
        return outputs

    def compute_mask(self, *args, **kwargs):
        return None


@keras.saving.register_keras_serializable(package="keras_attention")
class StepwiseStep(_DecoderHalf):
    """One step of the decoder on explicit memory and states."""

    def call(self, ids, values, keys, memory_mask, states):
        memory = AttentionMemory(values, keys, memory_mask)
        # time=None: the cell's step does not read the step index.
        logits, states, alignment = self.decoder.decode_step(ops.cast(ids, "int32"), list(states), memory, None)
        outputs = {"logits": ops.cast(logits, "float32"), "alignment": ops.cast(alignment, "float32")}
        # Not `state_i`: an ONNX graph cannot have an output named as an input.
        outputs.update({f"next_state_{i}": state for i, state in enumerate(states)})
        return outputs


def stepwise_models(decoder, inputs, memory, memory_mask=None, initial_state=None):
    """The `encode` and `step` models of `decoder`, for decoding driven from outside.

    Args:
        decoder: a built `InferenceDecoder` (its cell, embedding and output
            layer are used; its search options are not).
        inputs: the functional model's inputs (a `keras.Input`, a list or a
            dict) that `memory` and `initial_state` are computed from.
        memory: the encoder output `(B, Ts, dm)` as a symbolic tensor of that
            model (its Keras mask is the memory mask unless `memory_mask`).
        memory_mask: optional `(B, Ts)` bool symbolic tensor.
        initial_state: optional recurrent state(s) of the cell, as given to
            the decoder.

    Returns:
        `(encode, step)`, two `keras.Model`s:
        `encode(inputs) -> {"values", "keys", "memory_mask", "state_0", ...}`
        and `step({"ids" (B,), "values", "keys", "memory_mask", "state_0",
        ...}) -> {"logits" (B, V), "alignment" (B, Ts), "next_state_0", ...}`
        (feed `next_state_i` back as `state_i`).
        Export both: `export_model({"encode": encode, "step": step}, out)`.

    Example:

    ```python
    encode, step = stepwise_models(decoder, source, memory, initial_state=[h, c])
    state = encode.predict(source_ids)
    ids = np.full((len(source_ids),), START)
    for _ in range(max_length):
        out = step.predict({"ids": ids, **state})
        ids = out["logits"].argmax(-1)
        state.update({k[len("next_"):]: v for k, v in out.items() if k.startswith("next_state_")})
    ```
    """
    if not isinstance(decoder, InferenceDecoder):
        raise ValueError(f"`decoder` must be an InferenceDecoder; got {decoder!r}.")
    if not decoder.built:
        raise ValueError(
            f"`decoder` {decoder.name!r} is not built: call it on the memory first (as the decoding model does)."
        )
    encoded = StepwiseEncode(decoder, name="encode")(memory, memory_mask=memory_mask, initial_state=initial_state)
    encode = keras.Model(inputs, encoded, name="encode")

    def spec(name, tensor, dtype=None):
        return keras.Input(tuple(tensor.shape[1:]), dtype=dtype or tensor.dtype, name=name)

    step_inputs = {"ids": keras.Input((), dtype="int32", name="ids")}
    step_inputs.update({name: spec(name, tensor) for name, tensor in encoded.items()})
    count = sum(name.startswith("state_") for name in encoded)
    states = [step_inputs[f"state_{i}"] for i in range(count)]
    outputs = StepwiseStep(decoder, name="step")(
        step_inputs["ids"], step_inputs["values"], step_inputs["keys"], step_inputs["memory_mask"], states
    )
    step = keras.Model(step_inputs, outputs, name="step")
    return encode, step
