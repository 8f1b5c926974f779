"""Diarization error rate: how much of the reference's speech time is missed, falsely found or
given to the wrong speaker, under the best one-to-one mapping of hypothesis speakers to
reference speakers (NIST's definition, as md-eval and pyannote.metrics score it), with a collar
around every reference turn's boundaries left unscored. Overlapped reference speech counts
once per speaker. Also RTTM, the turns' usual file format, and STM's utterances as a transcript.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, NamedTuple, Sequence, Tuple, Union

import numpy as np

__all__ = ["DerReport", "diarization_error_rate", "read_rttm", "rttm_lines", "stm_transcript"]

_STEP = 0.01  # seconds a frame: turns are scored on a 10 ms grid

Turns = Sequence[Tuple[float, float, str]]


class DerReport(NamedTuple):
    """Seconds of each error and of scored reference speech; ``rate`` their ratio."""

    missed: float
    false_alarm: float
    confusion: float
    speech: float
    mapping: Dict[str, str]
    """hypothesis speaker -> the reference speaker it was scored as"""

    @property
    def rate(self) -> float:
        return (self.missed + self.false_alarm + self.confusion) / max(self.speech, 1e-9)


def _activity(turns: Turns, names: List[str], frames: int) -> np.ndarray:
    """(speakers, frames) booleans: who speaks in each 10 ms frame."""
    out = np.zeros((len(names), frames), dtype=bool)
    for start, end, who in turns:
        a, b = int(round(start / _STEP)), int(round(end / _STEP))
        out[names.index(who), max(a, 0) : max(b, 0)] = True
    return out


def diarization_error_rate(reference: Turns, hypothesis: Turns, collar: float = 0.25
                           ) -> DerReport:  # fmt: skip
    """The DER of ``hypothesis`` (start, end, speaker) turns against ``reference``'s, frames
    within ``collar`` seconds of a reference turn's start or end not scored."""
    from scipy.optimize import linear_sum_assignment

    end = max([e for _, e, _ in [*reference, *hypothesis]], default=0.0)
    frames = int(np.ceil(end / _STEP)) + 1
    ref_names = sorted({w for _, _, w in reference})
    hyp_names = sorted({w for _, _, w in hypothesis})
    ref = _activity(reference, ref_names, frames)
    hyp = _activity(hypothesis, hyp_names, frames)
    scored = np.ones(frames, dtype=bool)
    c = int(round(collar / _STEP))
    for start, stop, _ in reference:
        for t in (start, stop):
            k = int(round(t / _STEP))
            scored[max(k - c, 0) : k + c] = False
    ref, hyp = ref[:, scored], hyp[:, scored]
    overlap = ref.astype(np.int64) @ hyp.T.astype(np.int64)  # (R, H) frames both speak
    rows, cols = linear_sum_assignment(-overlap) if overlap.size else ([], [])
    correct = int(sum(overlap[r, h] for r, h in zip(rows, cols)))
    n_ref, n_hyp = ref.sum(0), hyp.sum(0)
    missed = np.maximum(n_ref - n_hyp, 0).sum()
    false_alarm = np.maximum(n_hyp - n_ref, 0).sum()
    confusion = np.minimum(n_ref, n_hyp).sum() - correct
    mapping = {hyp_names[h]: ref_names[r] for r, h in zip(rows, cols)}
    return DerReport(missed * _STEP, false_alarm * _STEP, confusion * _STEP,
                     n_ref.sum() * _STEP, mapping)  # fmt: skip


def read_rttm(path: Union[str, Path]) -> List[Tuple[float, float, str]]:
    """The (start, end, speaker) turns of an RTTM file's SPEAKER lines."""
    turns = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields or fields[0] != "SPEAKER":
            continue
        try:
            start, length = float(fields[3]), float(fields[4])
            turns.append((start, start + length, fields[7]))
        except (IndexError, ValueError):
            raise ValueError(f"{path}:{n}: not an RTTM SPEAKER line: {line!r}") from None
    return turns


def rttm_lines(file_id: str, turns: Turns) -> str:
    """Turns as RTTM SPEAKER lines (``file_id`` without spaces)."""
    name = file_id.replace(" ", "_") or "audio"
    return "".join(f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n"
                   for s, e, w in turns)  # fmt: skip


def stm_transcript(path: Union[str, Path], name: str, duration: float):
    """An STM file's utterances as a :class:`~wenet_lite.transcript.Transcript` of ``name``:
    each utterance a segment, its words spread evenly over it, no speaker on them (the STM's
    speakers are the reference: ``line.split()[2]``)."""
    from wenet_lite.runtime.result import Word
    from wenet_lite.transcript import Segment, Transcript

    segments = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith(";;"):
            continue
        try:
            _, _, _, start, end, text = line.split(None, 5)
            t0, t1 = float(start), float(end)
        except ValueError:
            raise ValueError(f"{path}:{n}: not an STM line: {line!r}") from None
        words = text.split()
        step = (t1 - t0) / max(len(words), 1)
        ws = tuple(Word(w, t0 + i * step, t0 + (i + 1) * step) for i, w in enumerate(words))
        segments.append(Segment(t0, t1, text, ws))
    return Transcript(name, " ".join(s.text for s in segments), segments, duration)
