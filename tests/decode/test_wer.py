import pytest

from wenet_lite.decode.wer import (
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
