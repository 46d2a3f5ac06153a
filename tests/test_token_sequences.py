"""Banned and stop sequences (Hugging Face's `bad_words_ids` and
`stop_strings` in tokens, CTranslate2's `suppress_sequences`): the match
against brute force, greedy search against a NumPy simulation, beam search's
hypotheses checked whole, the order against `min_length` and a forced
prefix, a decoder's keywords and its refusals (the export parity:
test_token_sequences_export.py)."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import beam_search, greedy_search, processors
from keras_attention.decoding.processors import (
    BannedSequences,
    BannedSequencesInput,
    ForcedPrefix,
    MinLength,
    StopSequences,
    StopSequencesInput,
    processed_step,
)
from keras_attention.decoding.processors.token_sequences import ends_with, sequence_table
from tests.table_steps import numpy_greedy as table_greedy
from tests.table_steps import table_step

pytestmark = pytest.mark.any_backend

END, VOCABULARY, STEPS = 2, 5, 7


def test_ends_with_is_the_brute_force_match():
    rng = np.random.default_rng(0)
    sequences = [[1], [3, 4], [4, 4, 1], [0, 3, 4, 1], [3]]
    table, lengths = sequence_table(sequences)
    for trial in range(40):
        width = 6
        history = rng.integers(0, VOCABULARY, size=(4, width)).astype("int32")
        time = int(rng.integers(0, width + 1))
        history[:, time:] = -1
        cut = rng.integers(0, 2, size=len(sequences)) * (lengths > 0)  # lengths - 1 or lengths
        used = (lengths - cut).astype("int32")
        got = ops.convert_to_numpy(ends_with(ops.convert_to_tensor(history), time, table, used))
        want = np.array(
            [
                [time >= n and list(row[time - n : time]) == sequence[:n] for sequence, n in zip(sequences, used)]
                for row in history
            ]
        )
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}, time {time}")
    # Both outcomes were seen, and a length 0 matches at once.
    assert ops.convert_to_numpy(ends_with(ops.zeros((1, 3), "int32") - 1, 0, table, lengths * 0)).all()


def transitions(seed):
    """Logits by (example, time, previous id), the end (id 2) rarely the favourite."""
    logits = np.random.default_rng(seed).normal(size=(3, STEPS, VOCABULARY, VOCABULARY)).astype("float32")
    logits[..., END] -= 1.0
    return logits


def numpy_greedy(logits, banned=(), stop=(), min_length=0):
    """Greedy decoding of the table, one row at a time, with the sequences' rules."""

    def choose(row, time, ids):
        for sequence in banned:
            if len(ids) >= len(sequence) - 1 and ids[len(ids) - len(sequence) + 1 :] == sequence[:-1]:
                row[sequence[-1]] = -np.inf
        if time < min_length:
            row[END] = -np.inf
        if any(len(ids) >= len(s) and ids[len(ids) - len(s) :] == s for s in stop):
            return END
        return np.argmax(row)

    return table_greedy(logits, END, choose)


def decode(logits, processor_list, search=greedy_search, inputs=None, **options):
    step, state = processed_step(
        table_step(logits),
        ops.arange(len(logits), dtype="int32"),
        processor_list,
        END,
        {"max_length": STEPS, **(inputs or {})},
    )
    return search(step, state, 0, END, STEPS, **options)


def padded(sets, count=None, width=None):
    """Each example's list of sequences as one `(B, S, L)` table, right-padded with -1."""
    count = count or max(1, max(len(sequences) for sequences in sets))
    width = width or max([1] + [len(sequence) for sequences in sets for sequence in sequences])
    table = np.full((len(sets), count, width), -1, "int32")
    for b, sequences in enumerate(sets):
        for s, sequence in enumerate(sequences):
            table[b, s, : len(sequence)] = sequence
    return table


def contains(row, sequence):
    return any(list(row[i : i + len(sequence)]) == sequence for i in range(len(row) - len(sequence) + 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_search_without_the_banned_sequences_is_the_brute_force_one(seed):
    logits = transitions(seed)
    free = numpy_greedy(logits)
    # Ban what free decoding produced: a pair and a triple from its rows, and one token.
    banned = [list(map(int, free[0, :2])), list(map(int, free[1, 1:4])), [int(free[2, 0])]]
    banned = [sequence for sequence in banned if END not in sequence]
    assert banned
    ids = ops.convert_to_numpy(decode(logits, [BannedSequences(banned)])["ids"])
    np.testing.assert_array_equal(ids, numpy_greedy(logits, banned=banned))
    assert not np.array_equal(ids, free)
    for row in ids:
        assert not any(contains(row, sequence) for sequence in banned), (row, banned)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_search_ends_after_a_stop_sequence_as_the_brute_force_one(seed):
    logits = transitions(seed)
    free = numpy_greedy(logits)
    stop = [list(map(int, free[0, 1:3])), [int(free[1, 2])]]
    stop = [sequence for sequence in stop if END not in sequence]
    ids = ops.convert_to_numpy(decode(logits, [StopSequences(stop)])["ids"])
    want = numpy_greedy(logits, stop=stop)
    np.testing.assert_array_equal(ids, want)
    assert (want != free).any()  # some row stopped early


def test_a_stop_sequence_wins_over_min_length_and_a_forced_prefix_over_it():
    logits = transitions(0)
    free = numpy_greedy(logits)
    stop = [[int(free[0, 0])]]
    assert stop[0][0] != END
    with_min = decode(logits, [MinLength(STEPS), StopSequences(stop)])
    ids = ops.convert_to_numpy(with_min["ids"])
    np.testing.assert_array_equal(ids[0, :2], [stop[0][0], END])
    np.testing.assert_array_equal(ids, numpy_greedy(logits, stop=stop, min_length=STEPS))
    # A forced prefix holding the stop token goes on past it.
    prefix = np.full((3, 2), -1, "int32")
    prefix[0] = [stop[0][0], 4]
    step, state = processed_step(
        table_step(logits),
        ops.arange(3, dtype="int32"),
        [StopSequences(stop), ForcedPrefix()],
        END,
        {"max_length": STEPS, "target_prefix": ops.convert_to_tensor(prefix)},
    )
    forced = ops.convert_to_numpy(greedy_search(step, state, 0, END, STEPS)["ids"])
    np.testing.assert_array_equal(forced[0, :2], prefix[0])


def test_beam_search_hypotheses_hold_no_banned_sequence_and_end_at_a_stop_sequence():
    logits = transitions(3)
    beams = ops.convert_to_numpy(decode(logits, [], search=beam_search, beam_width=3)["ids"])  # (B, K, T)
    # The most frequent pairs of the free hypotheses, banned; their first tokens, stop tokens.
    pairs = [
        list(pair)
        for row in beams.reshape(-1, STEPS)
        for pair in zip(row[:-1], row[1:])
        if END not in pair and pair[0] != pair[1]
    ]
    banned = [list(map(int, p)) for p in sorted({tuple(p) for p in pairs})[:3]]
    result = ops.convert_to_numpy(decode(logits, [BannedSequences(banned)], search=beam_search, beam_width=3)["ids"])
    assert not np.array_equal(result, beams)
    for row in result.reshape(-1, STEPS):
        assert not any(contains(row, sequence) for sequence in banned), (row, banned)
    stop = [[banned[0][0], banned[0][1]]]
    stopped = ops.convert_to_numpy(decode(logits, [StopSequences(stop)], search=beam_search, beam_width=3)["ids"])
    seen = 0
    for row in stopped.reshape(-1, STEPS):
        row = list(row)
        for i in range(STEPS - 1):
            if row[i : i + 2] == stop[0]:
                seen += 1
                assert i + 2 == STEPS or row[i + 2] == END, row  # ends right after it
                break
    assert seen


def test_a_decoder_takes_the_keywords_serializes_them_and_refuses_bad_ones():
    keras.utils.set_random_seed(0)
    parts = (ka.AttentionGRUCell(8, ka.AdditiveAttention(4)), keras.layers.Embedding(9, 4), keras.layers.Dense(9))
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    plain = ka.InferenceDecoder(*parts, 1, END, 8)
    free = ops.convert_to_numpy(plain(memory)["ids"])
    first = next(b for b in range(3) if END not in free[b, :2])  # two tokens at least
    stop, banned = [[int(free[first, 0])]], [[int(free[first, 0]), int(free[first, 1])]]
    decoder = ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=banned, stop_sequences=stop)
    assert decoder.processors == [BannedSequences(banned), StopSequences(stop)]
    for processor in decoder.processors:
        assert processors.get(keras.saving.serialize_keras_object(processor)) == processor
    restored = ka.InferenceDecoder.from_config(decoder.get_config())
    assert restored.processors == decoder.processors
    without = ops.convert_to_numpy(ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=banned)(memory)["ids"])
    assert not contains(without[first], banned[0]) and not np.array_equal(without, free)
    stopped = ops.convert_to_numpy(ka.InferenceDecoder(*parts, 1, END, 8, stop_sequences=stop)(memory)["ids"])
    np.testing.assert_array_equal(stopped[first, :2], [stop[0][0], END])
    with pytest.raises(ValueError, match=r"InferenceDecoder: `stop_sequences` holds \[3, 2\], which contains the end"):
        ka.InferenceDecoder(*parts, 1, END, 8, stop_sequences=[[3, END]])
    for bad in ([3, 4], [[]], [[1, -1]], [[1.5]], "ab"):
        with pytest.raises(ValueError, match=r"`banned_sequences` must be a list of token sequences, each a non-empty"):
            ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=bad)
    outside = ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=[[3, 9]])
    with pytest.raises(ValueError, match=r"`banned_sequences` holds \[3, 9\], with an id outside the decoder's 9 ids"):
        outside(memory)


def test_every_pair_of_a_tiny_vocabulary_banned_leaves_only_the_end():
    # With every pair (a, b) of the non-end ids banned, a row cannot take a second non-end token.
    logits = transitions(4)
    ids_alone = [i for i in range(VOCABULARY) if i != END]
    banned = [list(pair) for pair in itertools.product(ids_alone, repeat=2)]
    ids = ops.convert_to_numpy(decode(logits, [BannedSequences(banned)])["ids"])
    assert ((ids[:, 0] == END) | (ids[:, 1] == END)).all()
    assert (numpy_greedy(logits)[:, 1] != END).any()  # free decoding goes on


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_sequences_given_per_request_act_on_each_example_as_fixed_ones_would(search):
    logits = transitions(6)
    free = numpy_greedy(logits)
    token = next(int(t) for t in free[1] if t != END)
    # Example 0 bans a pair it produced and stops on nothing; 1 stops on a token; 2 both, two sequences each.
    banned = [[list(map(int, free[0, :2]))], [], [[int(free[2, 0])], list(map(int, free[2, 1:3]))]]
    stop = [[], [[token]], [[int(free[2, 1]), int(free[2, 2])], [3, 3, 3]]]
    banned = [[q for q in sets if END not in q] for sets in banned]
    options = {} if search == "greedy" else {"beam_width": 3}
    run = greedy_search if search == "greedy" else beam_search
    tables = {"banned_sequences": ops.convert_to_tensor(padded(banned, 3, 4)), "stop_sequences": padded(stop)}
    request = decode(logits, [BannedSequencesInput(), StopSequencesInput()], run, inputs=tables, **options)
    request = ops.convert_to_numpy(request["ids"])
    for b in range(3):
        fixed = [BannedSequences(banned[b])] if banned[b] else []
        fixed += [StopSequences(stop[b])] if stop[b] else []
        alone = ops.convert_to_numpy(decode(logits[b : b + 1], fixed, run, **options)["ids"])[0]
        np.testing.assert_array_equal(request[b], alone, err_msg=f"example {b}")
    if search == "greedy":
        np.testing.assert_array_equal(request[1], numpy_greedy(logits[1:2], stop=stop[1])[0])
        assert not np.array_equal(request, free)


def test_a_decoder_takes_sequences_with_the_call_beside_its_own_and_refuses_bad_ones():
    keras.utils.set_random_seed(0)
    parts = (ka.AttentionGRUCell(8, ka.AdditiveAttention(4)), keras.layers.Embedding(9, 4), keras.layers.Dense(9))
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    free = ops.convert_to_numpy(ka.InferenceDecoder(*parts, 1, END, 8)(memory)["ids"])
    first = [[int(free[b, 0])] if free[b, 0] != END else [7] for b in range(3)]
    second = [[int(free[b, 1])] if free[b, 1] != END else [7] for b in range(3)]
    built = ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=first[:1])
    union = ka.InferenceDecoder(*parts, 1, END, 8, banned_sequences=first[:1] + second[:1])
    # The decoder's own banned sequence and the request's both hold on example 0.
    request = padded([second[:1], [], []])
    both = ops.convert_to_numpy(built(memory, banned_sequences=request)["ids"])
    np.testing.assert_array_equal(both[0], ops.convert_to_numpy(union(memory)["ids"])[0])
    np.testing.assert_array_equal(both[1:], ops.convert_to_numpy(built(memory)["ids"])[1:])
    plain = ka.InferenceDecoder(*parts, 1, END, 8)
    stopped = ops.convert_to_numpy(plain(memory, stop_sequences=padded([first[0:1], [], first[2:3]]))["ids"])
    starting = [b for b in (0, 2) if free[b, 0] != END]  # a first token to stop after
    assert starting
    np.testing.assert_array_equal(stopped[starting, 1], END)
    np.testing.assert_array_equal(stopped[1], free[1])
    # Sequences of no tokens are none.
    np.testing.assert_array_equal(ops.convert_to_numpy(plain(memory, stop_sequences=np.zeros((3, 2, 0)))["ids"]), free)
    for bad, message in (
        (padded([[[3]], [], []])[:2], r"must be \(batch = 3, sequences, tokens\) ids"),
        (padded([[[3, 9]], [], []]), r"holds an id outside the vocabulary in sequence 0 of example 0"),
        (padded([[], [[4, END]], []]), r"holds the end token 2 \(nothing follows it\) in sequence 0 of example 1"),
        (np.array([[[4, -1, 5]]] * 3, "int32"), r"holds an id after its -1 padding in sequence 0 of example 0"),
        (np.array([[4, 5]] * 3, "int32"), r"must be \(batch = 3, sequences, tokens\) ids, each .*; got shape \[3, 2\]"),
    ):
        with pytest.raises(ValueError, match=r"InferenceDecoder: `stop_sequences` " + message):
            plain(memory, stop_sequences=bad)
