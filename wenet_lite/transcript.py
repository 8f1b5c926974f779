"""A transcript and the files it is written as: segments of words with their times, and
subtitle cues (SRT, WebVTT), JSON, TSV and plain text, as `wenet-lite transcribe --format`
writes them.

Subtitles (:func:`subtitle_cues`) follow the usual rules for players and readers: numbered
cues, at most two lines of 42 characters, at most 7 s on screen, at least 0.5 s where the next
cue leaves room, never overlapping.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from wenet_lite.runtime.result import Result, Word, join_words, unspaced

__all__ = ["DEFAULT_PAUSE_S", "FORMATS", "Cue", "Segment", "Transcript", "format_transcript",
           "pauses_transcript", "split_at_pauses", "subtitle_cues"]  # fmt: skip

DEFAULT_PAUSE_S = 0.8
"""full context: seconds between words that start a new segment, by default"""
FORMATS = ("txt", "json", "srt", "vtt", "tsv")
"""what `wenet-lite transcribe --format` writes"""


@dataclass(frozen=True)
class Segment:
    """A stretch of speech between pauses (full context) or endpoints (streaming)."""

    start: float
    """seconds from the start of the audio"""
    end: float
    text: str
    words: Tuple[Word, ...]
    """each with its start and end in seconds from the start of the audio"""
    speaker: Optional[str] = None
    """who spoke it (``S1``, ``S2``, ...), where speaker labels were asked for"""


@dataclass(frozen=True)
class Transcript:
    """What :func:`transcribe` returns for one input."""

    source: str
    """the file, ``-`` for stdin, or ``<array>``"""
    text: str
    segments: List[Segment]
    duration: float
    """seconds of audio"""

    @property
    def words(self) -> List[Word]:
        return [w for s in self.segments for w in s.words]

    def to_dict(self) -> dict:
        """The JSON form (``--format json``): text, duration and segments with word times."""

        def who(x) -> dict:  # a speaker only where labels were asked for
            return {"speaker": x.speaker} if x.speaker is not None else {}

        return {
            "file": self.source, "text": self.text, "duration": round(self.duration, 3),
            "segments": [
                {"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text, **who(s),
                 "words": [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3),
                            "confidence": w.confidence, **who(w)} for w in s.words]}
                for s in self.segments
            ],
        }  # fmt: skip

    @property
    def labelled(self) -> bool:
        """Whether its segments carry speaker labels."""
        return any(s.speaker is not None for s in self.segments)


def split_at_pauses(result: Result, pause: float) -> List[Segment]:
    """The result's words in segments, a new one where ``pause`` seconds pass between the end
    of a word and the start of the next (words of a result made with the same ``pause`` never
    span one, see ``make_result``)."""
    groups: List[List[Word]] = []
    for w in result.words:
        if not groups or w.start - groups[-1][-1].end >= pause:
            groups.append([])
        groups[-1].append(w)
    return [Segment(g[0].start, g[-1].end, join_words([w.text for w in g]), tuple(g))
            for g in groups]  # fmt: skip


def pauses_transcript(
    source: str, results: Iterable[Result], duration: float, pause: float
) -> Transcript:
    """The transcript of final results in file time, each split at its pauses."""
    segments = [segment for r in results for segment in split_at_pauses(r, pause)]
    return Transcript(source, " ".join(s.text for s in segments), segments, duration)


_SENTENCE_ENDS = (".", "?", "!")
"""the marks after a sentence's last word (a punctuated transcript's)"""


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown from ``start`` to ``end`` seconds, one or two lines."""

    start: float
    end: float
    lines: Tuple[str, ...]
    speaker: Optional[str] = None


def subtitle_cues(
    transcript: Transcript,
    max_chars: int = 42,
    max_lines: int = 2,
    max_seconds: float = 7.0,
    min_seconds: float = 0.5,
) -> List[Cue]:
    """Cues from the transcript's words: a cue never spans two segments or (punctuated text)
    two sentences, holds at most ``max_lines`` lines of ``max_chars`` characters and lasts at
    most ``max_seconds``; it is shown at least ``min_seconds`` where the next cue leaves room,
    and never overlaps it."""
    groups: List[List[Word]] = []
    speakers: List[Optional[str]] = []
    for seg in transcript.segments:
        first = len(groups)
        current: List[Word] = []
        for w in _short_words(seg.words, max_chars):
            trial = current + [w]
            too_long = trial and trial[-1].end - trial[0].start > max_seconds
            if current and (too_long or current[-1].text.endswith(_SENTENCE_ENDS)
                            or len(_wrap(trial, max_chars)) > max_lines):  # fmt: skip
                groups.append(current)
                current = [w]
            else:
                current = trial
        if current:
            groups.append(current)
        speakers += [seg.speaker] * (len(groups) - first)
    cues: List[Cue] = []
    for i, g in enumerate(groups):
        start, end = g[0].start, max(g[-1].end, g[0].start + min_seconds)
        if i + 1 < len(groups):
            end = min(end, groups[i + 1][0].start)
        end = min(end, max(transcript.duration, g[-1].end))
        end = max(end, start + 0.001)  # a cue is never empty
        cues.append(Cue(start, end, tuple(_wrap(g, max_chars)), speakers[i]))
    return cues


def _short_words(words: Iterable[Word], max_chars: int) -> List[Word]:
    """Words longer than a line (e.g. unspaced CJK text) cut into line-long pieces, their
    time shared out by characters."""
    out: List[Word] = []
    for w in words:
        if len(w.text) <= max_chars:
            out.append(w)
            continue
        pieces = [w.text[i : i + max_chars] for i in range(0, len(w.text), max_chars)]
        step = (w.end - w.start) / len(w.text)
        at = w.start
        for p in pieces:
            nxt = at + step * len(p)
            out.append(dataclasses.replace(w, text=p, start=at, end=nxt))
            at = nxt
    return out


def _wrap(words: Sequence[Word], max_chars: int) -> List[str]:
    """Words in lines of at most ``max_chars`` characters, greedily (no space between two
    words of an unspaced script)."""
    lines: List[str] = []
    for i, w in enumerate(words):
        gap = "" if i and unspaced(words[i - 1].text) and unspaced(w.text) else " "
        if lines and len(lines[-1]) + len(gap) + len(w.text) <= max_chars:
            lines[-1] += gap + w.text
        else:
            lines.append(w.text)
    return lines


def _clock(seconds: float, separator: str) -> str:
    ms = int(round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def format_transcript(transcript: Transcript, fmt: str) -> str:
    """The transcript as the text of a ``fmt`` file (one of :data:`FORMATS`)."""
    if fmt == "txt":
        if transcript.labelled:  # a line per speaker turn
            return "".join(f"{s.speaker}: {s.text}\n" for s in _turns(transcript.segments))
        return transcript.text + "\n"
    if fmt == "json":
        return json.dumps(transcript.to_dict(), ensure_ascii=False) + "\n"
    if fmt == "tsv":  # milliseconds, as whisper writes it
        labelled = transcript.labelled
        rows = ["start\tend\tspeaker\ttext" if labelled else "start\tend\ttext"]
        for s in transcript.segments:
            text = s.text.replace("\t", " ")
            who = f"{s.speaker or ''}\t" if labelled else ""
            rows.append(f"{int(round(s.start * 1000))}\t{int(round(s.end * 1000))}\t{who}{text}")
        return "\n".join(rows) + "\n"
    cues = subtitle_cues(transcript)
    if fmt == "srt":
        blocks = [f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n"
                  + "\n".join(_srt_voice(c)) for i, c in enumerate(cues, 1)]  # fmt: skip
        return "\n\n".join(blocks) + ("\n" if blocks else "")
    if fmt == "vtt":
        blocks = [f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}\n" + _vtt_text(c)
                  for c in cues]  # fmt: skip
        return "WEBVTT\n\n" + "\n\n".join(blocks) + ("\n" if blocks else "")
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def _turns(segments: Sequence[Segment]) -> List[Segment]:
    """Consecutive segments of one speaker joined (the txt format's lines)."""
    out: List[Segment] = []
    for s in segments:
        if out and out[-1].speaker == s.speaker:
            last = out[-1]
            text = join_words([last.text, s.text])
            out[-1] = Segment(last.start, s.end, text, last.words + s.words, s.speaker)
        else:
            out.append(s)
    return out


def _srt_voice(cue: Cue) -> List[str]:
    """SRT has no voice tag: the speaker leads the cue's first line (``S1: ...``)."""
    if cue.speaker is None:
        return list(cue.lines)
    return [f"{cue.speaker}: {cue.lines[0]}", *cue.lines[1:]]


def _vtt_text(cue: Cue) -> str:
    """WebVTT's voice span (``<v S1>...``) around a labelled cue's text; the text escaped
    where it holds the format's markup characters."""
    text = "\n".join(line.replace("&", "&amp;").replace("<", "&lt;") for line in cue.lines)
    return f"<v {cue.speaker}>{text}" if cue.speaker is not None else "\n".join(cue.lines)
