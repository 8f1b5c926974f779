"""Audio in, text out, in one call: :func:`transcribe` (``wenet_lite.transcribe``) and
`wenet-lite transcribe`.

Example::

    from wenet_lite import transcribe

    t = transcribe("exp/u2/avg_5.pt", "meeting.wav")
    print(t.text)
    for seg in t.segments:
        print(seg.start, seg.end, seg.text, [(w.text, w.start) for w in seg.words])

A model file decodes in full context by default (what `decode` computes: a file longer than
``max_window_seconds`` in overlapping windows of bounded memory) and is cut into segments at
pauses between words; with ``chunk_size`` > 0 it streams at the model's own latency and the
segments are the endpoints'. An export directory or an opened
:class:`~wenet_lite.runtime.streaming.StreamingRecognizer` always streams.

Subtitles (:func:`subtitle_cues`, written as SRT or WebVTT) follow the usual rules for players
and readers: numbered cues, at most two lines of 42 characters, at most 7 s on screen, at least
0.5 s where the next cue leaves room, never overlapping.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union, overload

import numpy as np
import torch

from wenet_lite.features.audio import (
    AudioError,
    check_rate,
    decode_audio_bytes,
    read_audio_blocks,
    resample,
)
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.result import Result, Word, join_words, make_result, unspaced
from wenet_lite.search.options import SearchOptions

__all__ = ["FORMATS", "Cue", "Segment", "Transcriber", "Transcript", "format_transcript",
           "split_at_pauses", "subtitle_cues", "transcribe"]  # fmt: skip

_log = logging.getLogger(__name__)
PathLike = Union[str, Path]
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
        return {
            "file": self.source, "text": self.text, "duration": round(self.duration, 3),
            "segments": [
                {"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                 "words": [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3)}
                           for w in s.words]}
                for s in self.segments
            ],
        }  # fmt: skip


class Transcriber:
    """A model opened once for many inputs (what :func:`transcribe` and the CLI use).

    Example::

        from wenet_lite import Transcriber

        tr = Transcriber("exp/u2/avg_5.pt", beam=10)  # load once
        for path in ["a.wav", "b.flac"]:
            print(tr.file(path).text)

    Args:
        model: a model file, an export directory, a ``(model, tokenizer, config)`` triple in
            memory, or an opened ``StreamingRecognizer``.
        chunk_size: 0 (default) full context; C > 0 streams in chunks of C encoder frames.
        left_chunks: chunks of history while streaming (4: constant memory; -1 all).
        search: the search (greedy by default; prefix beam, LM, hotwords, rescoring). Its
            fields may be given as keywords instead, by their CLI names: ``mode``, ``beam``,
            ``lm``, ``lm_weight``, ``hotwords``, ... (``beam`` alone selects the prefix beam).
        endpoint: endpointing while streaming (segments); default ``EndpointConfig()``.
        device: where a model file runs (default cpu).
        pause: seconds between words that start a new segment in full context.
        engine: streaming: an ``EngineSpec`` (``recognizer.py``; default the source's).
        progress: a bar on stderr over a long file's windows (full context).
        threads: torch's intra-op threads (1, as the CLI: more threads on a busy machine run
            many times slower). Set for the whole process, as ``torch.set_num_threads``.
        upsample: audio below the model's rate is upsampled with a warning (True) or
            refused with an ``AudioError`` (False).
    """

    def __init__(
        self,
        model: Any,
        chunk_size: int = 0,
        left_chunks: int = 4,
        search: Optional[SearchOptions] = None,
        endpoint: Optional[EndpointConfig] = None,
        device: Optional[str] = None,
        pause: float = 0.8,
        max_window_seconds: float = 30.0,
        engine: Optional[Any] = None,
        progress: bool = True,
        threads: int = 1,
        upsample: bool = True,
        **search_options: Any,
    ) -> None:
        from wenet_lite.model.chunking import Chunking
        from wenet_lite.runtime.streaming import StreamingRecognizer

        _check_options(model, chunk_size, pause, threads)
        self.pause = pause
        self.upsample = upsample
        self.search = _search_from(search, search_options)
        self.recognizer: Optional[StreamingRecognizer] = None
        self._full: Optional[Tuple[Any, Any, Any]] = None
        if isinstance(model, StreamingRecognizer):
            self.recognizer = model
        elif chunk_size > 0 or (isinstance(model, (str, Path)) and Path(model).is_dir()):
            from wenet_lite.recognizer import EngineSpec, open_recognizer

            chunking = Chunking(chunk_size, left_chunks) if chunk_size > 0 else None
            spec = engine or EngineSpec(threads=threads, device=device or "cpu")
            self.recognizer = open_recognizer(model, chunking, self.search, endpoint, spec)
        else:
            _check_full_context_engine(engine)
            torch.set_num_threads(threads)
            if isinstance(model, (str, Path)):
                from wenet_lite.model_io import load_model

                model = load_model(model, torch.device(device or "cpu"))
            net, tokenizer, cfg = model
            self._full = (net.eval(), tokenizer, cfg)
        if self._full is not None:
            from wenet_lite.runtime.utterance import DecodeOptions

            net, tokenizer, cfg = self._full
            search = self.search.resolved(cfg.decode)
            if search.rescoring:
                from wenet_lite.search.rescore import check_decoder

                check_decoder(net, "the model")
            self._options = DecodeOptions(
                search, max_window_seconds=max_window_seconds, window_progress=progress
            )
            self._models = search.load(tokenizer)
            self.sample_rate = cfg.features.sample_rate
        else:
            assert self.recognizer is not None
            self.sample_rate = self.recognizer.cfg.features.sample_rate

    def file(self, path: PathLike) -> Transcript:
        """Transcribe one audio file (AudioError names a bad one); ``-`` reads stdin.

        Streaming reads the file in blocks (constant memory for any length); full context
        reads it whole (long files are then decoded in windows)."""
        if str(path) == "-":
            import sys

            return self.audio_bytes(sys.stdin.buffer.read(), "-")
        blocks = read_audio_blocks(path, None if self._full is not None else _BLOCK_SECONDS)
        return self._blocks(blocks, str(path))

    def audio_bytes(self, data: bytes, name: str = "-") -> Transcript:
        """Transcribe the bytes of an audio file (any format libsndfile reads)."""
        samples, rate = decode_audio_bytes(data, name)
        return self._blocks(iter([(samples, rate)]), name)

    def array(self, samples: np.ndarray, sample_rate: int, name: str = "<array>") -> Transcript:
        """Transcribe samples (float, mono, in [-1, 1]) at ``sample_rate`` Hz."""
        x = np.asarray(samples)
        if x.dtype.kind != "f":
            raise ValueError(
                f"{name}: expected float samples in [-1, 1], got {x.dtype}"
                + (": divide 16-bit PCM by 32768" if x.dtype.kind in "iu" else "")
            )
        if x.ndim != 1:
            raise ValueError(f"{name}: expected mono samples (N,), got shape {x.shape}")
        if (isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer))
                or sample_rate <= 0):  # fmt: skip
            raise ValueError(
                f"{name}: sample_rate must be a positive int (Hz), got {sample_rate!r}"
            )
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise AudioError(name, "non_finite", "samples hold NaN or infinity")
        step = max(1, x.size if self._full is not None else int(_BLOCK_SECONDS * sample_rate))
        pieces = ((x[i : i + step], int(sample_rate)) for i in range(0, max(x.size, 1), step))
        return self._blocks(pieces, name)

    def _blocks(self, blocks: Iterator[Tuple[np.ndarray, int]], name: str) -> Transcript:
        """The transcript of (samples, rate) blocks, all of one rate (checked on the first)."""
        first = next(blocks)
        rate = first[1]
        check_rate(name, rate, self.sample_rate, self.upsample)
        if self._full is not None:  # one block (the file, the bytes, the array): no copy
            rest = [b for b, _ in blocks]
            samples = np.concatenate([first[0], *rest]) if rest else first[0]
            return self._full_context(samples, rate, name, samples.size / rate)
        return self._streamed(itertools.chain([first], blocks), name)

    def _streamed(self, blocks: Iterator[Tuple[np.ndarray, int]], name: str) -> Transcript:
        """Fed and decoded block by block: memory of one block and the stream's caches."""
        rec = self.recognizer
        assert rec is not None
        stream = rec.create_stream()
        samples, rate = 0, 1
        for block, rate in blocks:
            stream.accept_waveform(rate, block)
            samples += block.size
            while rec.decode_streams([stream]):
                pass
        stream.input_finished()
        rec.decode_until_done([stream])
        segments = [_segment(r.words, r.text, r.start, r.end) for r in stream.final_results]
        segments = [s for s in segments if s.text]
        return Transcript(name, " ".join(s.text for s in segments), segments, samples / rate)

    def _full_context(
        self, samples: np.ndarray, rate: int, name: str, duration: float
    ) -> Transcript:
        from wenet_lite.features.fbank import compute_fbank
        from wenet_lite.runtime.utterance import recognize_features

        assert self._full is not None
        net, tokenizer, cfg = self._full
        if rate != cfg.features.sample_rate:
            samples = resample(samples, rate, cfg.features.sample_rate)
            rate = cfg.features.sample_rate
            if samples.size == 0:
                raise AudioError(name, "empty", f"audio shorter than one sample at {rate} Hz")
        feats = compute_fbank(samples, rate, cfg.features).to(net.encoder.cmvn.mean.device)
        hyps = recognize_features(net, feats, self._options, self._models, cfg, name)
        if not hyps or not hyps[0].tokens:
            return Transcript(name, "", [], duration)
        rate_sub = net.encoder.subsampling.rate
        shift = cfg.features.frame_shift_ms / 1000
        whole = make_result(hyps[0], tokenizer, 0, 0, rate_sub, shift, True,
                            self._models.context, pause=self.pause)  # fmt: skip
        segments = split_at_pauses(whole, self.pause)
        return Transcript(name, " ".join(s.text for s in segments), segments, duration)


_BLOCK_SECONDS = 10.0
"""streaming: seconds of audio read and decoded at a time"""


def _check_options(model: Any, chunk_size: Any, pause: Any, threads: Any) -> None:
    """ValueError naming the argument, before anything is loaded."""
    if (
        model is None
        or not isinstance(model, (str, Path, tuple, list))
        and not hasattr(model, "create_stream")
    ):
        raise ValueError(
            "model must be a model file, an export directory, (model, tokenizer, config) or "
            f"a StreamingRecognizer, got {model!r}"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise ValueError(
            f"chunk_size must be 0 (full context) or a positive int, got {chunk_size!r}"
        )
    if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause < 1e6:
        raise ValueError(f"pause must be seconds >= 0, got {pause!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")


def _check_full_context_engine(engine: Any) -> None:
    """Full context runs the eager torch model in fp32: an engine or precision that runs only
    the streaming path is refused, not silently dropped."""
    from wenet_lite.recognizer import RuleError

    if engine is None:
        return
    if engine.kind not in (None, "torch"):
        raise RuleError(
            f'engine kind="{engine.kind}" runs the streaming path: give chunk_size (e.g. 16)'
        )
    if engine.precision in ("bf16", "int8"):
        raise RuleError(
            f'precision="{engine.precision}" runs the streaming path: give chunk_size (e.g. 16)'
        )


def _search_names() -> dict:
    """Keyword -> SearchOptions field: the CLI's flag names (``--beam`` -> ``beam``) and the
    field names themselves."""
    names = {}
    for f in dataclasses.fields(SearchOptions):
        names[f.name] = f.name
        if "flag" in f.metadata:
            names[f.metadata["flag"].lstrip("-").replace("-", "_")] = f.name
    return names


def _search_from(search: Optional[SearchOptions], given: dict) -> SearchOptions:
    if not given:
        return search or SearchOptions()
    if search is not None:
        raise TypeError("give search=SearchOptions(...) or search keywords, not both")
    names = _search_names()
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(
            f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
        )
    values = {names[k]: v for k, v in given.items()}
    if values.get("beam_size") is not None and "mode" not in values:
        values["mode"] = "prefix_beam"  # beam=5 asks for a beam, as whisper's beam_size does
    return SearchOptions(**values)


def _segment(words: Sequence[Word], text: str, start: float, end: float) -> Segment:
    return Segment(start, end, text, tuple(words))


def split_at_pauses(result: Result, pause: float) -> List[Segment]:
    """The result's words in segments, a new one where ``pause`` seconds pass between the end
    of a word and the start of the next (words of a result made with the same ``pause`` never
    span one, see ``make_result``)."""
    groups: List[List[Word]] = []
    for w in result.words:
        if not groups or w.start - groups[-1][-1].end >= pause:
            groups.append([])
        groups[-1].append(w)
    return [_segment(g, join_words([w.text for w in g]), g[0].start, g[-1].end) for g in groups]


@overload
def transcribe(model: Any, audio: PathLike, sample_rate: Optional[int] = None,
               **options: Any) -> Transcript: ...  # fmt: skip
@overload
def transcribe(model: Any, audio: np.ndarray, sample_rate: Optional[int] = None,
               **options: Any) -> Transcript: ...  # fmt: skip
@overload
def transcribe(model: Any, audio: Sequence[PathLike], sample_rate: Optional[int] = None,
               **options: Any) -> List[Transcript]: ...  # fmt: skip
def transcribe(model: Any, audio: Any, sample_rate: Optional[int] = None, **options: Any) -> Any:
    """Transcribe a file, several files, or samples.

    Args:
        model: a model file, an export directory, ``(model, tokenizer, config)`` or an opened
            ``StreamingRecognizer`` (see :class:`Transcriber`).
        audio: a path, a list of paths, or a float array of mono samples (then
            ``sample_rate`` is required).
        options: :class:`Transcriber`'s (``chunk_size``, ``left_chunks``, ``search`` or its
            fields by their CLI names such as ``beam=10``, ``endpoint``, ``device``, ``pause``,
            ``max_window_seconds``, ``threads``, ``upsample``).
    Returns:
        a :class:`Transcript`, or a list of them for a list of paths. A bad file raises
        ``AudioError`` naming it (the CLI skips it and goes on).
    """
    t = Transcriber(model, **options)
    if isinstance(audio, np.ndarray) or torch.is_tensor(audio):
        if sample_rate is None:
            raise ValueError("transcribe: samples need their sample_rate")
        return t.array(np.asarray(audio), sample_rate)
    if isinstance(audio, (str, Path)):
        return t.file(audio)
    return [t.file(a) for a in audio]


# ---- subtitles and the other file formats ----


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown from ``start`` to ``end`` seconds, one or two lines."""

    start: float
    end: float
    lines: Tuple[str, ...]


def subtitle_cues(
    transcript: Transcript,
    max_chars: int = 42,
    max_lines: int = 2,
    max_seconds: float = 7.0,
    min_seconds: float = 0.5,
) -> List[Cue]:
    """Cues from the transcript's words: a cue never spans two segments, holds at most
    ``max_lines`` lines of ``max_chars`` characters and lasts at most ``max_seconds``; it is
    shown at least ``min_seconds`` where the next cue leaves room, and never overlaps it."""
    groups: List[List[Word]] = []
    for seg in transcript.segments:
        current: List[Word] = []
        for w in _short_words(seg.words, max_chars):
            trial = current + [w]
            too_long = trial and trial[-1].end - trial[0].start > max_seconds
            if current and (too_long or len(_wrap(trial, max_chars)) > max_lines):
                groups.append(current)
                current = [w]
            else:
                current = trial
        if current:
            groups.append(current)
    cues: List[Cue] = []
    for i, g in enumerate(groups):
        start, end = g[0].start, max(g[-1].end, g[0].start + min_seconds)
        if i + 1 < len(groups):
            end = min(end, groups[i + 1][0].start)
        end = min(end, max(transcript.duration, g[-1].end))
        end = max(end, start + 0.001)  # a cue is never empty
        cues.append(Cue(start, end, tuple(_wrap(g, max_chars))))
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
        return transcript.text + "\n"
    if fmt == "json":
        return json.dumps(transcript.to_dict(), ensure_ascii=False) + "\n"
    if fmt == "tsv":  # milliseconds, as whisper writes it
        rows = ["start\tend\ttext"]
        for s in transcript.segments:
            text = s.text.replace("\t", " ")
            rows.append(f"{int(round(s.start * 1000))}\t{int(round(s.end * 1000))}\t{text}")
        return "\n".join(rows) + "\n"
    cues = subtitle_cues(transcript)
    if fmt == "srt":
        blocks = [f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n" + "\n".join(c.lines)
                  for i, c in enumerate(cues, 1)]  # fmt: skip
        return "\n\n".join(blocks) + ("\n" if blocks else "")
    if fmt == "vtt":
        blocks = [f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}\n" + "\n".join(c.lines)
                  for c in cues]  # fmt: skip
        return "WEBVTT\n\n" + "\n\n".join(blocks) + ("\n" if blocks else "")
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
