"""Word and character error rates via kaldialign's Levenshtein alignment, and their reports.

Words are whitespace-separated; characters are those of the text with all whitespace removed.
Counts come from the same alignment that the details lines print, so the two always agree.

Long texts (an hour of speech without endpoints): the alignment matrix of an n-token
reference and an m-token hypothesis takes n*m cells, gigabytes for 50 000 characters. Above
``MAX_CELLS`` cells the alignment is made piecewise: n-grams that occur exactly once in each
text and in the same order (the longest increasing chain of them) are matched as anchors, and
the stretches between anchors are aligned exactly, recursively when still large. Memory and
time then grow with the length, not its square. The result is an alignment of the two texts
(its counts are an upper bound of the minimum edit distance); on the benchmark's hour of speech
it equals the exact counts where those can be computed (``benchmarks/bench_long.py``).

Empty references: an error rate divides by ``max(ref_len, 1)``, so an empty reference scores
0 % with an empty hypothesis and 100 % per inserted word otherwise (never a division by zero or
an infinite rate). Corpus rates are computed from summed counts, not averaged per utterance.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import kaldialign

__all__ = [
    "EPS",
    "ErrorCounts",
    "UtteranceScore",
    "align_tokens",
    "char_errors",
    "count_errors",
    "format_details",
    "format_summary",
    "score_utterance",
    "sum_counts",
    "word_errors",
]

EPS = "***"  # stands for the missing side of an insertion or deletion (sclite's convention)

Alignment = List[Tuple[str, str]]


@dataclass(frozen=True)
class ErrorCounts:
    """Edit operations turning a reference into a hypothesis, and the reference length."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    ref_len: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        """Errors per reference token (a fraction, not %); see the module doc for ref_len 0."""
        return self.errors / max(self.ref_len, 1)

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.ref_len + other.ref_len,
        )


def sum_counts(counts: Iterable[ErrorCounts]) -> ErrorCounts:
    return sum(counts, ErrorCounts())


MAX_CELLS = 4_000_000
"""Largest n*m aligned in one piece (kaldialign's matrix: about 16 MB); see the module doc."""


def align_tokens(ref: Sequence[str], hyp: Sequence[str], max_cells: int = MAX_CELLS) -> Alignment:
    """Minimum-edit alignment as (ref, hyp) pairs; ``EPS`` marks an insertion or deletion.
    Texts with more than ``max_cells`` = len(ref) * len(hyp) are aligned piecewise at anchors
    (module doc)."""
    for side, tokens in (("ref", ref), ("hyp", hyp)):
        if EPS in tokens:
            raise ValueError(f"{side} contains {EPS!r}, which marks gaps in alignments")
    ref, hyp = list(ref), list(hyp)
    if len(ref) * len(hyp) <= max_cells:
        return kaldialign.align(ref, hyp, EPS)
    out: Alignment = []
    _align_pieces(ref, hyp, max_cells, out)
    return out


def _align_pieces(ref: List[str], hyp: List[str], max_cells: int, out: Alignment) -> None:
    if len(ref) * len(hyp) <= max_cells:
        out.extend(kaldialign.align(ref, hyp, EPS))
        return
    anchors = _anchors(ref, hyp)
    if not anchors:  # nothing in common to hold on to: split both in proportion
        r, h = len(ref) // 2, len(hyp) // 2
        _align_pieces(ref[:r], hyp[:h], max_cells, out)
        _align_pieces(ref[r:], hyp[h:], max_cells, out)
        return
    r0 = h0 = 0
    for r, h, n in anchors:
        _align_pieces(ref[r0:r], hyp[h0:h], max_cells, out)
        out.extend(zip(ref[r : r + n], hyp[h : h + n]))
        r0, h0 = r + n, h + n
    _align_pieces(ref[r0:], hyp[h0:], max_cells, out)


def _anchors(ref: List[str], hyp: List[str]) -> List[Tuple[int, int, int]]:
    """(ref start, hyp start, length) of matching n-grams that occur once in each text, in the
    same order in both, not overlapping: the longest such chain. n is the smallest size (up to
    16 tokens) at which 80 % of the reference's n-grams are unique (words: 2, characters: 6 on
    English text; shorter ones match in wrong places)."""
    for n in (1, 2, 3, 4, 6, 8, 12, 16):
        if len(ref) < n or len(hyp) < n:
            return []
        ref_at = _unique_ngrams(ref, n)
        if len(ref_at) * 5 >= 4 * (len(ref) - n + 1) or n == 16:
            break
    hyp_at = _unique_ngrams(hyp, n)
    pairs = sorted((r, hyp_at[g]) for g, r in ref_at.items() if g in hyp_at)
    chain: List[Tuple[int, int, int]] = []
    for r, h in _increasing_chain(pairs):
        if not chain or (r >= chain[-1][0] + n and h >= chain[-1][1] + n):
            chain.append((r, h, n))
    return chain


def _unique_ngrams(tokens: List[str], n: int) -> Dict[Tuple[str, ...], int]:
    """n-gram -> its start, for the n-grams that occur exactly once."""
    seen: Dict[Tuple[str, ...], int] = {}
    repeated = set()
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        if gram in seen:
            repeated.add(gram)
        else:
            seen[gram] = i
    return {g: i for g, i in seen.items() if g not in repeated}


def _increasing_chain(pairs: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The longest subsequence of ``pairs`` (sorted by their first item) whose second items
    increase (patience sorting, O(k log k))."""
    tail_values: List[int] = []  # [k]: the smallest second item ending a chain of k + 1
    tails: List[int] = []  # [k]: the index in pairs of that item
    back = [-1] * len(pairs)
    for i, (_, h) in enumerate(pairs):
        k = bisect.bisect_left(tail_values, h)
        if k > 0:
            back[i] = tails[k - 1]
        if k == len(tails):
            tail_values.append(h)
            tails.append(i)
        else:
            tail_values[k], tails[k] = h, i
    chain = []
    i = tails[-1] if tails else -1
    while i >= 0:
        chain.append(pairs[i])
        i = back[i]
    return chain[::-1]


def count_errors(alignment: Alignment) -> ErrorCounts:
    sub = dels = ins = ref_len = 0
    for r, h in alignment:
        if r == EPS:
            ins += 1
            continue
        ref_len += 1
        if h == EPS:
            dels += 1
        elif r != h:
            sub += 1
    return ErrorCounts(sub, dels, ins, ref_len)


def word_errors(ref: str, hyp: str) -> ErrorCounts:
    return count_errors(align_tokens(ref.split(), hyp.split()))


def _chars(text: str) -> List[str]:
    return list("".join(text.split()))


def char_errors(ref: str, hyp: str) -> ErrorCounts:
    return count_errors(align_tokens(_chars(ref), _chars(hyp)))


@dataclass(frozen=True)
class UtteranceScore:
    utt_id: str
    words: ErrorCounts
    chars: ErrorCounts
    alignment: Alignment  # word level, for the details file


def score_utterance(utt_id: str, ref: str, hyp: str) -> UtteranceScore:
    alignment = align_tokens(ref.split(), hyp.split())
    return UtteranceScore(utt_id, count_errors(alignment), char_errors(ref, hyp), alignment)


def _format_rate(name: str, counts: ErrorCounts) -> str:
    return (
        f"{name} {100 * counts.rate:.2f} % [ S={counts.substitutions}, D={counts.deletions}, "
        f"I={counts.insertions} / {counts.ref_len} ]"
    )


def format_summary(scores: Sequence[UtteranceScore]) -> List[str]:
    """Corpus WER, CER and utterance count, one line each, e.g.
    ``WER 12.50 % [ S=1, D=0, I=0 / 8 ]``."""
    return [
        _format_rate("WER", sum_counts(s.words for s in scores)),
        _format_rate("CER", sum_counts(s.chars for s in scores)),
        f"utterances {len(scores)}",
    ]


def summary_record(scores: Sequence[UtteranceScore]) -> Dict[str, Any]:
    """The numbers of :func:`format_summary` for ``summary.json``: WER and CER in % (two
    decimals, as printed) with their edit counts, and the utterance count."""

    def rate(counts: ErrorCounts) -> Dict[str, Any]:
        return {
            "percent": round(100 * counts.rate, 2), "substitutions": counts.substitutions,
            "deletions": counts.deletions, "insertions": counts.insertions,
            "ref_len": counts.ref_len,
        }  # fmt: skip

    return {
        "wer": rate(sum_counts(s.words for s in scores)),
        "cer": rate(sum_counts(s.chars for s in scores)),
        "utterances": len(scores),
    }


def _op(r: str, h: str) -> str:
    if r == EPS:
        return "I"
    if h == EPS:
        return "D"
    return "C" if r == h else "S"


def format_details(score: UtteranceScore) -> List[str]:
    """Per-utterance lines for a details file: the WER line, then ref/hyp/op rows whose columns
    line up (op: C correct, S substitution, D deletion, I insertion)."""
    widths = [max(len(r), len(h)) for r, h in score.alignment]
    rows = {
        "ref": [r for r, _ in score.alignment],
        "hyp": [h for _, h in score.alignment],
        "op": [_op(r, h) for r, h in score.alignment],
    }
    lines = [_format_rate(f"{score.utt_id} WER", score.words)]
    for name, cells in rows.items():
        padded = " ".join(cell.ljust(w) for cell, w in zip(cells, widths))
        lines.append(f"{score.utt_id} {name + ':':<4} {padded}".rstrip())
    return lines


def words_right(alignment: Alignment) -> List[bool]:
    """For each hypothesis word of ``alignment`` in order: whether it matches its reference
    word (insertions and substitutions are wrong)."""
    return [ref == hyp for ref, hyp in alignment if hyp != EPS]


def confidence_auc(confidences: Sequence[float], right: Sequence[bool]) -> Optional[float]:
    """The area under the ROC curve of "this word is right" scored by its confidence: the
    chance that a right word has a higher confidence than a wrong one (ties count half);
    None when there are no right or no wrong words."""
    pairs = sorted(zip(confidences, right))
    n_right = sum(1 for _, r in pairs if r)
    n_wrong = len(pairs) - n_right
    if not n_right or not n_wrong:
        return None
    # rank-sum (Mann-Whitney U) with tied confidences given their mean rank
    ranks = [0.0] * len(pairs)
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    rank_sum = sum(rank for rank, (_, r) in zip(ranks, pairs) if r)
    return (rank_sum - n_right * (n_right + 1) / 2) / (n_right * n_wrong)
