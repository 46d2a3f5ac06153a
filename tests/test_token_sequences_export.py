"""Banned and stop sequences exported with the loop inside: a beam decoder
holding both agrees in Keras, the SavedModel and ONNX, and its served
hypotheses keep the rules (the rules themselves: test_token_sequences.py)."""

import numpy as np

from keras_attention.export import export_model, run_onnx
from tests.test_runtime_options_export import keras_ids, option_model, sources

END = 2


def contains(row, sequence):
    return any(list(row[i : i + len(sequence)]) == sequence for i in range(len(row) - len(sequence) + 1))


def test_a_beam_decoder_with_banned_and_stop_sequences_exports_with_parity(tmp_path):
    source = sources()
    plain, decoder = option_model("beam", names=())
    free = keras_ids(plain, decoder, {"source": source})  # (B, K, T)
    pairs = sorted(
        {(int(a), int(b)) for row in free.reshape(-1, free.shape[-1]) for a, b in zip(row[:-1], row[1:])} - {(END, END)}
    )
    banned = [list(pair) for pair in pairs if END not in pair][:2]
    stop = [[int(next(token for token in free[:, :, 0].reshape(-1) if token != END))]]
    assert banned
    model, decoder = option_model("beam", names=(), banned_sequences=banned, stop_sequences=stop)
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": source}, {"source": source[:1]}])
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
        assert report.max_abs_diff(format, "scores") <= 1e-4
    served = run_onnx(tmp_path / "export", {"source": source})["outputs"]["ids"]
    assert not np.array_equal(served, free)
    stopped = 0
    for row in served.reshape(-1, served.shape[-1]):
        row = list(row)
        assert not any(contains(row, sequence) for sequence in banned), (row, banned)
        if stop[0][0] in row:  # the output ends right after the stop token
            at = row.index(stop[0][0])
            assert at + 1 == len(row) or row[at + 1] == END, row
            stopped += 1
    assert stopped
