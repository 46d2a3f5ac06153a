"""Step-wise models of a Transformer decoder: `encode` once, then `step` with the caches as inputs and outputs.

The "decoder with past" form that servers drive themselves (streaming, a
search of their own, another runtime):

    encode: source inputs -> memory_key_i, memory_value_i (each layer i),
            memory_mask, cache_key_i, cache_value_i (zeros of max_length)
    step:   ids, time, memory_key_i, memory_value_i, memory_mask,
            cache_key_i, cache_value_i
            -> logits, alignment, next_cache_key_i, next_cache_value_i

`step` is `TransformerInferenceDecoder.decode_step`: feeding back each step's
ids and caches (with `time` counting 0, 1, ...) decodes what the in-graph
search decodes. Every row of a batch steps together: `time` is `(B,)`, and
row 0's value is the step index.
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoders.transformer_inference import TransformerInferenceDecoder

__all__ = ["transformer_stepwise_models"]


class _TransformerHalf(keras.layers.Layer):
    def __init__(self, decoder, **kwargs):
        super().__init__(**kwargs)
        self.decoder = _checks.resolve_layer(
            self,
            "decoder",
            decoder,
            lambda given: isinstance(given, TransformerInferenceDecoder),
            "a TransformerInferenceDecoder",
        )

    def get_config(self):
        return {**super().get_config(), "decoder": keras.saving.serialize_keras_object(self.decoder)}


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerStepwiseEncode(_TransformerHalf):
    """The memory projected for every layer's cross-attention, and empty caches."""

    def call(self, memory, memory_mask=None, mask=None):
        memory_mask = mask if memory_mask is None else memory_mask
        prepared, caches = self.decoder.prepare_search(memory, memory_mask)
        if memory_mask is None:  # one signature whatever the model: every position valid
            memory_mask = ops.ones(ops.shape(memory)[:2], "bool")
        outputs = {"memory_mask": ops.cast(memory_mask, "bool")}
        for i, ((keys, values), (cache_keys, cache_values)) in enumerate(zip(prepared["memory"], caches)):
            outputs.update(
                {
                    f"memory_key_{i}": keys,
                    f"memory_value_{i}": values,
                    f"cache_key_{i}": cache_keys,
                    f"cache_value_{i}": cache_values,
                }
            )
        return outputs

    def compute_mask(self, *args, **kwargs):
        return None


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerStepwiseStep(_TransformerHalf):
    """One cached step on explicit projected memory and caches."""

    def call(self, ids, time, memory_mask, memories, caches):
        prepared = {"memory": [tuple(pair) for pair in memories], "memory_mask": memory_mask}
        step_index = ops.cast(time[0], "int32")
        logits, caches, alignment = self.decoder.decode_step(
            ops.cast(ids, "int32"), [tuple(pair) for pair in caches], prepared, step_index
        )
        outputs = {"logits": ops.cast(logits, "float32")}
        if alignment is not None:
            outputs["alignment"] = ops.cast(alignment, "float32")
        # `next_`: an ONNX graph cannot have an output named as an input.
        for i, (keys, values) in enumerate(caches):
            outputs.update({f"next_cache_key_{i}": keys, f"next_cache_value_{i}": values})
        return outputs


def transformer_stepwise_models(decoder, inputs, memory, memory_mask=None):
    """The `encode` and `step` models of a `TransformerInferenceDecoder`, for decoding driven from outside.

    Args:
        decoder: a built `TransformerInferenceDecoder` (its layers are used;
            its search options are not, but `return_alignments` adds the
            `alignment` output).
        inputs: the functional model's inputs that `memory` is computed from.
        memory: the encoder output `(B, Ts, dm)`, a symbolic tensor of that
            model (its Keras mask is the memory mask unless `memory_mask`).
        memory_mask: optional `(B, Ts)` bool symbolic tensor.

    Returns:
        `(encode, step)`: `encode(inputs) -> {"memory_mask", "memory_key_i",
        "memory_value_i", "cache_key_i", "cache_value_i"}` and
        `step({"ids" (B,), "time" (B,), ...}) -> {"logits" (B, V),
        "alignment", "next_cache_key_i", "next_cache_value_i"}`: feed
        `next_cache_*` back as `cache_*` and `time + 1`. Export both:
        `export_model({"encode": encode, "step": step}, out)`.
    """
    if not isinstance(decoder, TransformerInferenceDecoder):
        raise ValueError(f"`decoder` must be a TransformerInferenceDecoder; got {decoder!r:.80}.")
    if not decoder.built:
        raise ValueError(f"`decoder` {decoder.name!r} is not built: call it on the memory first.")
    encoded = TransformerStepwiseEncode(decoder, name="encode")(memory, memory_mask=memory_mask)
    encode = keras.Model(inputs, encoded, name="encode")

    def spec(name, tensor):
        return keras.Input(tuple(tensor.shape[1:]), dtype=tensor.dtype, name=name)

    step_inputs = {
        "ids": keras.Input((), dtype="int32", name="ids"),
        "time": keras.Input((), dtype="int32", name="time"),
    }
    step_inputs.update({name: spec(name, tensor) for name, tensor in encoded.items()})
    layers = decoder.stack.num_layers
    memories = [[step_inputs[f"memory_key_{i}"], step_inputs[f"memory_value_{i}"]] for i in range(layers)]
    caches = [[step_inputs[f"cache_key_{i}"], step_inputs[f"cache_value_{i}"]] for i in range(layers)]
    outputs = TransformerStepwiseStep(decoder, name="step")(
        step_inputs["ids"], step_inputs["time"], step_inputs["memory_mask"], memories, caches
    )
    return encode, keras.Model(step_inputs, outputs, name="step")
