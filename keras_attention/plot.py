"""Attention heat-maps with token labels (needs the `plot` extra: matplotlib)."""

import os
import tempfile

import numpy as np

__all__ = ["plot_attention"]


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "plot_attention needs matplotlib, which is not installed. Install it "
            "with `pip install 'keras-attention-decoders[plot]'` (or `pip install matplotlib`)."
        ) from error
    return Figure


def _as_weights(weights):
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 3 and weights.shape[0] == 1:
        weights = weights[0]  # a batch of one, as layers return it
    if weights.ndim != 2:
        raise ValueError(
            "plot_attention: `weights` must have shape (target_length, source_length) "
            f"(or (1, target_length, source_length)); got shape {weights.shape}."
        )
    if not np.isfinite(weights).all():
        raise ValueError("plot_attention: `weights` contains NaN or infinite values.")
    return weights


def _check_labels(argument, tokens, expected, axis):
    if tokens is None:
        return [str(i) for i in range(expected)]
    tokens = [str(token) for token in tokens]
    if len(tokens) != expected:
        raise ValueError(
            f"plot_attention: `{argument}` has {len(tokens)} labels but `weights` has "
            f"{expected} {axis} (weights shape is (target_length, source_length))."
        )
    return tokens


def _check_figsize(figsize, source_length, target_length):
    if figsize is None:
        # About a third of an inch per cell keeps 30 x 30 maps' labels legible.
        cell = 0.32
        return max(4.0, cell * source_length + 2.2), max(3.0, cell * target_length + 1.6)
    try:
        width, height = (float(size) for size in figsize)
        valid = width > 0 and height > 0 and np.isfinite([width, height]).all()
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(
            f"plot_attention: `figsize` must be (width, height) in inches, two positive numbers; got {figsize!r}."
        )
    return width, height


def plot_attention(
    weights,
    source_tokens=None,
    target_tokens=None,
    path=None,
    title=None,
    cmap="viridis",
    annotate=None,
    dpi=150,
    xlabel="source",
    ylabel="target",
    figsize=None,
):
    """Draw attention weights as a heat-map, one row per output token.

    Rows are target (query) positions, columns source (key) positions, so
    cell `(i, j)` is how much output token `i` used source token `j`, the
    alignment picture of Bahdanau et al. 2014 (arXiv:1409.0473). The colour
    scale is fixed to [0, 1] so pictures of different examples compare.

    Args:
        weights: `(Tt, Ts)` array (or `(1, Tt, Ts)`), e.g. the weights a layer
            returns with `return_attention_scores=True` for one example.
        source_tokens: `Ts` labels for the columns (default: positions).
        target_tokens: `Tt` labels for the rows (default: positions).
        path: if given, the PNG is written there (atomically: a failed write
            leaves no partial file).
        title: optional title.
        cmap: a matplotlib colour map name.
        annotate: write each weight in its cell; default: when the map has at
            most 15 x 15 cells.
        dpi: resolution of the written PNG.
        xlabel: the x axis's title ("" for none).
        ylabel: the y axis's title ("" for none).
        figsize: `(width, height)` in inches; default: about a third of an
            inch per cell (at least 4 x 3), plus room for the labels.

    Returns:
        The `matplotlib.figure.Figure` (not attached to pyplot, so it works on
        machines without a display and does not leak global state).

    Example:

    ```python
    weights = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1]])
    figure = keras_attention.plot_attention(
        weights, source_tokens=["le", "chat", "<eos>"], target_tokens=["the", "cat"])
    ```
    """
    Figure = _figure_class()
    weights = _as_weights(weights)
    target_length, source_length = weights.shape
    source_tokens = _check_labels("source_tokens", source_tokens, source_length, "columns")
    target_tokens = _check_labels("target_tokens", target_tokens, target_length, "rows")
    if annotate is None:
        annotate = max(weights.shape) <= 15

    figsize = _check_figsize(figsize, source_length, target_length)
    for argument, label in (("xlabel", xlabel), ("ylabel", ylabel)):
        if not isinstance(label, str):
            raise ValueError(f'plot_attention: `{argument}` must be a string ("" for none); got {label!r}.')
    figure = Figure(figsize=figsize)
    axes = figure.add_subplot()
    image = axes.imshow(weights, cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    font_size = 9 if max(weights.shape) <= 30 else 7
    axes.set_xticks(range(source_length), labels=source_tokens, rotation=90, fontsize=font_size)
    axes.set_yticks(range(target_length), labels=target_tokens, fontsize=font_size)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    if annotate:
        for (row, column), value in np.ndenumerate(weights):
            colour = "black" if value > 0.6 else "white"
            axes.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04, label="attention weight")
    figure.tight_layout()

    if path is not None:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(suffix=".png", dir=directory)
        os.close(descriptor)
        try:
            figure.savefig(temporary, format="png", dpi=dpi)
            # mkstemp creates the file private (0600); give it the mode a plain
            # open() would have.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    return figure
