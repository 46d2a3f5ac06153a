"""PointerNetwork on the shared search strategies: beam search (and the refilling beam search)
against a brute force over every pointer sequence, n-best, diverse groups, run-time options and
constraints on positions."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.decoding import (
    AlternativesSearch,
    BeamSearch,
    DiverseBeamSearch,
    GreedySearch,
    RefillingBeamSearch,
)
from keras_attention.models.pointer import END, PointerNetwork

pytestmark = pytest.mark.any_backend

LENGTHS = (3, 2)  # the second example is padded to 3
MAX_LENGTH = 4


@pytest.fixture(scope="module")
def network():
    keras.utils.set_random_seed(3)
    network = PointerNetwork(8, max_length=MAX_LENGTH)
    numbers = np.random.default_rng(3).normal(size=(2, 3, 2)).astype("float32")
    network(numbers)
    # Sharper scores than an untrained network's: hypotheses far apart.
    attention = network.pointer.additive
    attention.score_vector.assign(np.asarray(attention.score_vector) * 4)
    mask = np.arange(3)[None] < np.array(LENGTHS)[:, None]
    return network, numbers, mask


def copy_of(network, numbers, **config):
    """The network from its config with `config` changed, its weights copied."""
    layer = PointerNetwork.from_config({**network.get_config(), **config})
    layer.build(numbers.shape)
    layer.set_weights(network.get_weights())
    return layer


def numpy_of(result):
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


def brute_force(network, numbers, mask, alpha=0.0):
    """Every pointer sequence of each example (distinct valid positions, then
    the end), scored by teacher forcing, best first: (ids, score, log_prob, length)."""
    everything = []
    for b, length in enumerate(LENGTHS):
        sequences = [
            list(order) + [END] * (MAX_LENGTH - len(order))
            for size in range(length + 1)
            for order in itertools.permutations(range(1, length + 1), size)
        ]
        targets = np.array(sequences, "int32")
        rows = len(targets)
        logits = ops.convert_to_numpy(
            network([np.repeat(numbers[b : b + 1], rows, 0), targets], mask=np.repeat(mask[b : b + 1], rows, 0))
        ).astype("float64")
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        lengths = (targets != END).sum(1) + 1  # the end counted
        totals = np.array([picked[r, : lengths[r]].sum() for r in range(rows)])
        scores = totals / ((5 + lengths) / 6) ** alpha
        order = np.argsort(-scores, kind="stable")
        everything.append((targets[order], scores[order], totals[order], lengths[order]))
    return everything


SEARCHES = {
    "beam": BeamSearch,
    # Every sequence enters its pool too; its form of the length penalty made BeamSearch's.
    "refilling_beam": lambda width, alpha: RefillingBeamSearch(width, alpha, length_penalty_form="gnmt"),
}


@pytest.mark.parametrize("alpha, search", [(0.0, "beam"), (0.8, "beam"), (0.8, "refilling_beam")])
def test_beam_search_over_the_pointer_is_the_brute_force_over_every_sequence(network, alpha, search):
    network, numbers, mask = network
    width = 16  # 1 + 3 + 6 + 6 sequences of 3 inputs: the search keeps all of them
    got = numpy_of(network.decode(numbers, mask, search=SEARCHES[search](width, alpha)))
    for b, (ids, scores, log_probs, lengths) in enumerate(brute_force(network, numbers, mask, alpha)):
        assert np.diff(scores).max() < -1e-4  # no near tie: the order is the model's
        count = len(ids)
        np.testing.assert_array_equal(got["ids"][b, :count], ids)
        np.testing.assert_array_equal(got["lengths"][b, :count], lengths)
        np.testing.assert_allclose(got["scores"][b, :count], scores, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["log_probs"][b, :count], log_probs, rtol=1e-4, atol=1e-5)
        # Beyond the example's sequences (2 inputs: 5 of them) the beams are empty.
        assert (got["scores"][b, count:] == -np.inf).all() and (got["ids"][b, count:] == END).all()


def test_n_best_are_the_best_hypotheses_in_order(network):
    network, numbers, mask = network
    full = numpy_of(network.decode(numbers, mask, search=BeamSearch(6)))
    best = numpy_of(network.decode(numbers, mask, search=BeamSearch(6, num_hypotheses=3)))
    assert best["ids"].shape == (2, 3, MAX_LENGTH)
    for name in ("ids", "scores", "lengths"):
        np.testing.assert_array_equal(best[name], full[name][:, :3])
    assert (np.diff(best["scores"], axis=1) < 0).all()
    # The layer with that strategy returns the best one.
    layer = copy_of(network, numbers, search=BeamSearch(6, num_hypotheses=3))
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(numbers, mask=mask)), best["ids"][:, 0])


def test_diverse_groups_point_first_at_different_inputs(network):
    network, numbers, mask = network
    ids = numpy_of(network.decode(numbers, search=DiverseBeamSearch(4, num_groups=4, diversity_strength=50.0)))["ids"]
    for example in ids:  # 3 inputs and the end: four first pointers
        assert sorted(example[:, 0].tolist()) == [0, 1, 2, 3]
    plain = numpy_of(network.decode(numbers, search=BeamSearch(4)))["ids"]
    assert any(len(set(example[:, 0].tolist())) < 4 for example in plain)


def test_a_runtime_option_changes_the_output_as_a_layer_built_with_it(network):
    network, numbers, mask = network
    default = numpy_of(network.decode(numbers, mask, search=BeamSearch(6)))
    per_example = numpy_of(
        network.decode(numbers, mask, search=BeamSearch(6), options={"length_penalty_weight": [0.0, 5.0]})
    )
    built = numpy_of(network.decode(numbers, mask, search=BeamSearch(6, 5.0)))
    np.testing.assert_array_equal(per_example["ids"][0], default["ids"][0])
    np.testing.assert_array_equal(per_example["ids"][1], built["ids"][1])
    assert not np.array_equal(per_example["ids"][1], default["ids"][1])
    # max_length and min_length per request: what a decode with those values gives, padded with the end.
    request = numpy_of(network.decode(numbers, mask, options={"max_length": [2, 4], "min_length": [1, 2]}))
    first = numpy_of(network.decode(numbers, mask, max_length=2, min_length=1))
    np.testing.assert_array_equal(request["ids"][0, :2], first["ids"][0])
    assert (request["ids"][0, 2:] == END).all() and request["ids"][0, 0] != END
    np.testing.assert_array_equal(request["ids"][1], numpy_of(network.decode(numbers, mask, min_length=2))["ids"][1])
    np.testing.assert_array_equal(request["lengths"], [2, 3])  # one pointer (max_length 2), two (min_length 2)


def test_the_constraints_restrict_the_positions(network):
    network, numbers, mask = network
    allowed = np.ones((2, 4), bool)
    allowed[0, [1, 3]] = False  # example 0 may point at input 2 only
    beams = numpy_of(network.decode(numbers, mask, search=BeamSearch(3), allowed_positions=allowed))["ids"]
    assert set(beams[0].ravel().tolist()) <= {END, 2}
    # At least two pointers before the end, for every hypothesis.
    ids = numpy_of(network.decode(numbers, mask, search=BeamSearch(4), min_length=2))
    valid = np.isfinite(ids["scores"])
    assert (ids["lengths"][valid] >= 3).all() and (ids["ids"][:, :, :2][valid] != END).all()
    # Example 1 has two inputs: both orders, and no other hypothesis.
    assert valid[0].all() and sorted(ids["ids"][1, valid[1], :2].tolist()) == [[1, 2], [2, 1]]
    # A forced first pointer, then the search.
    forced = numpy_of(network.decode(numbers, mask, prefix=np.array([[3, -1], [2, 1]], "int32")))["ids"]
    assert forced[0, 0] == 3 and forced[1, :2].tolist() == [2, 1]


def test_alternatives_part_where_the_forced_pointers_end(network):
    network, numbers, mask = network
    prefix = np.array([[3, -1], [-1, -1]], "int32")
    result = numpy_of(network.decode(numbers, mask, search=AlternativesSearch(2), prefix=prefix))
    assert result["ids"].shape == (2, 2, MAX_LENGTH) and result["ids"][0, :, 0].tolist() == [3, 3]
    # The two inputs left to point at, never the end, right after the forced pointers.
    assert sorted(result["ids"][0, :, 1].tolist()) == [1, 2] and sorted(result["ids"][1, :, 0].tolist()) == [1, 2]
    # Alternative 0 is greedy search with the end forbidden where the alternatives part.
    greedy = numpy_of(network.decode(numbers, mask, prefix=prefix, options={"min_length": [2, 1]}))
    np.testing.assert_array_equal(result["ids"][:, 0], greedy["ids"])
    np.testing.assert_allclose(result["scores"][:, 0], greedy["scores"], atol=1e-5)


def test_the_search_round_trips_through_the_config(network, tmp_path):
    network, numbers, mask = network
    strategy = DiverseBeamSearch(4, num_groups=2, diversity_strength=2.0)
    layer = copy_of(network, numbers, search=strategy, name="diverse_pointer")
    config = layer.get_config()
    assert config["search"]["config"] == strategy.get_config()
    again = PointerNetwork.from_config(config)
    assert again.search.get_config() == strategy.get_config()
    inputs = keras.Input((3, 2))
    model = keras.Model(inputs, layer(keras.layers.Masking(0.0)(inputs)))
    model.save(tmp_path / "pointer.keras")
    loaded = keras.saving.load_model(tmp_path / "pointer.keras")
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded(numbers)), ops.convert_to_numpy(model(numbers)))
    assert isinstance(loaded.get_layer("diverse_pointer").search, DiverseBeamSearch)


def test_bad_requests_are_refused_by_name(network):
    network, numbers, mask = network
    with pytest.raises(ValueError, match=r"PointerNetwork: `options` sets \['temperature'\], which GreedySearch"):
        network.decode(numbers, options={"temperature": 0.5})
    with pytest.raises(ValueError, match=r"PointerNetwork: give the search either as `search`.*beam_width=3"):
        PointerNetwork(4, beam_width=3, search=GreedySearch())


def test_call_takes_the_runtime_options_as_decode_does(network):
    network, numbers, mask = network
    lengths = copy_of(network, numbers, runtime_options=("max_length", "min_length"))
    request = {"max_length": [2, 4], "min_length": [1, 2]}
    want = numpy_of(network.decode(numbers, mask, options=request))["ids"]
    np.testing.assert_array_equal(ops.convert_to_numpy(lengths(numbers, mask=mask, options=request)), want)
    assert want[0, 0] != END and (want[0, 2:] == END).all()  # at most two ids, the first no end (max_length 2)
    assert sorted(want[1, :2]) == [1, 2] and want[1, 2] == END  # two before the end (min_length 2)
    # None, or a missing key, is the constructor's value (max_length 4, min_length 0).
    default = ops.convert_to_numpy(network(numbers, mask=mask))
    np.testing.assert_array_equal(ops.convert_to_numpy(lengths(numbers, mask=mask)), default)
    for options in ({"max_length": None, "min_length": None}, {"min_length": [0, 0]}):
        np.testing.assert_array_equal(ops.convert_to_numpy(lengths(numbers, mask=mask, options=options)), default)
    one = ops.convert_to_numpy(lengths(numbers, mask=mask, options={"min_length": 2}))  # one value for the batch
    np.testing.assert_array_equal(one, numpy_of(network.decode(numbers, mask, min_length=2))["ids"])
    # A beam search's run-time field: the best hypothesis of decode with that option.
    beam = copy_of(network, numbers, search=BeamSearch(6), runtime_options=("length_penalty_weight", "max_length"))
    request = {"length_penalty_weight": [0.0, 5.0]}
    best = numpy_of(network.decode(numbers, mask, search=BeamSearch(6), options=request))["ids"][:, 0]
    np.testing.assert_array_equal(ops.convert_to_numpy(beam(numbers, mask=mask, options=request)), best)
    plain = numpy_of(network.decode(numbers, mask, search=BeamSearch(6)))["ids"][:, 0]
    assert not np.array_equal(best, plain)


def test_option_inputs_feed_a_functional_model(network):
    network, numbers, mask = network
    layer = copy_of(network, numbers, search=BeamSearch(3), runtime_options=("length_penalty_weight", "min_length"))
    assert layer.option_specs() == {
        "length_penalty_weight": {"dtype": "float32", "default": 0.0, "minimum": 0, "strict": False, "maximum": None},
        "min_length": {"dtype": "int32", "default": 0, "minimum": 0, "strict": False, "maximum": MAX_LENGTH - 1},
    }
    inputs = keras.Input((None, 2), name="numbers")
    options = layer.option_inputs()
    assert {name: (tensor.shape, tensor.dtype) for name, tensor in options.items()} == {
        "length_penalty_weight": ((None,), "float32"),
        "min_length": ((None,), "int32"),
    }
    outputs = layer(keras.layers.Masking(0.0)(inputs), options=options)
    model = keras.Model({"numbers": inputs, **options}, {"ids": outputs})
    padded = numbers * mask[..., None]  # the padding is zeros: Masking finds the mask
    request = {"numbers": padded, "length_penalty_weight": None, "min_length": np.array([3, 2], "int32")}
    served = ops.convert_to_numpy(model(request)["ids"])
    np.testing.assert_array_equal(
        served, ops.convert_to_numpy(layer(numbers, mask=mask, options={"min_length": [3, 2]}))
    )
    # Every input of example 0, both real ones of example 1: its padding is masked (unmasked, it may be taken).
    np.testing.assert_array_equal(np.sort(served[0, :3]), [1, 2, 3])
    np.testing.assert_array_equal(np.sort(served[1, :2]), [1, 2])
    assert (served[:, 3:] == END).all() and served[1, 2] == END
    unmasked = ops.convert_to_numpy(layer(padded, options={"min_length": [3, 3]}))
    np.testing.assert_array_equal(np.sort(unmasked[1, :3]), [1, 2, 3])
    # Left out, an option is the constructor's.
    default = ops.convert_to_numpy(layer(numbers, mask=mask))
    np.testing.assert_array_equal(ops.convert_to_numpy(model({**request, "min_length": None})["ids"]), default)
    assert not np.array_equal(default, served)
    # The list of run-time options round-trips through the config.
    assert PointerNetwork.from_config(layer.get_config()).runtime_options == ("length_penalty_weight", "min_length")


def test_bad_runtime_options_are_refused_by_name(network):
    network, numbers, mask = network
    layer = copy_of(network, numbers, runtime_options=("max_length", "min_length"))
    for options, message in [
        ({"max_length": 5}, r"PointerNetwork: option `max_length` must be an integer from 1 to 4; got 5"),
        ({"max_length": [2, 0]}, r"option `max_length` must be an integer from 1 to 4; got \[2, 0\]"),
        ({"min_length": [1, 2, 3]}, r"option `min_length` must hold 0 values \(the default\), 1 .* or 2"),
        ({"min_length": 2, "max_length": [4, 2]}, r"option `min_length` must be below `max_length`"),
        ({"temperature": 1.0}, r"`options` sets \['temperature'\], which are not among its `runtime_options`"),
    ]:
        with pytest.raises(ValueError, match=message):
            layer(numbers, mask=mask, options=options)
    with pytest.raises(ValueError, match=r"which method='greedy' does not read \(it is an option of 'sample'"):
        PointerNetwork(4, max_length=4, runtime_options=("temperature",))
    with pytest.raises(ValueError, match=r"'repetition_penalty', which a pointer network's GreedySearch\(\) does not"):
        PointerNetwork(4, max_length=4, runtime_options=("repetition_penalty",))
    with pytest.raises(ValueError, match=r"cannot change at run time \(the beams are the loop's tensor shapes\)"):
        PointerNetwork(4, max_length=4, runtime_options=("beam_width",))
    with pytest.raises(ValueError, match=r"run-time options \['max_length'\] need `max_length`"):
        PointerNetwork(4, runtime_options=("max_length",))
    with pytest.raises(ValueError, match=r"teacher forcing \(\[inputs, targets\]\) takes none"):
        layer([numbers, np.zeros((2, 4), "int32")], options={"max_length": [2, 3]})
