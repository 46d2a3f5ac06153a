"""`TransformerInferenceDecoder`: cached steps equal recomputing the prefix; every search, control,
run-time option and n-best; an ensemble with an LSTM model; export with the loop inside; training."""

import keras
import numpy as np
import onnxruntime
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.export import export_model
from tests.layer_cases import randomize

V, D, START, END, MAX_LENGTH = 9, 16, 1, 2, 6
SOURCE = np.array([[3, 4, 5, 6, 7], [8, 3, 4, 0, 0], [5, 5, 6, 7, 0]], "int32")


class Transformer:
    """A tiny encoder-decoder: shared layers, a teacher-forced model and decoders over them."""

    def __init__(self, seed=0, rotary=False, position="sinusoidal"):
        keras.utils.set_random_seed(seed)
        self.embedding = keras.layers.Embedding(V, D, mask_zero=True)
        self.target_embedding = keras.layers.Embedding(V, D)
        if position == "sinusoidal":
            self.position = ka.SinusoidalPositionEncoding()
        else:
            self.position = ka.LearnedPositionEmbedding(MAX_LENGTH + 2)
        self.encoder = ka.TransformerEncoderStack(2, num_heads=2, intermediate_dim=32)
        self.stack = ka.TransformerDecoderStack(2, num_heads=2, intermediate_dim=32, use_rotary=rotary)
        self.readout = keras.layers.Dense(V)
        source = keras.Input((None,), dtype="int32", name="source")
        target = keras.Input((None,), dtype="int32", name="target")
        self.memory = self.encoder(ka.SinusoidalPositionEncoding()(self.embedding(source)))
        self.encode = keras.Model(source, self.memory)
        logits = self.readout(self.stack(self.position(self.target_embedding(target)), self.memory))
        self.trainer = keras.Model([source, target], logits)
        randomize(self.trainer, np.random.default_rng(seed))
        self.source = source

    def decoder(self, **options):
        options.setdefault("return_token_log_probs", True)
        return ka.TransformerInferenceDecoder(
            self.stack, self.target_embedding, self.readout, START, END, MAX_LENGTH, position=self.position, **options
        )

    def teacher_forced_log_probs(self, source, ids):
        """log p(y_t | y_<t, x) recomputed over the whole prefix, `(N, L, V)`."""
        targets = np.concatenate([np.full((len(ids), 1), START), ids[:, :-1]], 1).astype("int32")
        logits = ops.convert_to_numpy(self.trainer([source, targets]))
        return (
            logits
            - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
            - logits.max(-1, keepdims=True)
        )


@pytest.fixture(scope="module")
def transformer():
    return Transformer()


def _rows(result):
    """ids, lengths, token log-probs with any beam axis folded into the batch."""
    ids = ops.convert_to_numpy(result["ids"])
    fold = ids.shape[0] * (ids.shape[1] if ids.ndim == 3 else 1)
    return (
        ids.reshape(fold, -1),
        ops.convert_to_numpy(result["lengths"]).reshape(fold),
        ops.convert_to_numpy(result["token_log_probs"]).reshape(fold, -1),
    )


def _assert_recomputed(transformer, result, atol=1e-5):
    """Every produced token's log-probability equals the teacher-forced model's on that prefix."""
    ids, lengths, token_log_probs = _rows(result)
    sources = np.repeat(SOURCE, len(ids) // len(SOURCE), axis=0)
    full = transformer.teacher_forced_log_probs(sources, ids)
    for row in range(len(ids)):
        for t in range(lengths[row]):
            assert token_log_probs[row, t] == pytest.approx(full[row, t, ids[row, t]], abs=atol), (row, t)
    return ids, lengths, full


@pytest.mark.parametrize("rotary", [False, True], ids=["sinusoidal", "rotary"])
def test_every_cached_step_s_logits_equal_recomputing_the_prefix(rotary):
    """Driven step by step along fixed ids: each step's whole logits vector, to 1e-5."""
    transformer = Transformer(seed=1, rotary=rotary)
    decoder = transformer.decoder()
    memory = transformer.encode(SOURCE)
    memory_mask = SOURCE != 0
    prepared, caches = decoder.prepare_search(memory, memory_mask)
    ids = np.random.default_rng(0).integers(3, V, size=(len(SOURCE), MAX_LENGTH)).astype("int32")
    want = transformer.teacher_forced_log_probs(SOURCE, ids)
    previous = np.full((len(SOURCE),), START, "int32")
    for t in range(MAX_LENGTH):
        logits, caches, alignment = decoder.decode_step(previous, caches, prepared, ops.convert_to_tensor(t, "int32"))
        logits = ops.convert_to_numpy(logits)
        log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        np.testing.assert_allclose(log_probs - logits.max(-1, keepdims=True), want[:, t], atol=1e-5)
        assert (ops.convert_to_numpy(alignment)[1, 3:] == 0).all()  # source padding
        previous = ids[:, t]


def test_greedy_picks_the_recomputed_argmax(transformer):
    result = transformer.decoder()(transformer.encode(SOURCE))
    ids, lengths, full = _assert_recomputed(transformer, result)
    for row in range(len(ids)):
        np.testing.assert_array_equal(ids[row, : lengths[row]], full[row, : lengths[row]].argmax(-1))


def test_beam_search_reorders_the_caches_with_its_hypotheses(transformer):
    """Each returned beam's tokens were scored on its own prefix: the cache followed every reorder."""
    decoder = transformer.decoder(method="beam", beam_width=4, length_penalty_weight=0.6, num_hypotheses=3)
    result = decoder(transformer.encode(SOURCE))
    assert tuple(result["ids"].shape) == (3, 3, MAX_LENGTH)
    ids, lengths, _ = _assert_recomputed(transformer, result)
    assert len({tuple(row) for row in ids.reshape(3, 3, -1)[0]}) == 3  # distinct hypotheses
    scores = ops.convert_to_numpy(result["scores"])
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # n-best, best first


def test_sampling_with_a_seed_scores_its_draws(transformer):
    decoder = transformer.decoder(method="sample", seed=3, top_k=4)
    first = decoder(transformer.encode(SOURCE))
    again = transformer.decoder(method="sample", seed=3, top_k=4)(transformer.encode(SOURCE))
    np.testing.assert_array_equal(ops.convert_to_numpy(first["ids"]), ops.convert_to_numpy(again["ids"]))
    ids, lengths, _ = _rows(first)
    full = transformer.teacher_forced_log_probs(SOURCE, ids)
    for row in range(len(ids)):
        for t in range(lengths[row]):
            # top_k: only one of the 4 likeliest tokens is drawn.
            assert ids[row, t] in np.argsort(full[row, t])[-4:]


def test_constraints_and_a_run_time_option(transformer):
    decoder = transformer.decoder(
        method="beam",
        beam_width=3,
        suppress_tokens=[4],
        runtime_options=("max_length", "length_penalty_weight"),
    )
    prefix = np.array([[5, 6], [7, -1], [-1, -1]], "int32")
    result = decoder(transformer.encode(SOURCE), target_prefix=prefix, options={"max_length": [3, 4, 5]})
    ids = ops.convert_to_numpy(result["ids"])
    lengths = ops.convert_to_numpy(result["lengths"])
    assert (ids[0, :, :2] == [5, 6]).all() and (ids[1, :, 0] == 7).all()
    assert (lengths <= np.array([3, 4, 5])[:, None]).all()
    produced = np.concatenate([ids[b, k, : lengths[b, k]] for b in range(3) for k in range(3)])
    assert 4 not in produced


def test_an_ensemble_mixes_an_lstm_model_and_the_transformer(transformer):
    lstm = ka.InferenceDecoder(
        ka.AttentionLSTMCell(12, ka.AdditiveAttention(8)),
        keras.layers.Embedding(V, 6),
        keras.layers.Dense(V),
        START,
        END,
        MAX_LENGTH,
    )
    memory = transformer.encode(SOURCE)
    ensemble = ka.EnsembleDecoder(
        [lstm, transformer.decoder()], method="greedy", return_token_log_probs=True, max_length=MAX_LENGTH
    )
    result = ensemble([memory, memory], memory_mask=SOURCE != 0)
    ids, lengths, token_log_probs = _rows(result)
    # The mixture recomputed member by member along the chosen ids.
    members = []
    for member in ensemble.members:
        if isinstance(member, ka.InferenceDecoder):
            prepared = member.cell.prepare_memory(memory, SOURCE != 0)
            states = member.cell.initial_state_for(prepared, len(SOURCE), None)
        else:
            prepared, states = member.prepare_search(memory, SOURCE != 0)
        members.append([member, prepared, states])
    previous = np.full((len(SOURCE),), START, "int32")
    for t in range(MAX_LENGTH):
        probs = []
        for entry in members:
            member, prepared, states = entry
            logits, entry[2], _ = member.decode_step(previous, states, prepared, ops.convert_to_tensor(t, "int32"))
            probs.append(ops.convert_to_numpy(ops.softmax(logits)))
        mixture = np.log(np.mean(probs, axis=0))
        for row in range(len(ids)):
            if t < lengths[row]:
                assert ids[row, t] == mixture[row].argmax()
                assert token_log_probs[row, t] == pytest.approx(mixture[row, ids[row, t]], abs=1e-5)
        previous = ids[:, t]
    # One member alone decodes what it decodes alone.
    alone = ka.EnsembleDecoder([transformer.decoder()], return_token_log_probs=True)([memory])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(alone["ids"]), ops.convert_to_numpy(transformer.decoder()(memory)["ids"])
    )


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="export runs on TensorFlow")
def test_exports_with_the_loop_inside_with_parity(transformer, tmp_path):
    decoder = transformer.decoder(
        method="beam", beam_width=3, length_penalty_weight=0.6, return_alignments=False, return_token_log_probs=False
    )
    decoded = decoder(transformer.memory)
    model = keras.Model(transformer.source, {"ids": decoded["ids"], "scores": decoded["scores"]})
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": SOURCE}])
    assert report.ok
    assert report.max_abs_diff("onnx", "ids") == 0 and report.max_abs_diff("saved_model", "ids") == 0
    assert report.max_abs_diff("onnx", "scores") < 1e-4 and report.max_abs_diff("saved_model", "scores") < 1e-4


def test_the_teacher_forced_model_trains_and_the_decoder_reproduces_what_it_learned():
    transformer = Transformer(seed=2, position="learned")
    targets = np.array([[3, 4, 5, END], [6, 7, END, END], [8, 3, 6, END]], "int32")
    inputs = np.concatenate([np.full((3, 1), START), targets[:, :-1]], 1).astype("int32")
    transformer.trainer.compile(
        keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    ka.training.build_optimizer(transformer.trainer)
    history = transformer.trainer.fit([SOURCE, inputs], targets, epochs=60, batch_size=3, verbose=0)
    assert history.history["loss"][-1] < 0.1 * history.history["loss"][0]
    decoded = transformer.decoder(method="beam", beam_width=2)(transformer.encode(SOURCE))
    best = ops.convert_to_numpy(decoded["ids"])[:, 0]
    for row, target in zip(best, targets):
        length = list(target).index(END) + 1
        np.testing.assert_array_equal(row[:length], target[:length])


def test_bad_arguments_name_themselves(transformer):
    with pytest.raises(ValueError, match=r"TransformerInferenceDecoder: `stack` must be a TransformerDecoderStack"):
        ka.TransformerInferenceDecoder(
            keras.layers.Dense(3), transformer.target_embedding, transformer.readout, 1, 2, 4
        )
    decoder = transformer.decoder()
    with pytest.raises(ValueError, match=r"`initial_state` must be None"):
        decoder(transformer.encode(SOURCE), initial_state=[np.zeros((3, 4))])
    # An ensemble searching longer than the caches hold is refused where it is built.
    message = rf"EnsembleDecoder: `max_length` must be at most {MAX_LENGTH}, the max_length of member 0 .*got {MAX_LENGTH + 1}"
    with pytest.raises(ValueError, match=message):
        ka.EnsembleDecoder([transformer.decoder()], max_length=MAX_LENGTH + 1)
    assert ka.EnsembleDecoder([transformer.decoder()], max_length=MAX_LENGTH - 1).max_length == MAX_LENGTH - 1


def _drive(encode_fn, step_fn, source):
    """Greedy decoding in Python over the step-wise halves, the caches fed back."""
    state = encode_fn(source)
    ids = np.full((len(source),), START, np.int32)
    out_ids = np.full((len(source), MAX_LENGTH), END, np.int32)
    finished = np.zeros(len(source), bool)
    for t in range(MAX_LENGTH):
        out = step_fn({"ids": ids, "time": np.full((len(source),), t, np.int32), **state})
        token = np.where(finished, END, out["logits"].argmax(-1)).astype(np.int32)
        out_ids[:, t], ids = token, token
        finished |= token == END
        state.update({k[len("next_") :]: v for k, v in out.items() if k.startswith("next_cache_")})
    return out_ids


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="export runs on TensorFlow")
def test_stepwise_models_with_the_caches_as_inputs_decode_what_the_search_decodes(transformer, tmp_path):
    decoder = transformer.decoder(return_alignments=False)
    want = ops.convert_to_numpy(decoder(transformer.encode(SOURCE))["ids"])
    encode, step = ka.transformer_stepwise_models(decoder, transformer.source, transformer.memory)
    assert {name for name in step.input if name.startswith("cache_")} == {
        f"cache_{kind}_{i}" for kind in ("key", "value") for i in range(2)
    }
    keras_ids = _drive(
        lambda s: {k: np.asarray(v) for k, v in encode.predict(s, verbose=0).items()},
        lambda feeds: {k: np.asarray(v) for k, v in step.predict(feeds, verbose=0).items()},
        SOURCE,
    )
    np.testing.assert_array_equal(keras_ids, want)
    first = {k: np.asarray(v) for k, v in encode.predict(SOURCE, verbose=0).items()}
    step_feeds = {"ids": np.full((len(SOURCE),), START, np.int32), "time": np.zeros(len(SOURCE), np.int32), **first}
    samples = {"encode": [{"source": SOURCE}], "step": [step_feeds]}
    report = export_model({"encode": encode, "step": step}, tmp_path / "export", sample_inputs=samples)
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

    np.testing.assert_array_equal(
        _drive(lambda s: run("encode", {"source": s}), lambda f: run("step", f), SOURCE), want
    )


def test_stepwise_models_refuse_what_is_not_a_built_transformer_decoder(transformer):
    with pytest.raises(ValueError, match=r"`decoder` must be a TransformerInferenceDecoder"):
        ka.transformer_stepwise_models(keras.layers.Dense(3), transformer.source, transformer.memory)
    fresh = Transformer(seed=5).decoder()
    with pytest.raises(ValueError, match=r"is not built: call it on the memory first"):
        ka.transformer_stepwise_models(fresh, transformer.source, transformer.memory)
