"""Vocabulary: tokenising, padding, start/end handling, decoding and n-best lists."""

import numpy as np
import pytest

from keras_attention.text import Vocabulary, n_best, pad_sequences

PHONES = Vocabulary(
    ["<pad>", "<s>", "</s>", "AE", "K", "T", "D", "AO", "G"], separator=" ", start_token="<s>", end_token="</s>"
)
LETTERS = Vocabulary(["<pad>", "<unk>", "a", "c", "t", "'"], unknown_token="<unk>", lowercase=True)


def test_characters_encode_to_padded_ids_with_unknowns():
    ids = LETTERS.encode(["cat", "Tax", "a'"])
    np.testing.assert_array_equal(ids, [[3, 2, 4], [4, 2, 1], [2, 5, 0]])
    assert ids.dtype == np.int32


def test_separated_tokens_encode_with_start_and_end():
    np.testing.assert_array_equal(PHONES.encode("K AE T", add_start=True, add_end=True), [[1, 4, 3, 5, 2]])
    # Runs of whitespace separate like one space.
    np.testing.assert_array_equal(PHONES.encode(["D  AO\tG"]), [[6, 7, 8]])


def test_teacher_forcing_pairs_are_shifted_by_one():
    inputs, targets = PHONES.encode_targets(["K AE T", "D AO"])
    np.testing.assert_array_equal(inputs, [[1, 4, 3, 5], [1, 6, 7, 0]])
    np.testing.assert_array_equal(targets, [[4, 3, 5, 2], [6, 7, 2, 0]])
    shifted = inputs[:, 1:] > 0
    np.testing.assert_array_equal(inputs[:, 1:][shifted], targets[:, :-1][shifted])


def test_decode_stops_at_the_end_token_and_drops_padding_and_start():
    assert PHONES.decode([1, 4, 3, 5, 2, 8, 8]) == ["K", "AE", "T"]
    assert PHONES.decode([[4, 0, 3, 2], [2, 4, 4, 4]]) == [["K", "AE"], []]
    assert PHONES.detokenize([[4, 3, 5, 2], [6, 7, 8, 0]]) == ["K AE T", "D AO G"]
    assert LETTERS.detokenize(np.array([[[3, 2, 4]], [[4, 0, 0]]])) == [["cat"], ["t"]]


def test_round_trip_of_every_token_sequence():
    rng = np.random.default_rng(0)
    for _ in range(50):
        tokens = [PHONES.tokens[i] for i in rng.integers(3, len(PHONES), rng.integers(0, 8))]
        text = " ".join(tokens)
        assert PHONES.detokenize(PHONES.encode(text, add_end=True))[0] == text


def test_build_sorts_tokens_after_the_special_ones_and_drops_rare_ones():
    vocabulary = Vocabulary.build(
        ["b a", "a c", "a"], separator=" ", min_count=2, unknown_token="<unk>", end_token="</s>"
    )
    assert vocabulary.tokens == ["<pad>", "<unk>", "</s>", "a"]
    assert vocabulary.encode("a b").tolist() == [[3, 1]]
    assert Vocabulary.build(["ba", "ab"]).tokens == ["<pad>", "a", "b"]


def test_unicode_normalization_splits_syllables_and_accents():
    korean = Vocabulary.build(["한국", "국어"], normalization="NFD")
    # padding and eight jamo (initial, medial and final forms differ) where
    # the three syllables would be three tokens without normalization
    assert len(korean) == 1 + 8 and len(Vocabulary.build(["한국", "국어"])) == 1 + 3
    np.testing.assert_array_equal(korean.encode("국"), korean.encode("\u1100\u116e\u11a8"))
    accents = Vocabulary.build(["été"], normalization="NFD")
    assert accents.tokens == ["<pad>", "e", "t", "\u0301"]
    assert Vocabulary.from_config(accents.get_config()).encode("été").tolist() == [[1, 3, 2, 1, 3]]


def test_config_and_file_round_trip(tmp_path):
    assert Vocabulary.from_config(PHONES.get_config()) == PHONES
    LETTERS.save(tmp_path / "letters.json")
    loaded = Vocabulary.load(tmp_path / "letters.json")
    assert loaded == LETTERS and loaded.lowercase and loaded.unknown_id == 1


def test_n_best_ranks_hypotheses_and_drops_filler_beams():
    result = {
        "ids": np.array([[[6, 7, 2], [4, 3, 2], [2, 2, 2]]]),
        "scores": np.array([[-2.0, -0.5, -1e30]]),
        "log_probs": np.array([[-2.5, -0.7, -1e30]]),
        "lengths": np.array([[3, 3, 0]]),
    }
    (hypotheses,) = n_best(result, PHONES)
    assert [h["text"] for h in hypotheses] == ["K AE", "D AO"]
    assert hypotheses[0] == {"tokens": ["K", "AE"], "text": "K AE", "score": -0.5, "log_prob": -0.7, "length": 3}
    assert len(n_best(result, PHONES, n=1)[0]) == 1


def test_pad_sequences():
    np.testing.assert_array_equal(pad_sequences([[1, 2], [3]], length=3), [[1, 2, 0], [3, 0, 0]])
    assert pad_sequences([], length=None).shape == (0, 1)
    with pytest.raises(ValueError, match=r"a sequence has 2 ids, more than `length` = 1"):
        pad_sequences([[1, 2]], length=1)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Vocabulary(["a", "<pad>"]), r"id 0 must be the padding token '<pad>'; got tokens\[0\] = 'a'"),
        (lambda: Vocabulary(["<pad>", "a", "a"]), r"`tokens` has duplicates: \['a'\]"),
        (lambda: Vocabulary(["<pad>", "ab"]), r"every token but the special ones must be one character; got \['ab'\]"),
        (lambda: Vocabulary(["<pad>", "a b"], separator=" "), r"tokens may not contain the separator ' '"),
        (lambda: Vocabulary(["<pad>", "a"], end_token="</s>"), r"`end_token` '</s>' is not in `tokens`"),
        (
            lambda: Vocabulary(["<pad>", "a"], separator=""),
            r"`separator` must be None \(characters\) or a non-empty string",
        ),
        (lambda: PHONES.encode("K X"), r"token 'X' is not in the vocabulary and it has no `unknown_token`"),
        (lambda: LETTERS.encode_targets(["a"]), r"this needs a `start_token`; the vocabulary has none"),
        (lambda: LETTERS.encode([3]), r"`texts` must be a string or a list of strings; got int 3"),
        (lambda: PHONES.decode([[1, 99]]), r"id 99 is outside \[0, 9\)"),
        (
            lambda: n_best({"ids": np.zeros((2, 3))}, PHONES),
            r"must be beam output \(batch, beam, length\); got shape \(2, 3\)",
        ),
        (
            lambda: n_best({"ids": np.zeros((1, 3, 2), int)}, PHONES, n=4),
            r"n_best: `n` must be a number of beams from 1 to 3; got 4",
        ),
        (
            lambda: Vocabulary.build(["ab"], min_count=0),
            r"Vocabulary.build: `min_count` must be a positive integer; got 0",
        ),
        (lambda: Vocabulary.from_config({"tokens": ["<pad>", "a"], "sep": " "}), r"unknown keys \['sep'\]"),
        (
            lambda: Vocabulary(["<pad>", "a"], normalization="nfd"),
            r"`normalization` must be None or one of NFC, NFD, NFKC, NFKD; got 'nfd'",
        ),
    ],
)
def test_errors_name_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()
