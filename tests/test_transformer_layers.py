"""The Transformer layers against NumPy references: positions, encoder and decoder layers, stacks, cached steps."""

import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests import reference_transformer as ref
from tests.layer_cases import randomize

pytestmark = pytest.mark.any_backend

B, T, TS, D = 2, 5, 6, 8
VALID = np.array([[True] * 5, [True] * 3 + [False] * 2])
MEMORY_VALID = np.array([[True] * 6, [True] * 2 + [False] * 4])


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, TS, D)).astype("float32"), rng


# ------------------------------------------------------------------ positions


def test_sinusoidal_encoding_matches_the_formula_from_any_start():
    x = np.random.default_rng(0).normal(size=(B, T, 7)).astype("float32")  # an odd size too
    layer = ka.SinusoidalPositionEncoding()
    np.testing.assert_allclose(to_numpy(layer(x)), x + ref.sinusoids(range(T), 7), atol=1e-5)
    np.testing.assert_allclose(to_numpy(layer(x, start=3)), x + ref.sinusoids(range(3, 3 + T), 7), atol=1e-5)


def test_learned_embedding_adds_its_rows_from_start():
    x = np.random.default_rng(1).normal(size=(B, 3, D)).astype("float32")
    layer = ka.LearnedPositionEmbedding(6)
    layer(x)
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(to_numpy(layer(x, start=2)), x + table[2:5], atol=1e-6)
    with pytest.raises(ValueError, match=r"LearnedPositionEmbedding: positions 4..6 go past `max_length` 6"):
        layer(x, start=4)
    with pytest.raises(ValueError, match=r"`start` must be a position >= 0; got -1"):
        layer(x, start=-1)


def test_rotary_matches_the_pairwise_rotation_and_scores_depend_on_offsets_only():
    rng = np.random.default_rng(2)
    heads = rng.normal(size=(B, T, 2, D)).astype("float32")
    rotary = ka.RotaryPositionEmbedding()
    np.testing.assert_allclose(to_numpy(rotary(heads)), ref.rotate(heads, range(T)), atol=1e-5)
    np.testing.assert_allclose(to_numpy(rotary(heads, start=4)), ref.rotate(heads, range(4, 4 + T)), atol=1e-5)
    q, k = rng.normal(size=(1, 1, D)).astype("float32"), rng.normal(size=(1, 1, D)).astype("float32")

    def score(m, n):
        return float(np.sum(to_numpy(rotary(q, start=m)) * to_numpy(rotary(k, start=n))))

    assert score(7, 3) == pytest.approx(score(12, 8), abs=1e-4)
    np.testing.assert_allclose(
        np.linalg.norm(to_numpy(rotary(heads)), axis=-1), np.linalg.norm(heads, axis=-1), rtol=1e-5
    )
    with pytest.raises(ValueError, match=r"RotaryPositionEmbedding: the last dimension of `inputs` must be even"):
        rotary(np.ones((1, 2, 3), "float32"))


# ------------------------------------------------------------------- layers


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
@pytest.mark.parametrize("use_rotary", [False, True], ids=["absolute", "rotary"])
def test_encoder_layer_matches_numpy(norm_first, use_rotary):
    x, _, rng = inputs()
    layer = ka.TransformerEncoderLayer(2, 16, norm_first=norm_first, use_rotary=use_rotary)
    layer(x)
    randomize(layer, rng)
    got = to_numpy(layer(x, mask=VALID))
    want = ref.encoder_layer(layer, x, VALID)
    np.testing.assert_allclose(got[VALID], want[VALID], atol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
@pytest.mark.parametrize("use_rotary", [False, True], ids=["absolute", "rotary"])
def test_decoder_layer_matches_numpy(norm_first, use_rotary):
    x, memory, rng = inputs(1)
    layer = ka.TransformerDecoderLayer(2, 16, norm_first=norm_first, use_rotary=use_rotary)
    layer(x, memory)
    randomize(layer, rng)
    got = to_numpy(layer(x, memory, mask=VALID, memory_mask=MEMORY_VALID))
    want = ref.decoder_layer(layer, x, memory, VALID, MEMORY_VALID)
    np.testing.assert_allclose(got[VALID], want[VALID], atol=1e-5)


def test_padding_and_future_positions_do_not_reach_valid_outputs():
    x, memory, rng = inputs(2)
    stack = ka.TransformerDecoderStack(2, num_heads=2, intermediate_dim=16)
    before = to_numpy(stack(x, memory, mask=VALID, memory_mask=MEMORY_VALID))
    changed_x, changed_memory = x.copy(), memory.copy()
    changed_x[1, 3:] += 10.0  # example 1's padding
    changed_x[0, 4] += rng.normal(size=D) * 10  # example 0's last position: the future of every other
    changed_memory[1, 2:] -= 10.0  # example 1's memory padding
    after = to_numpy(stack(changed_x, changed_memory, mask=VALID, memory_mask=MEMORY_VALID))
    np.testing.assert_allclose(after[0, :4], before[0, :4], atol=1e-5)
    np.testing.assert_allclose(after[1, :3], before[1, :3], atol=1e-5)
    assert not np.allclose(after[0, 4], before[0, 4])


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
def test_stacks_match_numpy(norm_first):
    x, memory, rng = inputs(3)
    encoder = ka.TransformerEncoderStack(2, num_heads=2, intermediate_dim=16, norm_first=norm_first)
    decoder = ka.TransformerDecoderStack(2, num_heads=2, intermediate_dim=16, norm_first=norm_first, use_rotary=True)
    assert (encoder.output_norm is not None) == norm_first
    encoded = encoder(memory)
    decoder(x, encoded)
    randomize(encoder, rng)
    randomize(decoder, rng)
    encoded = to_numpy(encoder(memory, mask=MEMORY_VALID))
    want = ref.encoder_stack(encoder, memory, MEMORY_VALID)
    np.testing.assert_allclose(encoded[MEMORY_VALID], want[MEMORY_VALID], atol=1e-5)
    got = to_numpy(decoder(x, encoded.astype("float32"), mask=VALID, memory_mask=MEMORY_VALID))
    want = ref.decoder_stack(decoder, x, encoded, VALID, MEMORY_VALID)
    np.testing.assert_allclose(got[VALID], want[VALID], atol=1e-5)


@pytest.mark.parametrize("use_rotary", [False, True], ids=["absolute", "rotary"])
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre_norm", "post_norm"])
def test_cached_steps_equal_the_whole_sequence(use_rotary, norm_first):
    """Position t stepped against the cache of 0..t-1 gives the full call's row t."""
    x, memory, rng = inputs(4)
    stack = ka.TransformerDecoderStack(
        3, num_heads=2, intermediate_dim=16, use_rotary=use_rotary, norm_first=norm_first
    )
    stack(x, memory)
    randomize(stack, rng)
    full = to_numpy(stack(x, memory, memory_mask=MEMORY_VALID))
    projected = stack.project_memory(memory)
    caches = stack.initial_cache(B, T + 2)  # longer than used: the rest stays masked
    for t in range(T):
        y, caches, weights = stack.step(
            x[:, t : t + 1], caches, projected, MEMORY_VALID, ops.convert_to_tensor(t, "int32"), return_weights=True
        )
        np.testing.assert_allclose(to_numpy(y)[:, 0], full[:, t], atol=1e-5)
        weights = to_numpy(weights)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        assert (weights[1, :, 2:] == 0).all()
    keys = to_numpy(caches[0][0])
    # Laid out by head, (N, H, L, k): the positions past the last step are still zero.
    assert keys.shape == (B, 2, T + 2, D // 2) and (keys[:, :, T:] == 0).all()


def test_attend_heads_equals_attend_on_keys_and_values_laid_out_by_head():
    """The cached step's attention (keys and values `(B, H, Tv, k)`) against the layer's own
    `attend` (`(B, Tv, H, k)`): outputs and weights, and a row without a valid position outputs 0."""
    rng = np.random.default_rng(7)
    query, value = rng.normal(size=(B, 3, D)).astype("float32"), rng.normal(size=(B, TS, D)).astype("float32")
    attention = ka.MultiHeadAttention(num_heads=2, key_dim=4)
    attention(query, value)
    randomize(attention, rng)
    projected_query = attention.project_query(query)
    keys, values = attention.project_key(value), attention.project_value(value)
    mask = rng.random((B, 3, TS)) < 0.7
    mask[1, 2] = False
    want, want_weights = attention.attend(projected_query, keys, values, mask, return_attention_scores=True)
    by_head = [ops.transpose(tensor, (0, 2, 1, 3)) for tensor in (keys, values)]
    got, got_weights = attention.attend_heads(projected_query, *by_head, mask, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-5)
    np.testing.assert_allclose(to_numpy(got_weights), to_numpy(want_weights), atol=1e-6)
    assert (to_numpy(got)[1, 2] == 0).all() and np.abs(to_numpy(got)[0]).max() > 0.1


def test_config_round_trip_and_stack_seeds():
    stack = ka.TransformerEncoderStack(2, num_heads=2, intermediate_dim=16, dropout=0.1, seed=3, norm_first=False)
    config = stack.get_config()
    assert config["num_layers"] == 2 and config["seed"] == 3 and config["norm_first"] is False
    assert [layer.seed for layer in stack.transformer_layers] == [3, 1003]
    assert type(stack).from_config(config).get_config() == config


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match=r"TransformerEncoderLayer: `num_heads` must be a positive integer; got 0"):
        ka.TransformerEncoderLayer(0, 16)
    with pytest.raises(ValueError, match=r"TransformerDecoderLayer: `dropout` must be a number in \[0, 1\); got 1.5"):
        ka.TransformerDecoderLayer(2, 16, dropout=1.5)
    with pytest.raises(ValueError, match=r"the model size 7 must divide by `num_heads` 2"):
        ka.TransformerEncoderLayer(2, 16)(np.ones((1, 2, 7), "float32"))
    with pytest.raises(ValueError, match=r"`use_rotary` needs an even head size; got key_dim 3"):
        ka.TransformerEncoderLayer(2, 16, use_rotary=True)(np.ones((1, 2, 6), "float32"))
    with pytest.raises(ValueError, match=r"TransformerEncoderStack: `num_layers` must be a positive integer; got 0"):
        ka.TransformerEncoderStack(0, num_heads=2, intermediate_dim=4)
