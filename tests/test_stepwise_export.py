"""Step-wise export: `encode` and `step` signatures that a loop outside the
graph drives one token at a time, decoding what the in-graph search decodes."""

import keras
import numpy as np
import onnxruntime
import pytest

import keras_attention as ka
from keras_attention.decoders import stepwise_models
from keras_attention.export import export_model
from tests.layer_cases import randomize_model

VOCABULARY, START, END, MAX_LENGTH = 11, 1, 2, 8
END_BIAS = {"gru": 3.0, "wrapper": 1.0}


def build(cell_kind):
    keras.utils.set_random_seed(3)
    source = keras.Input((None,), dtype="int32", name="source")
    embedded = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    memory, h, c = keras.layers.LSTM(8, return_sequences=True, return_state=True)(embedded)
    if cell_kind == "wrapper":
        cell = ka.AttentionWrapper(keras.layers.LSTMCell(8), ka.GeneralAttention(), attention_layer_size=8)
        state = [h, c]
    else:
        cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(5))
        state = [h]
    readout = keras.layers.Dense(VOCABULARY)
    decoder = ka.InferenceDecoder(cell, keras.layers.Embedding(VOCABULARY, 6), readout, START, END, MAX_LENGTH)
    greedy = keras.Model(source, decoder(memory, initial_state=state))
    randomize_model(greedy, np.random.default_rng(0), scale=0.8)
    bias = readout.bias.numpy()
    bias[END] += END_BIAS[cell_kind]  # rows end at different steps
    readout.bias.assign(bias)
    encode, step = stepwise_models(decoder, source, memory, initial_state=state)
    return greedy, encode, step


def drive(encode_fn, step_fn, source):
    """Greedy decoding in Python over the two halves."""
    state = encode_fn(source)
    batch = len(source)
    ids = np.full((batch,), START, np.int32)
    out_ids = np.full((batch, MAX_LENGTH), END, np.int32)
    finished = np.zeros(batch, bool)
    lengths = np.zeros(batch, np.int32)
    for t in range(MAX_LENGTH):
        out = step_fn({"ids": ids, **state})
        token = np.where(finished, END, out["logits"].argmax(-1)).astype(np.int32)
        out_ids[:, t] = token
        lengths += ~finished
        finished |= token == END
        state = {**state, **{k[len("next_") :]: v for k, v in out.items() if k.startswith("next_state_")}}
        ids = token
        if finished.all():
            break
    return out_ids, lengths


@pytest.mark.parametrize("cell_kind", ["gru", "wrapper"])
def test_an_onnx_step_loop_decodes_what_the_in_graph_search_decodes(cell_kind, tmp_path):
    greedy, encode, step = build(cell_kind)
    rng = np.random.default_rng(1)
    source = rng.integers(1, VOCABULARY, size=(5, 6)).astype("int32")
    source[2, 3:] = 0  # padding: the mask travels through encode's memory_mask
    want = greedy.predict(source, verbose=0)
    assert len(set(want["lengths"].tolist())) > 1  # rows end at different steps

    keras_ids, keras_lengths = drive(
        lambda s: {k: np.asarray(v) for k, v in encode.predict(s, verbose=0).items()},
        lambda feeds: {k: np.asarray(v) for k, v in step.predict(feeds, verbose=0).items()},
        source,
    )
    np.testing.assert_array_equal(keras_ids, want["ids"])
    np.testing.assert_array_equal(keras_lengths, want["lengths"])

    report = export_model({"encode": encode, "step": step}, tmp_path / "export")
    # Both signatures in both formats match Keras (the report's parity rows).
    assert report.ok and {(r.signature, r.format) for r in report.parity} == {
        (name, fmt) for name in ("encode", "step") for fmt in ("saved_model", "onnx")
    }
    sessions = {
        name: onnxruntime.InferenceSession(
            str(tmp_path / "export" / f"{name}.onnx"), providers=["CPUExecutionProvider"]
        )
        for name in ("encode", "step")
    }

    def run(name, feeds):
        session = sessions[name]
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})))

    onnx_ids, onnx_lengths = drive(lambda s: run("encode", {"source": s}), lambda f: run("step", f), source)
    np.testing.assert_array_equal(onnx_ids, want["ids"])
    np.testing.assert_array_equal(onnx_lengths, want["lengths"])
    assert {i.name for i in sessions["step"].get_inputs()} == {"ids", "values", "keys", "memory_mask"} | {
        f"state_{i}" for i in range(len(encode.outputs) - 3)
    }


def test_stepwise_models_refuse_what_is_not_a_built_decoder():
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(5))
    decoder = ka.InferenceDecoder(cell, keras.layers.Embedding(9, 4), keras.layers.Dense(9), 1, 2, 5)
    source = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(9, 6)(source)
    with pytest.raises(ValueError, match=r"`decoder` 'inference_decoder.*' is not built"):
        stepwise_models(decoder, source, memory)
    with pytest.raises(ValueError, match=r"`decoder` must be an InferenceDecoder; got"):
        stepwise_models(cell, source, memory)
