"""plot_attention: PNG output, labels, errors and the lazy matplotlib import."""

import sys

import numpy as np
import pytest

from keras_attention.plot import plot_attention

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_writes_a_png_with_labels_on_both_axes_and_a_colour_bar(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=3)
    path = tmp_path / "maps" / "attention.png"
    figure = plot_attention(weights, list("abcde"), ["x", "y", "z"], path=str(path), title="t")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5000
    heatmap, colour_bar = figure.axes
    assert [t.get_text() for t in heatmap.get_xticklabels()] == list("abcde")
    assert [t.get_text() for t in heatmap.get_yticklabels()] == ["x", "y", "z"]
    np.testing.assert_allclose(heatmap.images[0].get_array(), weights, atol=1e-7)
    assert colour_bar.get_ylabel() == "attention weight"
    assert len(heatmap.texts) == 15, "small maps are annotated cell by cell"
    assert list(tmp_path.joinpath("maps").iterdir()) == [path], "no temporary file left"


def test_a_30_by_30_map_stays_legible():
    weights = np.eye(30)
    figure = plot_attention(weights, [f"s{i}" for i in range(30)], [f"t{i}" for i in range(30)])
    width, height = figure.get_size_inches()
    assert width >= 30 * 0.3 and height >= 30 * 0.3, "about a third of an inch per cell"
    assert not figure.axes[0].texts, "large maps are not annotated"
    assert figure.axes[0].get_xticklabels()[0].get_fontsize() >= 7


def test_accepts_a_batch_of_one_and_default_labels():
    figure = plot_attention(np.full((1, 2, 4), 0.25))
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    "weights, source, target, message",
    [
        (np.ones((2, 3)), ["a", "b"], ["x", "y"], r"`source_tokens` has 2 labels but `weights` has 3 columns"),
        (np.ones((2, 3)), ["a", "b", "c"], ["x"], r"`target_tokens` has 1 labels but `weights` has 2 rows"),
        (
            np.ones((2, 2, 3)),
            None,
            None,
            r"`weights` must have shape \(target_length, source_length\).*got shape \(2, 2, 3\)",
        ),
        (np.array([[np.nan, 1.0]]), None, None, r"`weights` contains NaN"),
    ],
)
def test_bad_input(weights, source, target, message, tmp_path):
    path = tmp_path / "never.png"
    with pytest.raises(ValueError, match=message):
        plot_attention(weights, source, target, path=str(path))
    assert not path.exists()


def test_missing_matplotlib_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'keras-attention-decoders\[plot\]'"):
        plot_attention(np.ones((1, 1)))


def test_default_axis_titles_and_size_are_unchanged():
    figure = plot_attention(np.full((3, 5), 0.2))
    assert figure.axes[0].get_xlabel() == "source"
    assert figure.axes[0].get_ylabel() == "target"
    # Four inches by three at least, a third of an inch per cell beyond that.
    np.testing.assert_allclose(figure.get_size_inches(), [4.0, 3.0])
    np.testing.assert_allclose(plot_attention(np.eye(20)).get_size_inches(), [0.32 * 20 + 2.2, 0.32 * 20 + 1.6])


def test_axis_titles_and_figure_size_can_be_given(tmp_path):
    path = tmp_path / "labelled.png"
    figure = plot_attention(
        np.full((2, 4), 0.25), xlabel="word position", ylabel="", figsize=(7.5, 2.5), path=str(path), dpi=100
    )
    assert figure.axes[0].get_xlabel() == "word position"
    assert figure.axes[0].get_ylabel() == ""
    np.testing.assert_allclose(figure.get_size_inches(), [7.5, 2.5])
    # The PNG is written at that size: 7.5 x 2.5 inches at 100 dpi.
    header = path.read_bytes()[16:24]
    assert (int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")) == (750, 250)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(figsize=(0, 3)), r"`figsize` must be \(width, height\) in inches, two positive numbers; got \(0, 3\)"),
        (dict(figsize=(4, 3, 2)), r"`figsize` must be .*; got \(4, 3, 2\)"),
        (dict(figsize=5), r"`figsize` must be .*; got 5"),
        (dict(figsize=(4, float("nan"))), r"`figsize` must be .*; got \(4, nan\)"),
        (dict(xlabel=None), r"`xlabel` must be a string \(\"\" for none\); got None"),
        (dict(ylabel=3), r"`ylabel` must be a string \(\"\" for none\); got 3"),
    ],
)
def test_bad_labels_and_sizes(arguments, message, tmp_path):
    path = tmp_path / "never.png"
    with pytest.raises(ValueError, match=message):
        plot_attention(np.ones((2, 2)) / 2, path=str(path), **arguments)
    assert not path.exists()
