"""Search strategies as registered, serializable objects, and the run-time option table derived from them."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention import decoding
from keras_attention.decoders.runtime_options import FIXED_OPTIONS, RUNTIME_OPTIONS
from keras_attention.decoding import BeamSearch, GreedySearch, SamplingSearch, beam_search, processors, strategies

pytestmark = pytest.mark.any_backend

VOCABULARY, END, STEPS = 4, 3, 3


def table_step(seed=0, batch=2):
    table = np.random.default_rng(seed).normal(size=(batch, STEPS, VOCABULARY, VOCABULARY)).astype("float32") * 2

    def step(ids, state, time):  # state: each row's example, which beam search tiles
        rows = ops.take(ops.convert_to_tensor(table), state, axis=0)
        at_time = ops.take(rows, ops.minimum(time, STEPS - 1), axis=1)  # (B, V, V)
        return ops.take_along_axis(at_time, ops.reshape(ops.cast(ids, "int32"), (-1, 1, 1)), axis=1)[:, 0], state

    return step, ops.arange(batch, dtype="int32")


def test_the_registry_finds_each_strategy_by_name():
    assert list(strategies.registered()) == [
        *("greedy", "sample", "beam", "alternatives", "constrained_beam", "diverse_beam", "epsilon", "typical"),
        *("eta", "min_p", "refilling_beam"),
    ]
    assert isinstance(decoding.get("greedy"), GreedySearch)
    assert isinstance(decoding.get("sample"), SamplingSearch)
    assert decoding.get("beam").beam_width == 4
    given = BeamSearch(2)
    assert decoding.get(given) is given
    with pytest.raises(
        ValueError,
        match=r"must be one of \['greedy', 'sample', 'beam', 'alternatives', 'constrained_beam', 'diverse_beam', "
        r"'epsilon', 'typical', 'eta', 'min_p', 'refilling_beam'\].*got 'nucleus'",
    ):
        decoding.get("nucleus")


def test_a_strategy_registered_for_a_session_is_forgotten_by_unregister():
    @strategies.register("greedy_for_a_test")
    class GreedyForATest(GreedySearch):
        pass

    assert isinstance(decoding.get("greedy_for_a_test"), GreedyForATest)
    strategies.unregister("greedy_for_a_test")
    assert "greedy_for_a_test" not in strategies.registered()
    with pytest.raises(ValueError, match="got 'greedy_for_a_test'"):
        decoding.get("greedy_for_a_test")
    with pytest.raises(ValueError, match=r"no search strategy is registered as 'greedy_for_a_test'; registered: \["):
        strategies.unregister("greedy_for_a_test")


@pytest.mark.parametrize(
    "strategy",
    [GreedySearch(), SamplingSearch(0.5, top_k=3, top_p=0.9, seed=7), BeamSearch(3, 0.6, 0.2, True, "tfa", 2)],
    ids=repr,
)
def test_a_strategy_round_trips_through_its_config(strategy):
    again = decoding.get(keras.saving.serialize_keras_object(strategy))
    assert type(again) is type(strategy)
    assert again.get_config() == strategy.get_config()
    assert tuple(strategy.get_config()) == type(strategy).fields()


def test_bad_fields_are_refused_by_the_strategys_name():
    with pytest.raises(ValueError, match=r"BeamSearch: `num_hypotheses` must be at most `beam_width` 2; got 3"):
        BeamSearch(2, num_hypotheses=3)
    with pytest.raises(ValueError, match=r"SamplingSearch: `top_p` must be in \(0, 1\]; got 1.5"):
        SamplingSearch(top_p=1.5)
    with pytest.raises(ValueError, match=r"BeamSearch: unknown `length_convention` 'gnmt'"):
        BeamSearch(length_convention="gnmt")


def test_beam_search_strategy_is_the_function_with_its_best_hypotheses():
    step, state = table_step()
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    got = BeamSearch(4, length_penalty_weight=0.5, num_hypotheses=2).search(step, state, **common)
    want = beam_search(step, state, 0, END, STEPS, 4, length_penalty_weight=0.5)
    for name in ("ids", "scores", "log_probs", "lengths"):
        np.testing.assert_array_equal(ops.convert_to_numpy(got[name]), ops.convert_to_numpy(want[name])[:, :2])
    # A run-time value overrides the strategy's field.
    alpha = ops.convert_to_tensor([0.0, 0.0])
    overridden = BeamSearch(4, length_penalty_weight=0.5).search(
        step, state, {"length_penalty_weight": alpha}, **common
    )
    plain = beam_search(step, state, 0, END, STEPS, 4)
    np.testing.assert_allclose(ops.convert_to_numpy(overridden["scores"]), ops.convert_to_numpy(plain["scores"]))


def test_the_runtime_option_table_is_derived_from_the_declarations():
    methods = tuple(strategies.registered())
    declared = {
        field.name: methods
        for field in (
            *strategies.LOOP_FIELDS,
            *(f for cls in processors.registered().values() for f in cls.runtime_fields),
        )
    }
    for name, strategy in strategies.registered().items():
        for field in strategy.runtime_fields:  # min_p's sampling fields are sample's too
            declared[field.name] = declared.get(field.name, ()) + (name,)
    assert {name: option.methods for name, option in RUNTIME_OPTIONS.items()} == declared
    assert RUNTIME_OPTIONS["top_p"].maximum == 1 and RUNTIME_OPTIONS["temperature"].strict
    assert RUNTIME_OPTIONS["seed"].methods == ("sample", "epsilon", "typical", "eta", "min_p")
    assert RUNTIME_OPTIONS["min_p"].methods == ("min_p",) and RUNTIME_OPTIONS["typical_p"].methods == ("typical",)
    # Every field of every strategy is classified: run-time, or fixed with a reason.
    for strategy in strategies.registered().values():
        for name in strategy.fields():
            assert name in RUNTIME_OPTIONS or FIXED_OPTIONS.get(name), name


def small_decoder(**options):
    keras.utils.set_random_seed(3)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    return ka.InferenceDecoder(cell, keras.layers.Embedding(9, 4), keras.layers.Dense(9), 1, 2, 5, **options)


def test_a_decoder_given_a_strategy_decodes_and_saves_as_the_keyword_form(tmp_path):
    memory = np.random.default_rng(2).normal(size=(2, 4, 6)).astype("float32")
    keyword = small_decoder(method="beam", beam_width=3, length_penalty_weight=0.6, num_hypotheses=2)
    strategy = small_decoder(search=BeamSearch(3, length_penalty_weight=0.6, num_hypotheses=2))
    assert strategy.method == "beam" and strategy.beam_width == 3 and strategy.num_hypotheses == 2
    want, got = keyword(memory), strategy(memory)
    assert tuple(got["ids"].shape) == (2, 2, 5)
    for name in ("ids", "scores", "lengths"):
        np.testing.assert_allclose(ops.convert_to_numpy(got[name]), ops.convert_to_numpy(want[name]), rtol=1e-6)
    source = keras.Input((4, 6))
    model = keras.Model(source, strategy(source))
    model.save(tmp_path / "strategy.keras")
    loaded = keras.saving.load_model(tmp_path / "strategy.keras")
    again = loaded(memory)
    np.testing.assert_array_equal(ops.convert_to_numpy(again["ids"]), ops.convert_to_numpy(got["ids"]))
    reloaded = [layer for layer in loaded.layers if isinstance(layer, ka.InferenceDecoder)][0]
    assert reloaded.get_config()["beam_width"] == 3 and reloaded.method == "beam"


def test_a_decoder_refuses_an_option_given_twice():
    with pytest.raises(ValueError, match=r"InferenceDecoder: `beam_width` is given both as a keyword \(5\)"):
        small_decoder(beam_width=5, search=BeamSearch(3))
    sampled = small_decoder(search="sample", runtime_options=["temperature"])
    assert sampled.method == "sample" and sampled.runtime_options == ("temperature",)
