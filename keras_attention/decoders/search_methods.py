"""The searches a `SearchDecoder` can run, by method name, with the options each reads."""

from keras_attention.decoding import beam_search, greedy_search, sampling_search

__all__ = ["METHODS", "SEARCHES"]


def _greedy(decoder, step, initial_state, common, option):
    return greedy_search(step, initial_state, **common)


def _sample(decoder, step, initial_state, common, option):
    return sampling_search(
        step,
        initial_state,
        temperature=option("temperature"),
        top_k=option("top_k"),
        top_p=option("top_p"),
        seed=option("seed") if "seed" in decoder.runtime_options else decoder.seed_generator,
        **common,
    )


def _beam(decoder, step, initial_state, common, option):
    result = beam_search(
        step,
        initial_state,
        beam_width=decoder.beam_width,
        length_penalty_weight=option("length_penalty_weight"),
        coverage_penalty_weight=option("coverage_penalty_weight"),
        early_stopping=decoder.early_stopping,
        length_convention=decoder.length_convention,
        **common,
    )
    if decoder.num_hypotheses is not None:  # the best n of the beams, best first
        result = {name: value[:, : decoder.num_hypotheses] for name, value in result.items()}
    return result


# A table rather than a chain of ifs: a method is one entry, its search with
# the options it reads, and the valid names come from the same table.
SEARCHES = {"greedy": _greedy, "sample": _sample, "beam": _beam}
METHODS = tuple(SEARCHES)
