"""Word and character error rates via kaldialign's Levenshtein alignment, and their reports.

Words are whitespace-separated; characters are those of the text with all whitespace removed.
Counts come from the same alignment that the details lines print, so the two always agree.

Empty references: an error rate divides by ``max(ref_len, 1)``, so an empty reference scores
0 % with an empty hypothesis and 100 % per inserted word otherwise (never a division by zero or
an infinite rate). Corpus rates are computed from summed counts, not averaged per utterance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Sequence, Tuple

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


def align_tokens(ref: Sequence[str], hyp: Sequence[str]) -> Alignment:
    """Minimum-edit alignment as (ref, hyp) pairs; ``EPS`` marks an insertion or deletion."""
    for side, tokens in (("ref", ref), ("hyp", hyp)):
        if EPS in tokens:
            raise ValueError(f"{side} contains {EPS!r}, which marks gaps in alignments")
    return kaldialign.align(list(ref), list(hyp), EPS)


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
