"""Alternatives at a prefix exported with the loop inside: a decoder taking
`target_prefix` and a run-time threshold agrees in Keras, the SavedModel and
ONNX, and its served alternatives keep their prefix and part after it (the
search itself: test_alternatives.py)."""

import keras
import numpy as np

from keras_attention.decoding import NEG_INF
from keras_attention.export import export_model, run_onnx
from tests.test_runtime_options import make_decoder
from tests.test_runtime_options_export import VOCABULARY, sources

END = 2


def test_alternatives_with_a_prefix_and_a_threshold_export_with_parity(tmp_path):
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    prefix = keras.Input((None,), dtype="int32", name="target_prefix")
    decoder = make_decoder(
        ("max_length", "min_expansion_probability"), max_length=6, method="alternatives", num_alternatives=3
    )
    options = decoder.option_inputs()
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    model = keras.Model(
        {"source": source, "target_prefix": prefix, **options}, decoder(memory, target_prefix=prefix, options=options)
    )
    prefixes = np.array([[3, 5], [-1, -1], [7, -1]], "int32")
    batches = [
        {"source": sources(), "target_prefix": prefixes},
        {"source": sources(), "target_prefix": prefixes, "min_expansion_probability": [0.3, 0.0, 0.15]},
        {"source": sources(), "target_prefix": prefixes, "max_length": [2, 6, 4]},
        {"source": sources()[:1], "target_prefix": prefixes[:1, :0]},
    ]
    report = export_model(model, tmp_path / "export", sample_inputs=batches)
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
        assert report.max_abs_diff(format, "scores") <= 1e-4
    served = run_onnx(tmp_path / "export", batches[0])["outputs"]
    lengths = np.array([2, 0, 1])
    for b, n in enumerate(lengths):
        assert (served["ids"][b, :, :n] == prefixes[b, :n]).all()
        firsts = served["ids"][b, :, n]
        assert len(set(firsts.tolist())) == 3 and END not in firsts
    thresholded = run_onnx(tmp_path / "export", batches[1])["outputs"]
    empty = thresholded["scores"] == NEG_INF
    assert empty[0].any() and not empty[1].any()
    np.testing.assert_array_equal(thresholded["lengths"][empty], np.broadcast_to(lengths[:, None], (3, 3))[empty])
    kept = ~empty
    np.testing.assert_array_equal(thresholded["ids"][kept], served["ids"][kept])
    # The first row's prefix fills a max_length of 2: every alternative is the prefix alone.
    short = run_onnx(tmp_path / "export", batches[2])["outputs"]
    np.testing.assert_array_equal(short["ids"][0, :, :2], [[3, 5]] * 3)
    np.testing.assert_array_equal(short["lengths"][0], 2)
