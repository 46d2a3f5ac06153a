"""In-graph decoding over any step function `step(ids, state, time) -> (logits, state)`.

Search strategies are objects too (`GreedySearch`, `SamplingSearch`,
`BeamSearch`, `DiverseBeamSearch`, `MinPSampling`, `RefillingBeamSearch`,
`TypicalSampling`, `EpsilonSampling`, `EtaSampling`, `AlternativesSearch`,
`ConstrainedBeamSearch`),
registered by name:
`get("beam")`; the sampling strategies that cut the distribution first share
`FilteredSampling`.

Greedy search, sampling and beam search run inside `keras.ops.while_loop`, so
they compile with XLA and export, loop included, to SavedModel and ONNX.
Beam search's step is built from functions exported here too
(`extend_hypotheses`, `coverage_penalty`, `candidate_scores`,
`select_candidates`, `gather_beams`, `reorder_beams`, `write_step`), for a
search of one's own. `NEG_INF` is the log-probability they give a hypothesis
that cannot be chosen: finite (half float32's minimum), so sums of it do not
overflow to `-inf` and a comparison with it stays exact.
"""

from keras_attention.decoding._loop import NEG_INF
from keras_attention.decoding.alternatives import AlternativesSearch, alternatives_search
from keras_attention.decoding.beam_search import beam_search
from keras_attention.decoding.beam_steps import (
    LENGTH_CONVENTIONS,
    candidate_scores,
    coverage_penalty,
    extend_hypotheses,
    length_penalty,
    search_is_decided,
    select_candidates,
)
from keras_attention.decoding.beams import beam_rows, gather_beams, gather_tree, reorder_beams, tile_batch, write_step
from keras_attention.decoding.constrained_beam import ConstrainedBeamSearch, constrained_beam_search
from keras_attention.decoding.constraints import constrained_step, relative_max_lengths, top_p_filter
from keras_attention.decoding.diverse_beam import DiverseBeamSearch
from keras_attention.decoding.epsilon_sampling import EpsilonSampling
from keras_attention.decoding.eta_sampling import EtaSampling
from keras_attention.decoding.filtered_sampling import FilteredSampling
from keras_attention.decoding.greedy import greedy_search, sampling_search
from keras_attention.decoding.hashed_random import hashed_uniform, row_seeds
from keras_attention.decoding.min_p import MinPSampling
from keras_attention.decoding.refilling_beam import RefillingBeamSearch, refilling_beam_search
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import BeamSearch, GreedySearch, SamplingSearch, SearchStrategy, get
from keras_attention.decoding.typical_sampling import TypicalSampling

__all__ = [
    "LENGTH_CONVENTIONS",
    "NEG_INF",
    "AlternativesSearch",
    "BeamSearch",
    "ConstrainedBeamSearch",
    "DiverseBeamSearch",
    "EpsilonSampling",
    "EtaSampling",
    "FilteredSampling",
    "GreedySearch",
    "MinPSampling",
    "RefillingBeamSearch",
    "RuntimeField",
    "SamplingSearch",
    "SearchStrategy",
    "TypicalSampling",
    "get",
    "alternatives_search",
    "beam_rows",
    "beam_search",
    "candidate_scores",
    "constrained_beam_search",
    "constrained_step",
    "coverage_penalty",
    "extend_hypotheses",
    "gather_beams",
    "gather_tree",
    "greedy_search",
    "hashed_uniform",
    "row_seeds",
    "length_penalty",
    "relative_max_lengths",
    "refilling_beam_search",
    "reorder_beams",
    "sampling_search",
    "search_is_decided",
    "select_candidates",
    "tile_batch",
    "top_p_filter",
    "write_step",
]
