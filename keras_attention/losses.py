"""Masked per-token sequence loss with tfa.seq2seq's averaging options."""

import keras
from keras import ops

from keras_attention import _checks

__all__ = ["SequenceLoss", "sequence_loss"]


def _check_options(
    average_across_timesteps, average_across_batch, sum_over_timesteps, sum_over_batch, label_smoothing=0.0
):
    _checks.check_fraction("sequence_loss", "label_smoothing", label_smoothing)
    if average_across_timesteps and sum_over_timesteps:
        raise ValueError("sequence_loss: `average_across_timesteps` and `sum_over_timesteps` cannot both be true.")
    if average_across_batch and sum_over_batch:
        raise ValueError("sequence_loss: `average_across_batch` and `sum_over_batch` cannot both be true.")


def sequence_loss(
    logits,
    targets,
    weights=None,
    average_across_timesteps=True,
    average_across_batch=True,
    sum_over_timesteps=False,
    sum_over_batch=False,
    label_smoothing=0.0,
):
    """Weighted token cross-entropy over a batch of sequences, as tfa.seq2seq had it.

    With `l[b, t] = -log softmax(logits[b, t])[targets[b, t]] * w[b, t]`:

    - average across both (default): `sum(l) / sum(w)`, the mean over real tokens;
    - average across timesteps only: `(B,)`, `sum_t l / sum_t w`;
    - average across batch only: `(T,)`, `sum_b l / sum_b w`;
    - sum over both: `sum(l) / count(w != 0)`; over one axis: likewise per the
      other axis (tfa's definition: a weighted sum normalised by the count of
      non-zero weights);
    - none of them: the `(B, T)` weighted losses.

    With `label_smoothing = s` the target distribution is `(1 - s)` on the
    target token plus `s / V` on every token (Szegedy et al. 2016,
    arXiv:1512.00567): `l = (1 - s) * -log p[target] + s * mean_v -log p[v]`.

    Divisions by zero give zero. The Keras-native equivalent of the default is
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True,
    reduction="mean_with_sample_weight")` with the padding mask as
    `sample_weight` (or as the prediction's Keras mask).

    Args:
        logits: `(B, T, V)` unnormalised scores.
        targets: int `(B, T)`.
        weights: `(B, T)` (e.g. a padding mask); default all ones.
        label_smoothing: `s` in [0, 1).

    Returns:
        A float32 scalar, `(B,)`, `(T,)` or `(B, T)` tensor as above.
    """
    _check_options(average_across_timesteps, average_across_batch, sum_over_timesteps, sum_over_batch, label_smoothing)
    logits = ops.convert_to_tensor(logits)
    targets = ops.convert_to_tensor(targets)
    if len(logits.shape) != 3:
        raise ValueError(
            f"sequence_loss: `logits` must have shape (batch, time, vocabulary); got shape {tuple(logits.shape)}."
        )
    if len(targets.shape) != 2:
        raise ValueError(f"sequence_loss: `targets` must have shape (batch, time); got shape {tuple(targets.shape)}.")
    weights = ops.ones(ops.shape(targets), "float32") if weights is None else ops.cast(weights, "float32")
    if len(weights.shape) != 2:
        raise ValueError(f"sequence_loss: `weights` must have shape (batch, time); got shape {tuple(weights.shape)}.")
    if not all(map(_checks.same_dim, _checks.static_shape(weights.shape), _checks.static_shape(targets.shape))):
        raise ValueError(
            f"sequence_loss: `weights` must have the shape of `targets` {tuple(targets.shape)}; got {tuple(weights.shape)}."
        )
    logits = ops.cast(logits, "float32")
    losses = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    if label_smoothing:
        uniform = -ops.mean(ops.log_softmax(logits, axis=-1), axis=-1)
        losses = (1.0 - label_smoothing) * losses + label_smoothing * uniform
    losses = losses * weights

    if average_across_timesteps or average_across_batch:
        axis = None if (average_across_timesteps and average_across_batch) else (1 if average_across_timesteps else 0)
        total, divisor = ops.sum(losses, axis=axis), ops.sum(weights, axis=axis)
    elif sum_over_timesteps or sum_over_batch:
        axis = None if (sum_over_timesteps and sum_over_batch) else (1 if sum_over_timesteps else 0)
        nonzero = ops.cast(ops.not_equal(weights, 0.0), "float32")
        total, divisor = ops.sum(losses, axis=axis), ops.sum(nonzero, axis=axis)
    else:
        return losses
    return ops.divide_no_nan(total, divisor)


class _TokenWeights(keras.losses.Loss):
    """The `(B, T)` weights Keras gives a loss's tokens: `sample_weight` times
    the Keras mask of `y_pred` (either alone, or ones when neither is there).

    Keras 3 has no public accessor for a tensor's mask, and it does not
    always keep the mask on the tensor (JAX tracers take no attributes:
    Keras files their masks in a table of its own). Its
    `Loss.__call__` looks the mask up on every backend and merges it with
    `sample_weight`; this loss of all ones hands back what it merged.
    """

    def __init__(self):
        super().__init__(name="sequence_loss_weights", reduction=None, dtype="float32")

    def call(self, y_true, y_pred):
        return ops.ones_like(y_pred[..., 0])


@keras.saving.register_keras_serializable(package="keras_attention")
class SequenceLoss(keras.losses.Loss):
    """`sequence_loss` as a Keras loss: `model.compile(loss=SequenceLoss())`.

    Formula (default options): the mean token cross-entropy over real tokens,

        L = sum_{b,t} w[b,t] * -log softmax(y_pred[b,t])[y_true[b,t]] / sum_{b,t} w[b,t]

    where `w` is `sample_weight` times the Keras mask of the predictions
    (decoders fed padded targets carry one), either one alone when the other
    is absent, or all ones: Keras's own rule for a loss, a masked token never
    counts. The mask is looked up by Keras's loss machinery
    (`keras.losses.Loss.__call__`), which finds it on every backend (under
    JAX's tracing Keras keeps it outside the tensor). The other averaging
    options are those of `sequence_loss`, as `tfa.seq2seq.SequenceLoss` had,
    and `label_smoothing` spreads `s` of the target mass evenly over the
    vocabulary.

    Paper: the teacher-forced sequence cross-entropy of Sutskever, Vinyals &
    Le 2014, "Sequence to Sequence Learning with Neural Networks",
    arXiv:1409.3215.

    Shapes: y_true int `(B, T)`, y_pred logits `(B, T, V)`, sample_weight
    `(B, T)`; the loss is a scalar (or per-example / per-step, by option).

    Example:

    ```python
    targets = np.array([[3, 1, 0], [2, 0, 0]])            # 0 = padding
    logits = np.random.rand(2, 3, 5).astype("float32")
    loss = keras_attention.SequenceLoss()(targets, logits, sample_weight=targets != 0)
    # the mean cross-entropy over the three real tokens
    ```
    """

    def __init__(
        self,
        average_across_timesteps=True,
        average_across_batch=True,
        sum_over_timesteps=False,
        sum_over_batch=False,
        label_smoothing=0.0,
        name="sequence_loss",
        **kwargs,
    ):
        _check_options(
            average_across_timesteps, average_across_batch, sum_over_timesteps, sum_over_batch, label_smoothing
        )
        super().__init__(name=name, reduction=None, **kwargs)
        self.average_across_timesteps = average_across_timesteps
        self.average_across_batch = average_across_batch
        self.sum_over_timesteps = sum_over_timesteps
        self.sum_over_batch = sum_over_batch
        self.label_smoothing = float(label_smoothing)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            sample_weight = ops.convert_to_tensor(sample_weight)
            if len(sample_weight.shape) != 2:
                raise ValueError(
                    "SequenceLoss: `sample_weight` must have shape (batch, time); "
                    f"got shape {tuple(sample_weight.shape)}."
                )
        # The weights are taken from `y_pred` as given: a converted copy
        # would have lost its mask. (Logits of another rank than 3 go on to
        # `sequence_loss`, which names the problem.)
        weights = _TokenWeights()(y_true, y_pred, sample_weight) if len(ops.shape(y_pred)) == 3 else sample_weight
        return sequence_loss(
            y_pred,
            y_true,
            weights,
            average_across_timesteps=self.average_across_timesteps,
            average_across_batch=self.average_across_batch,
            sum_over_timesteps=self.sum_over_timesteps,
            sum_over_batch=self.sum_over_batch,
            label_smoothing=self.label_smoothing,
        )

    def call(self, y_true, y_pred):
        return sequence_loss(
            y_pred,
            y_true,
            average_across_timesteps=False,
            average_across_batch=False,
            label_smoothing=self.label_smoothing,
        )

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        config.update(
            {
                "average_across_timesteps": self.average_across_timesteps,
                "average_across_batch": self.average_across_batch,
                "sum_over_timesteps": self.sum_over_timesteps,
                "sum_over_batch": self.sum_over_batch,
                "label_smoothing": self.label_smoothing,
            }
        )
        return config
