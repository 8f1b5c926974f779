"""The hotword context graph: matches, failure links, take-back on failure, overlapping phrases
and per-phrase scores, checked step by step against a brute-force scorer."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List, Sequence, Tuple

import pytest

from wenet_lite.search.context import ROOT, ContextGraph, Phrase, read_hotwords


def _graph(*phrases: Tuple[Sequence[int], float]) -> ContextGraph:
    return ContextGraph([Phrase(str(t), tuple(t), s) for t, s in phrases])


def _prefix_bonus(prefix: Tuple[int, ...], phrases: List[Phrase]) -> float:
    """Node score of a trie path, from the definition: each token is worth the highest score
    of the phrases that start with the path up to it; the word-boundary symbol (-1) nothing."""
    return sum(
        max(p.score for p in phrases if p.tokens[: i + 1] == prefix[: i + 1])
        for i in range(len(prefix))
        if prefix[i] != -1
    )


def _brute_force(x: Sequence[int], phrases: List[Phrase]) -> float:
    """C(x) + held(x) of the module docstring, by searching every position."""
    x = tuple(x)
    whole = {p.tokens for p in phrases}
    completed = sum(  # a phrase listed twice is one phrase
        _prefix_bonus(tokens, phrases)
        for end in range(1, len(x) + 1)
        for tokens in whole
        if end >= len(tokens) and x[end - len(tokens) : end] == tokens
    )
    starts = {p.tokens[:i] for p in phrases for i in range(len(p.tokens) + 1)}
    v = next(x[i:] for i in range(len(x) + 1) if x[i:] in starts)  # longest matching suffix
    lock = max((len(v[:i]) for i in range(len(v) + 1) if v[:i] in whole), default=0)
    held = _prefix_bonus(v, phrases) - _prefix_bonus(v[:lock], phrases)
    return completed + held


def test_hand_checked_gains() -> None:
    g = _graph(([1, 2, 3], 1.0), ([2, 3], 2.0), ([2], 0.5))
    state, gains = ROOT, []
    for token in [1, 2, 4]:
        state, gain = g.step(state, token)
        gains.append(gain)
    # 1: +1 (partial 1-2-3); 2: +1 on the path, and the phrase [2] completes as a suffix (+2,
    # the node score of [2]: the highest score through it); 4: the 1-2 partial fails (-2).
    assert gains == [1.0, 3.0, -2.0] and state == ROOT
    state, total = ROOT, 0.0
    for token in [2, 3]:
        state, gain = g.step(state, token)
        total += gain
    assert total == 2.0 + 4.0  # [2] (node score 2.0) and [2 3] (4.0): both occurrences count
    assert g.final(state) == 0.0  # nothing unfinished


@pytest.mark.parametrize("seed", range(40))
def test_equals_brute_force_on_random_sequences(seed: int) -> None:
    rng = random.Random(seed)
    phrases = []
    for _ in range(rng.randint(1, 6)):
        tokens = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
        phrases.append(Phrase(str(tokens), tokens, rng.choice([0.5, 1.0, 2.5])))
    g = ContextGraph(phrases)
    x: List[int] = []
    state, total = ROOT, 0.0
    for token in [rng.randint(1, 5) for _ in range(30)]:
        state, gain = g.step(state, token)
        total += gain
        x.append(token)
        assert total == pytest.approx(_brute_force(x, phrases)), (phrases, x)
    # The end of a segment takes back the open match: what stays is the completed phrases.
    completed = sum(_prefix_bonus(g.phrases[i].tokens, g.phrases) for *_, i in g.matches(x))
    assert total + g.final(state) == pytest.approx(completed)


def test_matches_report_overlapping_phrases() -> None:
    g = _graph(([5, 6], 1.0), ([5, 6, 7], 1.0), ([6, 7], 1.0))
    assert sorted(g.matches([9, 5, 6, 7, 5])) == [(1, 3, 0), (1, 4, 1), (2, 4, 2)]


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "hot.txt"
    path.write_bytes(data)
    return path


def _encode(text: str) -> List[int]:
    return [ord(c) for c in text if c != "Q"]  # a phrase of only Q has no pieces


def test_reading_a_hotwords_file(tmp_path: Path) -> None:
    text = b"new york :3.5\n\n# comment\nRATIO 3:2\n  spaced   out  \nQQ\n"
    phrases, skipped = read_hotwords(_write(tmp_path, text), _encode, 1.5, str.upper)
    assert [p.text for p in phrases] == ["NEW YORK", "RATIO 3:2", "SPACED   OUT"]
    assert [p.score for p in phrases] == [3.5, 1.5, 1.5]
    assert skipped == [f"{tmp_path / 'hot.txt'}:6: 'QQ' has no pieces in the tokenizer: skipped"]


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "no hotword phrase"),
        (b"# only a comment\n", "no hotword phrase"),
        (b"fine\n\xff\xfe bad\n", ":2: not UTF-8 text"),
        (b"fine\nhello :loud\n", ":2: hotword score 'loud' is not a number"),
        (b"hello :nan\n", ":1: hotword score 'nan' is not a finite number"),
        (b"x" * 101 + b"\n", ":1: a phrase of 101 tokens; at most 100"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path: Path, data: bytes, words: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=f"{path}.*{words}"):
        read_hotwords(path, _encode, 1.5, str.upper)
    with pytest.raises(FileNotFoundError, match="hotwords file not found"):
        read_hotwords(tmp_path / "nope.txt", _encode)


def test_whole_words_only_with_word_starts() -> None:
    """Tokens 1 and 2 begin words. Hotword "1 3" (a word of two pieces) inside the longer word
    "1 3 4" earns nothing; followed by a new word or the end, it keeps its bonus."""
    g = ContextGraph([Phrase("ACT", (1, 3), 1.0)], word_starts={1, 2})

    def run(tokens):
        state, total = ROOT, 0.0
        for token in tokens:
            state, gain = g.step(state, token)
            total += gain
        return total, total + g.final(state)

    assert run([1, 3]) == (2.0, 2.0)  # the end completes it
    assert run([1, 3, 2]) == (2.0, 2.0)  # a new word completes it
    assert run([1, 3, 4]) == (0.0, 0.0)  # inside a longer word: taken back
    assert g.matches([1, 3, 4, 2, 1, 3]) == [(4, 6, 0)]


@pytest.mark.parametrize("seed", range(20))
def test_whole_words_equal_brute_force_over_boundary_symbols(seed: int) -> None:
    rng = random.Random(100 + seed)
    starts = {1, 2}
    phrases = []
    for _ in range(rng.randint(1, 5)):
        tokens = (rng.choice([1, 2]),) + tuple(rng.randint(1, 4) for _ in range(rng.randint(0, 3)))
        phrases.append(Phrase(str(tokens), tokens, rng.choice([0.5, 1.0, 2.5])))
    g = ContextGraph(phrases, word_starts=starts)
    # The oracle sees what the automaton sees: boundary symbols (score 0) in both.
    expanded = [
        Phrase(p.text, tuple(g._symbols(p.tokens, at_start=False, at_end=True)), p.score)
        for p in phrases
    ]
    x: List[int] = []
    state, total = ROOT, 0.0
    for token in [rng.randint(1, 4) for _ in range(25)]:
        state, gain = g.step(state, token)
        total += gain
        x.append(token)
        seen = g._symbols(x, at_start=True, at_end=False)
        assert total == pytest.approx(_brute_force(seen, expanded)), (phrases, x)
    completed = sum(_prefix_bonus(expanded[i].tokens, expanded) for *_, i in g.matches(x))
    assert total + g.final(state) == pytest.approx(completed)
