"""sequence_loss / SequenceLoss against a NumPy reference of tfa's definitions."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.losses import SequenceLoss, sequence_loss
from keras_attention.training import build_optimizer

pytestmark = pytest.mark.any_backend


def _reference(logits, targets, weights):
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    return -picked * weights


def _div(a, b):
    return np.where(b == 0, 0.0, a / np.where(b == 0, 1.0, b))


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 5)).astype("float32")
    targets = rng.integers(0, 5, size=(3, 4)).astype("int32")
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], "float32")
    return logits, targets, weights


def test_all_averaging_options_match_the_reference(batch):
    logits, targets, weights = batch
    losses = _reference(logits.astype(np.float64), targets, weights)
    cases = {
        (True, True, False, False): losses.sum() / weights.sum(),
        (True, False, False, False): _div(losses.sum(1), weights.sum(1)),
        (False, True, False, False): _div(losses.sum(0), weights.sum(0)),
        (False, False, True, True): losses.sum() / (weights != 0).sum(),
        (False, False, True, False): _div(losses.sum(1), (weights != 0).sum(1)),
        (False, False, False, True): _div(losses.sum(0), (weights != 0).sum(0)),
        (False, False, False, False): losses,
    }
    for (avg_t, avg_b, sum_t, sum_b), want in cases.items():
        got = sequence_loss(
            logits,
            targets,
            weights,
            average_across_timesteps=avg_t,
            average_across_batch=avg_b,
            sum_over_timesteps=sum_t,
            sum_over_batch=sum_b,
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=str((avg_t, avg_b, sum_t, sum_b)))
    # The example with no real token contributes zero, not NaN.
    assert ops.convert_to_numpy(sequence_loss(logits, targets, weights, average_across_batch=False))[2] == 0.0


def test_keras_native_equivalent_and_the_loss_class(batch):
    logits, targets, weights = batch
    want = float(sequence_loss(logits, targets, weights))
    native = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    np.testing.assert_allclose(float(native(targets, logits, sample_weight=weights)), want, rtol=1e-5)
    np.testing.assert_allclose(float(SequenceLoss()(targets, logits, sample_weight=weights)), want, rtol=1e-5)
    restored = SequenceLoss.from_config(SequenceLoss(average_across_batch=False).get_config())
    np.testing.assert_allclose(
        restored(targets, logits, weights),
        sequence_loss(logits, targets, weights, average_across_batch=False),
        rtol=1e-6,
    )


def test_trains_a_model_with_padding_masks():
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(6, 8, mask_zero=True)(tokens)
    logits = keras.layers.Dense(6)(hidden)
    model = keras.Model(tokens, logits)
    # A rate that moves the logits off uniform in three steps, so that the
    # masked and unmasked losses differ clearly on every backend.
    # XLA on TensorFlow, jax.jit on JAX; on PyTorch jit_compile=True would be
    # torch.compile (20 s of compilation for three steps), so eager there.
    jit_compile = keras.backend.backend() != "torch"
    model.compile(keras.optimizers.Adam(0.05), loss=SequenceLoss(), jit_compile=jit_compile)
    build_optimizer(model)
    x = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], "int32")
    history = model.fit(x, x, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert history.history["loss"][-1] < history.history["loss"][0]
    # The Keras mask of the logits (from the padded ids) weights the tokens.
    want = float(ops.convert_to_numpy(sequence_loss(model(x), x, x != 0)))
    np.testing.assert_allclose(model.evaluate(x, x, verbose=0), want, rtol=1e-5)
    assert abs(want - float(ops.convert_to_numpy(sequence_loss(model(x), x)))) > 1e-3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"average_across_timesteps": True, "sum_over_timesteps": True},
            r"`average_across_timesteps` and `sum_over_timesteps` cannot both be true",
        ),
        (
            {"average_across_batch": True, "sum_over_batch": True},
            r"`average_across_batch` and `sum_over_batch` cannot both be true",
        ),
    ],
)
def test_conflicting_options(kwargs, message, batch):
    with pytest.raises(ValueError, match=message):
        sequence_loss(*batch, **kwargs)
    with pytest.raises(ValueError, match=message):
        SequenceLoss(**kwargs)


def test_shape_errors(batch):
    logits, targets, weights = batch
    with pytest.raises(ValueError, match=r"`logits` must have shape \(batch, time, vocabulary\); got shape \(3, 4\)"):
        sequence_loss(logits[..., 0], targets)
    with pytest.raises(ValueError, match=r"`weights` must have shape \(batch, time\); got shape \(3,\)"):
        sequence_loss(logits, targets, weights[:, 0])


def test_label_smoothing_matches_the_smoothed_target_distribution(batch):
    logits, targets, weights = batch
    smoothing, vocabulary = 0.1, logits.shape[-1]
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = np.full(log_probs.shape, smoothing / vocabulary)
    np.put_along_axis(target, targets[..., None], 1 - smoothing + smoothing / vocabulary, -1)
    want = ((-(target * log_probs).sum(-1)) * weights).sum() / weights.sum()
    np.testing.assert_allclose(sequence_loss(logits, targets, weights, label_smoothing=smoothing), want, rtol=1e-5)
    loss = SequenceLoss.from_config(SequenceLoss(label_smoothing=smoothing).get_config())
    np.testing.assert_allclose(loss(targets, logits, sample_weight=weights), want, rtol=1e-5)


def test_weights_of_another_shape_are_refused(batch):
    logits, targets, weights = batch
    with pytest.raises(ValueError, match=r"`weights` must have the shape of `targets` \(3, 4\); got \(3, 3\)"):
        sequence_loss(logits, targets, weights[:, :3])
    with pytest.raises(ValueError, match=r"`label_smoothing` must be a number in \[0, 1\); got 1.0"):
        SequenceLoss(label_smoothing=1.0)


def _masked_logits(logits, weights):
    """`logits` with the Keras mask `weights != 0`, set the public way (a masking layer)."""
    padded = np.where(weights[..., None] != 0, logits, 0.0).astype("float32")
    return padded, keras.layers.Masking(0.0)(padded)


def test_the_keras_mask_of_the_predictions_weights_the_tokens_on_every_backend(batch):
    # JAX arrays carry no attributes: Keras files their masks elsewhere, and
    # a loss reading `y_pred._keras_mask` found none there (issue 18).
    logits, targets, weights = batch
    padded, masked = _masked_logits(logits, weights)
    want = _reference(padded.astype(np.float64), targets, weights).sum() / weights.sum()
    np.testing.assert_allclose(float(SequenceLoss()(targets, masked)), want, rtol=1e-5)
    per_example = SequenceLoss(average_across_batch=False)(targets, masked)
    np.testing.assert_allclose(
        per_example, sequence_loss(padded, targets, weights, average_across_batch=False), rtol=1e-5
    )


def test_the_keras_mask_and_sample_weight_multiply(batch):
    # Keras's rule for every loss: a masked token never counts, whatever
    # its sample weight; the others count with their sample weight.
    logits, targets, weights = batch
    padded, masked = _masked_logits(logits, weights)
    sample_weight = np.array([[2, 1, 1, 3], [0, 1, 1, 1], [1, 1, 1, 1]], "float32")
    both = weights * sample_weight  # [[2, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]]
    want = _reference(padded.astype(np.float64), targets, both).sum() / both.sum()
    np.testing.assert_allclose(float(SequenceLoss()(targets, masked, sample_weight=sample_weight)), want, rtol=1e-5)
    with pytest.raises(
        ValueError, match=r"SequenceLoss: `sample_weight` must have shape \(batch, time\); got shape \(3,\)"
    ):
        SequenceLoss()(targets, masked, sample_weight=np.ones(3, "float32"))
