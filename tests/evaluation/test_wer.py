import pytest

from wenet_lite.evaluation.wer import (
    ErrorCounts,
    align_tokens,
    char_errors,
    format_details,
    format_summary,
    score_utterance,
    sum_counts,
    word_errors,
)


@pytest.mark.parametrize(
    "ref, hyp, expected",
    [
        ("a b c d", "a b c d", ErrorCounts(0, 0, 0, 4)),
        ("a b c d", "a x c d", ErrorCounts(1, 0, 0, 4)),
        ("a b c d", "a c d", ErrorCounts(0, 1, 0, 4)),
        ("a b c d", "a b y c d z", ErrorCounts(0, 0, 2, 4)),
        ("the cat sat on the mat", "the bat sat on mat today", ErrorCounts(1, 1, 1, 6)),
        ("a b", "", ErrorCounts(0, 2, 0, 2)),
        ("  a   b ", "a b", ErrorCounts(0, 0, 0, 2)),  # any whitespace separates words
    ],
)
def test_word_error_counts(ref, hyp, expected):
    assert word_errors(ref, hyp) == expected


def test_rates_and_empty_reference():
    assert word_errors("a b c d", "a x c").rate == pytest.approx(0.5)
    assert word_errors("", "").rate == 0.0
    # Empty reference: rate divides by max(N, 1), i.e. counts inserted words.
    empty = word_errors("", "x y")
    assert empty == ErrorCounts(0, 0, 2, 0)
    assert empty.rate == 2.0


def test_corpus_counts_sum_before_dividing():
    scores = [
        score_utterance("u1", "a b c d", "a x c d"),  # 1 / 4
        score_utterance("u2", "e f", ""),  # 2 / 2
        score_utterance("u3", "", "g"),  # 1 / 0
    ]
    total = sum_counts(s.words for s in scores)
    assert total == ErrorCounts(1, 2, 1, 6)
    assert total.rate == pytest.approx(4 / 6)  # not the mean of per-utterance rates
    assert format_summary(scores) == [
        "WER 66.67 % [ S=1, D=2, I=1 / 6 ]",
        "CER 66.67 % [ S=1, D=2, I=1 / 6 ]",
        "utterances 3",
    ]


def test_char_errors_ignore_spaces():
    # 'abcd' vs 'abxd': one substitution; word boundaries do not count as characters.
    assert char_errors("ab cd", "a bxd") == ErrorCounts(1, 0, 0, 4)
    assert char_errors("hello world", "helloworld") == ErrorCounts(0, 0, 0, 10)
    assert char_errors("abc", "abcde") == ErrorCounts(0, 0, 2, 3)
    assert score_utterance("u", "ab cd", "a bxd").chars == ErrorCounts(1, 0, 0, 4)


def test_details_lines_line_up():
    lines = format_details(score_utterance("u1", "the cat sat", "the bat sat down"))
    assert lines == [
        "u1 WER 66.67 % [ S=1, D=0, I=1 / 3 ]",
        "u1 ref: the cat sat ***",
        "u1 hyp: the bat sat down",
        "u1 op:  C   S   C   I",
    ]


def test_gap_symbol_in_text_is_rejected():
    with pytest.raises(ValueError, match=r"hyp contains '\*\*\*'"):
        align_tokens(["a"], ["***"])


def _noisy_copy(ref, rate, rng, vocab):
    """``ref`` with about ``rate`` of its words substituted, deleted, or with one inserted."""
    out = []
    for word in ref:
        roll = rng.random()
        if roll < rate / 3:
            out.append(rng.choice(vocab))
        elif roll < 2 * rate / 3:
            continue
        elif roll < rate:
            out += [word, rng.choice(vocab)]
        else:
            out.append(word)
    return out


def _valid(alignment, ref, hyp):
    from wenet_lite.evaluation.wer import EPS

    assert [r for r, _ in alignment if r != EPS] == list(ref)
    assert [h for _, h in alignment if h != EPS] == list(hyp)


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.6])
def test_long_texts_are_aligned_in_pieces_close_to_exact(rate):
    """Above max_cells the alignment is made between anchors: a valid alignment of both texts,
    never better than the exact one (which it would then contradict) and within 1 % of it."""
    import random

    from wenet_lite.evaluation.wer import count_errors

    rng = random.Random(int(rate * 100))
    vocab = [f"w{i}" for i in range(400)]
    ref = [rng.choice(vocab) for _ in range(3000)]
    hyp = _noisy_copy(ref, rate, rng, vocab)
    exact = count_errors(align_tokens(ref, hyp, max_cells=10**9))
    pieces = align_tokens(ref, hyp, max_cells=20_000)
    _valid(pieces, ref, hyp)
    got = count_errors(pieces)
    assert got.ref_len == exact.ref_len
    assert exact.errors <= got.errors <= 1.01 * exact.errors + 1, (got, exact)


@pytest.mark.parametrize(
    "ref, hyp",
    [
        ([f"a{i}" for i in range(500)], [f"b{i}" for i in range(700)]),  # nothing in common
        (["x", "y"] * 400, ["x", "y", "z"] * 300),  # nothing unique: split in proportion
        ([f"a{i}" for i in range(900)], []),
    ],
)
def test_long_texts_without_anchors_still_align(ref, hyp):
    _valid(align_tokens(ref, hyp, max_cells=5_000), ref, hyp)


def test_short_texts_align_in_one_piece_as_before():
    import kaldialign

    ref, hyp = "the cat sat on the mat".split(), "the bat sat on mat today".split()
    assert align_tokens(ref, hyp) == kaldialign.align(ref, hyp, "***")
