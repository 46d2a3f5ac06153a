"""NumPy references for the attention formulas, written independently of the library.

Each score function takes the layer's own weights (read as NumPy arrays) and
the raw query / key, and follows the formula in the layer's docstring literally
(explicit concatenations, explicit loops where clearer), not the library's
factored implementation.
"""

import numpy as np


def masked_softmax(scores, mask=None):
    scores = np.asarray(scores, dtype=np.float64)
    if mask is None:
        mask = np.ones(scores.shape, dtype=bool)
    mask = np.broadcast_to(mask, scores.shape)
    weights = np.zeros_like(scores)
    for index in np.ndindex(scores.shape[:-1]):
        valid = mask[index]
        if valid.any():
            row = scores[index][valid]
            row = np.exp(row - row.max())
            weights[index][valid] = row / row.sum()
    return weights


def combined_mask(batch, tq, tv, query_mask=None, value_mask=None, attention_mask=None, causal=False):
    mask = np.ones((batch, tq, tv), dtype=bool)
    if value_mask is not None:
        mask &= np.asarray(value_mask, bool)[:, None, :]
    if query_mask is not None:
        mask &= np.asarray(query_mask, bool)[:, :, None]
    if attention_mask is not None:
        mask &= np.asarray(attention_mask, bool)
    if causal:
        mask &= np.tril(np.ones((tq, tv), dtype=bool))[None]
    return mask


def attend(scores, value, mask):
    """Soft attention: (context, weights) from (B, Tq, Tv) scores."""
    weights = masked_softmax(scores, mask)
    return weights @ np.asarray(value, np.float64), weights


def hard_attend(scores, value, mask):
    """Hard (argmax) attention: the first position of highest score among valid ones."""
    mask = np.broadcast_to(mask, scores.shape)
    weights = np.zeros(scores.shape)
    for index in np.ndindex(scores.shape[:-1]):
        valid = np.flatnonzero(mask[index])
        if valid.size:
            weights[index][valid[np.argmax(scores[index][valid])]] = 1.0
    return weights @ np.asarray(value, np.float64), weights


# ------------------------------------------------------------- score functions
# Shapes: q (B, Tq, dq), k (B, Tv, dk) -> e (B, Tq, Tv).


def additive_scores(w, q, k):
    vector = w["score_vector"]
    if "scale" in w:  # weight normalisation: g * v / ||v||
        vector = w["scale"] * vector / np.linalg.norm(vector)
    bias = w.get("bias", 0.0)
    hidden = np.tanh((q @ w["query_kernel"])[:, :, None, :] + (k @ w["key_kernel"])[:, None, :, :] + bias)
    return hidden @ vector


def dot_scores(w, q, k):
    return np.einsum("bid,bjd->bij", q, k) * w.get("scale", 1.0)


def scaled_dot_scores(w, q, k):
    return np.einsum("bid,bjd->bij", q, k) / np.sqrt(k.shape[-1])


def general_scores(w, q, k):
    # e_ij = k_j^T W q_i with W (dk, dq)
    return np.einsum("bjk,kq,biq->bij", k, w["bilinear_kernel"], q)


def concat_scores(w, q, k, activation=np.tanh):
    batch, tq, tv = q.shape[0], q.shape[1], k.shape[1]
    scores = np.zeros((batch, tq, tv))
    for b in range(batch):
        for i in range(tq):
            for j in range(tv):
                joined = np.concatenate([k[b, j], q[b, i]])  # [k_j ; q_i]
                if "kernel" in w:
                    scores[b, i, j] = w["score_vector"] @ activation(joined @ w["kernel"])
                else:
                    scores[b, i, j] = w["score_vector"] @ joined
    return scores
