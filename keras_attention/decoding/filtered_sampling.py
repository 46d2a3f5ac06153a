"""`FilteredSampling`: sampling from a cut of the model's distribution, the base of min-p, typical, epsilon and eta sampling.

Each of these strategies is `SamplingSearch` whose step first cuts the
model's distribution at each step with a filter of its own, driven by one
run-time field of its own (`min_p`, `typical_p`, `epsilon_cutoff`,
`eta_cutoff`): the cut is applied to the model's log-probabilities, then
temperature, top-k and top-p act on what is kept, and the returned scores
are those of the cut distribution. A subclass declares that field
(`cut_field`) and the filter (`cut(logits, value)`); the search is shared.
"""

from keras_attention.decoding import _loop
from keras_attention.decoding.greedy import sampling_search
from keras_attention.decoding.strategies import SamplingSearch

__all__ = ["FilteredSampling"]


class FilteredSampling(SamplingSearch):
    """Sampling after the filter `cut(logits, value)` at each step, `value`
    the strategy's `cut_field` (a constructor argument, or a request's
    `(batch,)` values). Not registered itself: its subclasses are.

    Example:

    ```python
    issubclass(keras_attention.decoding.MinPSampling, keras_attention.decoding.filtered_sampling.FilteredSampling)
    # True
    ```
    """

    cut_field = None  # a RuntimeField; runtime_fields = SamplingSearch's + (cut_field,)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.cut_field is not None:
            cls.runtime_fields = SamplingSearch.runtime_fields + (cls.cut_field,)

    @staticmethod
    def cut(logits, value):
        """The logits with the tokens the filter drops at the floor `NEG_INF`."""
        raise NotImplementedError

    def search(self, step_fn, initial_state, runtime=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        value = values.pop(self.cut_field.name)
        step_fn = _loop.timed_step(step_fn)
        cut = type(self).cut

        def step(ids, state, time):
            logits, state, alignment = _loop.call_step(step_fn, ids, state, time)
            logits = cut(logits, value)
            return (logits, state) if alignment is None else (logits, state, alignment)

        return sampling_search(step, initial_state, **values, **common)
