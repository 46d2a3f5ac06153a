"""Search strategies as objects: greedy, sampling and beam search, registered by name.

A strategy holds the configuration of one search (`BeamSearch(4,
length_penalty_weight=0.6)`), declares the run-time fields a request may
set (`runtime_fields`), serializes (`get_config` / `from_config`) and runs
its search over a step of the protocol `step(ids, state, time)`:
`strategy.search(step, state, start_tokens, end_token, max_length, ...)`.
`get("beam")` (or a config dict, or a strategy) gives a strategy; a new
strategy is a subclass with the `register` decorator.
"""

from keras_attention import _checks
from keras_attention.decoding.beam_search import beam_search
from keras_attention.decoding.beam_steps import LENGTH_CONVENTIONS
from keras_attention.decoding.constraints import check_top_p
from keras_attention.decoding.greedy import greedy_search, sampling_search
from keras_attention.decoding.registry import NamedRegistry
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = [
    "BeamSearch",
    "GreedySearch",
    "SamplingSearch",
    "SearchStrategy",
    "get",
    "register",
    "registered",
    "unregister",
]

_NAMES = NamedRegistry("search strategy", "strategy", lambda: SearchStrategy)


# Every search reads the run-time max_length (its `length_limits`).
LOOP_FIELDS = (
    RuntimeField(
        "max_length",
        "int32",
        1,
        maximum="max_length",
        meaning="most tokens; at most the constructor's (the loop bound)",
    ),
)


def register(name):
    """Class decorator: `name` finds the strategy (`get(name)`), which Keras serializes too."""
    return _NAMES.register(name)


def unregister(name):
    """Forget the strategy registered as `name`."""
    _NAMES.unregister(name)


def registered():
    """{name: strategy class}, in registration order."""
    return _NAMES.registered()


def get(identifier):
    """A strategy from its registered name (default fields), its config
    (`{"class_name": ..., "config": ...}` from `keras.saving.serialize_keras_object`)
    or a strategy itself.

    Example:

    ```python
    keras_attention.decoding.strategies.get("beam").beam_width
    # 4
    ```
    """
    return _NAMES.get(identifier)


class SearchStrategy:
    """Base of the search strategies: its fields are its constructor's arguments."""

    registered_name = None
    runtime_fields = ()
    # Hypotheses kept per example while searching (None: one, no hypotheses
    # axis); a beam-like strategy's decoder tiles its memory by it.
    beams = None
    # Whether `search` takes `prefix_lengths=` ((batch,) the forced prefix's
    # lengths, 0 without one): the decoder gives them to a strategy that reads them.
    reads_prefix_lengths = False
    # Whether `search` takes `constraints=` and `groups=` (the call's
    # `constraints` and `constraint_groups`): the decoder gives them to it.
    reads_constraints = False

    def extra_output_specs(self, lead):
        """{name: (shape, dtype)} of the outputs beyond the searches' common ones (`lead`: their leading shape)."""
        return {}

    @property
    def hypotheses(self):
        """The size of the outputs' hypotheses axis (None: no such axis)."""
        return None

    @classmethod
    def fields(cls):
        """The names of the constructor's arguments (the config's keys)."""
        return tuple(cls().get_config())

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def search(self, step_fn, initial_state, runtime=None, **common):
        """Run the search; `runtime` {field: value} overrides this strategy's
        fields (per-example tensors of an exported decoder); `common` are the
        searches' shared arguments (start_tokens, end_token, max_length, ...)."""
        raise NotImplementedError

    def __repr__(self):
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"


@register("greedy")
class GreedySearch(SearchStrategy):
    """Greedy search: the most likely token at each step (see `greedy_search`).

    Example:

    ```python
    keras_attention.decoding.strategies.get("greedy")
    # GreedySearch()
    ```
    """

    def search(self, step_fn, initial_state, runtime=None, **common):
        return greedy_search(step_fn, initial_state, **common)


@register("sample")
class SamplingSearch(SearchStrategy):
    """Sampling: each token drawn with temperature, top-k and top-p (see `sampling_search`).

    Example:

    ```python
    keras_attention.decoding.strategies.SamplingSearch(temperature=0.7, top_p=0.9, seed=1)
    ```
    """

    runtime_fields = (
        RuntimeField("temperature", "float32", 0, strict=True, meaning="sampling temperature"),
        RuntimeField("top_k", "int32", 0, meaning="keep the k most likely tokens (0: all)"),
        RuntimeField("top_p", "float32", 0, strict=True, maximum=1, meaning="nucleus mass"),
        RuntimeField(
            "seed",
            "int32",
            0,
            maximum=2**31 - 1,
            meaning="the draws are a function of (seed, step, token); one for the batch, row b uses row_seeds(seed, b)",
        ),
    )

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None):
        owner = type(self).__name__
        self.temperature = _checks.check_number(owner, "temperature", temperature, minimum=0, strict=True)
        self.top_k = _checks.check_positive_int(owner, "top_k", top_k, allow_none=True)
        self.top_p = check_top_p(owner, top_p)
        self.seed = seed

    def get_config(self):
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}

    def search(self, step_fn, initial_state, runtime=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        return sampling_search(step_fn, initial_state, **values, **common)


def check_num_hypotheses(owner, num_hypotheses, beam_width, most=None):
    """`num_hypotheses` (None stays None) as a positive integer, at most
    `most` hypotheses (what a strategy may return: `beam_width`, or more
    with a refilling beam's patience)."""
    value = _checks.check_positive_int(owner, "num_hypotheses", num_hypotheses, allow_none=True)
    most = beam_width if most is None else max(most, beam_width)
    if value is not None and value > most:
        bound = f"`beam_width` {beam_width}" + ("" if most == beam_width else f" or {most}")
        raise ValueError(
            f"{_checks.owner_name(owner)}: `num_hypotheses` must be at most {bound}; got {num_hypotheses!r}."
        )
    return value


class _BeamFields:
    """What every beam strategy checks and answers: its width, its two
    penalties' weights and how many hypotheses it returns."""

    def _check_beam_fields(self, beam_width, length_penalty_weight, coverage_penalty_weight, num_hypotheses, most=None):
        """`most`: how many hypotheses it may return (default `beam_width`)."""
        owner = type(self).__name__
        self.beam_width = _checks.check_positive_int(owner, "beam_width", beam_width)
        self.length_penalty_weight = _checks.check_number(
            owner, "length_penalty_weight", length_penalty_weight, minimum=0
        )
        self.coverage_penalty_weight = _checks.check_number(
            owner, "coverage_penalty_weight", coverage_penalty_weight, minimum=0
        )
        self.num_hypotheses = check_num_hypotheses(owner, num_hypotheses, self.beam_width, most)

    @classmethod
    def most_hypotheses(cls, beam_width, fields):
        """How many hypotheses it may return with `fields` (its keyword-less ones): its beams."""
        return beam_width

    @property
    def beams(self):
        return self.beam_width

    @property
    def hypotheses(self):
        return self.num_hypotheses or self.beam_width


@register("beam")
class BeamSearch(_BeamFields, SearchStrategy):
    """Beam search with GNMT penalties, returning the best `num_hypotheses` (see `beam_search`).

    Example:

    ```python
    keras_attention.decoding.strategies.BeamSearch(4, length_penalty_weight=0.6, num_hypotheses=2)
    ```
    """

    runtime_fields = (
        RuntimeField(
            "length_penalty_weight",
            "float32",
            0,
            meaning="length penalty alpha (beam: GNMT's; refilling_beam: its length_penalty_form)",
        ),
        RuntimeField("coverage_penalty_weight", "float32", 0, meaning="coverage penalty beta (GNMT's)"),
    )

    def __init__(
        self,
        beam_width=4,
        length_penalty_weight=0.0,
        coverage_penalty_weight=0.0,
        early_stopping=False,
        length_convention="default",
        num_hypotheses=None,
    ):
        owner = type(self).__name__
        self._check_beam_fields(beam_width, length_penalty_weight, coverage_penalty_weight, num_hypotheses)
        self.early_stopping = _checks.check_bool(owner, "early_stopping", early_stopping)
        _checks.check_choice(owner, "length_convention", length_convention, LENGTH_CONVENTIONS)
        self.length_convention = length_convention

    def get_config(self):
        return {
            "beam_width": self.beam_width,
            "length_penalty_weight": self.length_penalty_weight,
            "coverage_penalty_weight": self.coverage_penalty_weight,
            "early_stopping": self.early_stopping,
            "length_convention": self.length_convention,
            "num_hypotheses": self.num_hypotheses,
        }

    def search(self, step_fn, initial_state, runtime=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        num_hypotheses = values.pop("num_hypotheses")
        result = beam_search(step_fn, initial_state, **values, **common)
        if num_hypotheses is not None:  # the best n of the beams, best first
            result = {name: value[:, :num_hypotheses] for name, value in result.items()}
        return result
