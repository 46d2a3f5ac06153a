"""tfa's own beam ids against its own scores (issue 34, item 6).

tfa 0.23's `BeamSearchDecoder` back-tracks `predicted_ids` from each row's
longest final length (`gather_tree`), so a reordering of a row's beams after
that step (the loop runs on while other rows decode) moves its scores but
not its ids: for some beams the ids tfa returns are not the hypothesis its
score belongs to. tests/fixtures/tfa_seq2seq/beam_order.json is the
luong_lstm model decoded by tfa over 64 rows (with the script that made
it). Each beam is re-scored here by the imported model, teacher-forced:
ours agree with their scores everywhere and with tfa's ids wherever tfa's
ids agree with tfa's scores; the guide says so.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from keras import ops

from tests.test_tfa_import import FIXTURES, load

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "migrating_from_tfa.md"
ALPHA = 0.6  # the fixture's length_penalty_weight


@pytest.fixture(scope="module")
def decoded():
    _, models = load("luong_lstm")
    order = json.loads((FIXTURES / "beam_order.json").read_text())
    source = np.asarray(order["source"], "int32")
    ours = models["beam"].predict(source, verbose=0)
    return models, source, order, {name: np.asarray(value) for name, value in ours.items()}


def agrees_with_score(trainer, source, ids, lengths, scores):
    """(B, K) bool: the hypothesis' teacher-forced log-probability over its
    length (end token included), GNMT-penalised, is its score. A beam that
    ends at the loop's last step is ranked, in tfa's bookkeeping, without
    its end token in the penalty: either length is accepted."""
    batch, width, steps = ids.shape
    flat = ids.reshape(batch * width, steps).astype("int32")
    target_in = np.concatenate([np.ones((batch * width, 1), "int32"), flat[:, :-1]], axis=1)  # start id 1
    logits = trainer.predict([np.repeat(source, width, axis=0), target_in], verbose=0)
    log_probs = ops.convert_to_numpy(ops.log_softmax(logits, axis=-1))
    chosen = np.take_along_axis(log_probs, flat[..., None], axis=-1)[..., 0]
    n = lengths.reshape(-1)
    total = (chosen * (np.arange(steps) < n[:, None])).sum(axis=1)
    agree = np.zeros(batch * width, bool)
    for counted in (n, n - 1):
        agree |= np.abs(total / ((5.0 + counted) / 6.0) ** ALPHA - scores.reshape(-1)) < 1e-3
    return agree.reshape(batch, width)


def test_tfas_ids_disagree_with_its_scores_in_some_rows_and_ours_never_do(decoded):
    models, source, order, ours = decoded
    tfa_ids, tfa_scores, tfa_lengths = (np.asarray(order[k]) for k in ("beam_ids", "beam_scores", "beam_lengths"))
    # The same search: tfa's scores and lengths, slot by slot.
    np.testing.assert_array_equal(ours["lengths"], tfa_lengths)
    np.testing.assert_allclose(ours["scores"], tfa_scores, atol=1e-5)
    assert (np.diff(ours["scores"], axis=1) <= 1e-6).all()  # sorted best first, in both
    trainer = models["trainer"]
    tfa_agrees = agrees_with_score(trainer, source, tfa_ids, tfa_lengths, tfa_scores)
    ours_agree = agrees_with_score(
        trainer, source, ours["ids"][:, :, : tfa_ids.shape[2]], ours["lengths"], ours["scores"]
    )
    assert ours_agree.all()
    rows = np.nonzero(~tfa_agrees.all(axis=1))[0]
    assert 1 <= len(rows) <= 8, rows  # a few rows of 64 (3 when the fixture was made)
    for b in range(len(source)):
        for k in range(tfa_ids.shape[1]):
            n = tfa_lengths[b, k]
            same = (ours["ids"][b, k, :n] == tfa_ids[b, k, :n]).all()
            # Where tfa's ids are its scores' hypothesis they are ours; elsewhere they cannot be.
            assert same == tfa_agrees[b, k], (b, k)


def test_the_guide_says_tfas_beam_ids_can_disagree_with_its_scores():
    guide = GUIDE.read_text()
    assert "Beams are sorted best first in both" not in guide
    assert "gather_tree" in guide and "predicted_ids" in guide
    assert "tests/fixtures/tfa_seq2seq/beam_order.json" in guide
