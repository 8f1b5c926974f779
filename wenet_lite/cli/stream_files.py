"""`wenet-lite stream`: audio files and stdin through a :class:`StreamingRecognizer`.

Inputs are read piece by piece (constant memory for any length): audio files of any sample
rate, mono or stereo, in chunk-sized blocks, and ``-``, stdin in 100 ms blocks: an audio file
known by its header (a 16-bit PCM WAV, as arecord writes it, streams as it arrives; FLAC and
OGG are read to their end), or with ``raw_rate`` raw 16-bit little-endian mono PCM, e.g. a
live microphone::

    arecord -f S16_LE -r 16000 -c 1 | wenet-lite stream --model exp/u2/avg.pt -
    arecord -t raw -f S16_LE -r 16000 -c 1 | wenet-lite stream --model M --raw 16000 -

Up to ``max_streams`` inputs are decoded concurrently, batched through one encoder call.

Output, text mode: partial hypotheses on stderr whenever they change (``NAME ... TEXT``, the
last words of the open segment), and each final segment on stdout: ``NAME START-END TEXT`` then
an indented line of ``WORD START-END`` entries. With ``json_lines``: one JSON object per line on
stdout, ``type`` ``partial``, ``final`` (with words, tokens, token times and confidence),
``speech`` (with ``--vad-silence``: where the VAD heard speech start or stop, ``event``
``started`` or ``stopped`` at ``time`` seconds) or ``error``, and a last line of type
``summary`` (the recogniser's settings, input and failure counts, audio and wall seconds;
`wenet-lite score` reads it). A partial line says only what
changed: ``words_kept`` words of the previous partial line of the same segment stay, and
``text`` holds the words after them, so an hour without endpointing never repeats the whole
segment (the first partial of a segment has ``words_kept`` 0). Every input that is decoded
ends with at least one final, empty if nothing was recognised.
"""

from __future__ import annotations

import bisect
import json
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from wenet_lite.cli.flags import settings_record
from wenet_lite.data.tokenizer import WORD_START
from wenet_lite.features.audio import (
    AudioError,
    check_rate,
    decode_audio_bytes,
    read_audio_blocks,
    read_pcm16,
    read_upto,
    require_rate,
)
from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.result import Result
from wenet_lite.runtime.streaming import Stream, StreamingRecognizer
from wenet_lite.search.ctc_search import Hypothesis

__all__ = ["STDIN", "StreamReport", "stream_inputs"]

STDIN = "-"
_STDIN_BLOCK_S = 0.1  # a live source delivers audio in small pieces; latency is chunk + this
_TAIL_WORDS = 12  # a terminal's partial line shows the last words of the open segment
_LOOKBACK = 48  # tokens re-read around a change to find the start of its word


@dataclass
class StreamReport:
    """What :func:`stream_inputs` streamed."""

    texts: Dict[str, str] = field(default_factory=dict)
    """input name -> its final segments' text, joined in order"""
    failures: List[str] = field(default_factory=list)
    """inputs that failed (each reported on stderr)"""
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)

    def record(self) -> Dict[str, Any]:
        return {
            "inputs": len(self.texts) + self.failed, "failed": self.failed,
            "audio_seconds": round(self.audio_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "rtf": round(self.wall_seconds / max(self.audio_seconds, 1e-9), 5),
        }  # fmt: skip


@dataclass
class _Shown:
    """What the last partial line of the open segment said: its hypothesis, its words and the
    token index where each word starts (to say what changed without respelling it all)."""

    hyp: Hypothesis
    words: List[str]
    starts: List[int]


@dataclass
class _Active:
    name: str
    blocks: Iterator[Tuple[np.ndarray, int]]
    stream: Stream
    model_rate: int = 16000
    """the recogniser's sample rate: lower input rates are warned about or refused"""
    upsample: bool = True
    shown: Optional[_Shown] = None
    """the partial result last printed (None: none in the open segment yet)"""
    finished: bool = False
    error: Optional[str] = None
    samples: int = 0
    """at the input's own rate"""
    rate: int = 1
    cursor: StreamCursor = field(init=False)
    """the final segments printed"""

    def __post_init__(self) -> None:
        self.cursor = StreamCursor(self.stream)


def _pcm_blocks(
    stdin: BinaryIO, sample_rate: int, channels: int = 1, limit: Optional[int] = None
) -> Iterator[Tuple[np.ndarray, int]]:
    """16-bit PCM in 100 ms blocks, channels averaged; at most ``limit`` bytes."""
    block = max(1, int(sample_rate * _STDIN_BLOCK_S)) * channels
    left = limit
    while left is None or left > 0:
        want = block if left is None else min(block, left // 2)
        samples = read_pcm16(stdin, want) if want > 0 else np.zeros(0, np.float32)
        if samples.size == 0:
            return
        if left is not None:
            left -= 2 * samples.size
        if channels > 1:
            samples = samples[: samples.size // channels * channels].reshape(-1, channels)
            samples = samples.mean(axis=1, dtype=np.float32)
        yield samples, sample_rate


def _stdin_blocks(stdin: BinaryIO, raw_rate: Optional[int]) -> Iterator[Tuple[np.ndarray, int]]:
    """What stdin holds: raw PCM at ``raw_rate`` when given; else an audio file, known by
    its header. A 16-bit PCM WAV (what `arecord` writes) streams as it arrives; FLAC, OGG and
    other WAV encodings are read to the end, then decoded as `transcribe -` does."""
    if raw_rate is not None:
        yield from _pcm_blocks(stdin, raw_rate)
        return
    head = read_upto(stdin, 12)
    if not head:
        raise AudioError(STDIN, "empty", "empty input (no audio bytes)")
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        seen = bytearray(head)
        fmt = _wav_stream_format(stdin, seen)
        if fmt is not None:
            rate, channels, size = fmt
            yield from _pcm_blocks(stdin, rate, channels, size)
            return
        head = bytes(seen)  # another encoding: decoded whole below
    elif head[:4] not in (b"fLaC", b"OggS"):
        raise AudioError(
            STDIN, "unreadable", "no WAV, FLAC or OGG header: for raw 16-bit little-endian "
            "PCM give its rate, --raw RATE (e.g. --raw 16000)"
        )  # fmt: skip
    samples, rate = decode_audio_bytes(head + stdin.read(), STDIN)
    step = max(1, int(rate * _STDIN_BLOCK_S))
    for i in range(0, samples.size, step):
        yield samples[i : i + step], rate


def _wav_stream_format(
    stdin: BinaryIO, seen: bytearray
) -> Optional[Tuple[int, int, Optional[int]]]:
    """Read a WAV's chunks up to its data: (rate, channels, data bytes or None when the size
    is left open) for 16-bit PCM, None for another encoding (every byte read is appended to
    ``seen``)."""
    fmt = b""
    while True:
        head = read_upto(stdin, 8)
        seen += head
        if len(head) < 8:
            raise AudioError(STDIN, "unreadable", "WAV header ends before its data")
        size = int.from_bytes(head[4:8], "little")
        if head[:4] == b"data":
            break
        if size > 1 << 20:
            raise AudioError(STDIN, "unreadable", f"WAV chunk {head[:4]!r} of {size} bytes")
        body = read_upto(stdin, size + size % 2)
        seen += body
        if head[:4] == b"fmt ":
            fmt = body
    if len(fmt) < 16:
        raise AudioError(STDIN, "unreadable", "WAV without a format chunk before its data")
    tag, channels = int.from_bytes(fmt[0:2], "little"), int.from_bytes(fmt[2:4], "little")
    rate, bits = int.from_bytes(fmt[4:8], "little"), int.from_bytes(fmt[14:16], "little")
    if tag == 0xFFFE and len(fmt) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's tag
        tag = int.from_bytes(fmt[24:26], "little")
    require_rate(STDIN, rate)
    if not 1 <= channels <= 64:
        raise AudioError(STDIN, "unreadable", f"WAV header of {channels} channels")
    if tag != 1 or bits != 16:
        return None
    return rate, channels, None if size in (0, 0xFFFFFFFF) else size  # 0, ~0: open-ended


class _Printer:
    def __init__(self, json_lines: bool, out: IO[str], err: IO[str]) -> None:
        self.json_lines, self.out, self.err = json_lines, out, err

    def partial(self, name: str, start: float, kept: int, new: List[str], words: List[str]) -> None:
        """The open segment's words are its first ``kept`` words shown before, then ``new``."""
        if self.json_lines:
            self._json({"type": "partial", "file": name, "start": start, "words_kept": kept,
                        "text": " ".join(new)})  # fmt: skip
        else:
            tail = " ".join(words[-_TAIL_WORDS:])
            print(f"{name} ... {'... ' if len(words) > _TAIL_WORDS else ''}{tail}",
                  file=self.err, flush=True)  # fmt: skip

    def final(self, name: str, index: int, r: Result) -> None:
        if self.json_lines:
            words = [
                {
                    "word": w.text,
                    "start": w.start,
                    "end": w.end,
                    "confidence": w.confidence,
                    **({"hotword": True} if w.hotword else {}),
                }
                for w in r.words
            ]
            self._json({
                "type": "final", "file": name, "segment": index, "start": r.start,
                "end": r.end, "text": r.text, "confidence": round(r.confidence, 4),
                "words": words, "tokens": r.tokens, "timestamps": r.timestamps,
            })  # fmt: skip
            return
        print(f"{name} {r.start:.2f}-{r.end:.2f} {r.text}".rstrip(), file=self.out, flush=True)
        if r.words:
            words = "  ".join(f"{w.text} {w.start:.2f}-{w.end:.2f}" for w in r.words)
            print(f"    {words}", file=self.out, flush=True)

    def speech(self, name: str, kind: str, seconds: float) -> None:
        if self.json_lines:
            self._json({"type": "speech", "file": name, "event": kind, "time": round(seconds, 3)})

    def error(self, name: str, message: str) -> None:
        print(f"wenet-lite stream: error: {message}", file=self.err, flush=True)
        if self.json_lines:
            self._json({"type": "error", "file": name, "error": message})

    def summary(self, record: Dict[str, Any]) -> None:
        if self.json_lines:
            self._json({"type": "summary", **record})

    def _json(self, obj: dict) -> None:
        print(json.dumps(obj, ensure_ascii=False), file=self.out, flush=True)


def stream_inputs(
    recognizer: StreamingRecognizer,
    inputs: Sequence[str],
    *,
    json_lines: bool = False,
    max_streams: int = 1,
    raw_rate: Optional[int] = None,
    out: Optional[IO[str]] = None,
    err: Optional[IO[str]] = None,
    stdin: Optional[BinaryIO] = None,
    upsample: bool = True,
) -> StreamReport:
    """Stream every input (paths, or ``-`` for stdin: an audio file, or with ``raw_rate``
    raw 16-bit PCM at that rate). Audio below the model's rate is upsampled with a warning,
    or with ``upsample`` False refused as a failed input.

    A failing input is reported (its file named) and the others are still decoded. Ctrl-C
    (KeyboardInterrupt) ends the inputs being decoded: what arrived is decoded and printed
    before the interrupt propagates.
    """
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    if list(inputs).count(STDIN) > 1:
        raise ValueError("'-' (stdin) can be given only once")
    printer = _Printer(json_lines, out or sys.stdout, err or sys.stderr)
    session = _Session(recognizer, printer, raw_rate, stdin, upsample)
    pending = list(inputs)[::-1]
    start = time.perf_counter()
    try:
        while pending or session.active:
            while pending and len(session.active) < max_streams:
                session.open(pending.pop())
            session.step()
    except KeyboardInterrupt:
        session.finish_all()
        raise
    report = session.report
    report.wall_seconds = time.perf_counter() - start
    printer.summary({**settings_record(recognizer), **report.record()})
    return report


class _Session:
    """The inputs being decoded, fed and decoded in lockstep."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        printer: _Printer,
        raw_rate: Optional[int],
        stdin: Optional[BinaryIO],
        upsample: bool,
    ) -> None:
        self.rec, self.printer = recognizer, printer
        self.raw_rate, self.stdin, self.upsample = raw_rate, stdin, upsample
        self.active: List[_Active] = []
        self.report = StreamReport()
        # Files are read a chunk at a time, so partial results appear chunk by chunk.
        self.block_s = (
            recognizer.chunk_size * recognizer.subsampling_rate * recognizer.frame_shift_s
        )

    def open(self, name: str) -> None:
        if name == STDIN:
            blocks = _stdin_blocks(self.stdin or sys.stdin.buffer, self.raw_rate)
        else:
            blocks = read_audio_blocks(name, block_seconds=self.block_s)
        model_rate = self.rec.cfg.features.sample_rate
        self.active.append(_Active(name, blocks, self.rec.create_stream(), model_rate,
                                   self.upsample))  # fmt: skip

    def step(self) -> None:
        """Feed every input one block, decode all ready chunks, print, retire finished ones."""
        for a in self.active:
            _feed(a)
            if a.error is not None and not a.stream.fbank.finished:
                a.stream.input_finished()  # what arrived before the error is decoded first
        self._decode()

    def finish_all(self) -> None:
        for a in self.active:
            a.stream.input_finished()
        self._decode()

    def _decode(self) -> None:
        while self.rec.decode_streams([a.stream for a in self.active]):
            for a in self.active:
                _show(a, self.printer)
        for a in [a for a in self.active if a.stream.done]:
            _show(a, self.printer)
            if a.error is not None:  # its finals so far are out: then the error
                self.printer.error(a.name, a.error)
                self.report.failures.append(a.name)
            else:
                if a.cursor.taken == 0:  # every decoded input gets a final line, empty or not
                    self.printer.final(a.name, 0, a.stream.result())
                self.report.texts[a.name] = a.stream.result().text
            self.report.audio_seconds += a.samples / a.rate
            self.active.remove(a)


def _feed(a: _Active) -> None:
    """Give a stream its next block of audio, or end its input."""
    if a.finished or a.error is not None:
        return
    try:
        block = next(a.blocks, None)
        if block is None:
            a.finished = True
            a.stream.input_finished()
        else:
            if a.samples == 0:  # the first block: its rate is the input's
                check_rate(a.name, block[1], a.model_rate, a.upsample)
            a.stream.accept_waveform(block[1], block[0])
            a.samples, a.rate = a.samples + block[0].size, block[1]
    except (AudioError, ValueError) as e:
        # AudioError names the file; anything else from the stream gets the name added.
        a.error = str(e) if isinstance(e, AudioError) else f"{a.name}: {e}"


def _show(a: _Active, printer: _Printer) -> None:
    """Print a stream's VAD events, new final segments and its partial result if it changed."""
    for e in a.stream.take_speech_events():
        printer.speech(a.name, e.kind, e.seconds)
    if a.cursor.pending:
        for index, r in a.cursor.new_finals():
            printer.final(a.name, index, r)
        a.shown = None
    if a.stream.done:
        return
    hyp = a.stream.hypothesis
    shown = a.shown
    if shown is None and hyp.num_tokens == 0:
        return
    same = hyp.common_prefix(shown.hyp) if shown is not None else 0
    if shown is not None and same == hyp.num_tokens == shown.hyp.num_tokens:
        return  # nothing changed
    # What changed is re-spelled from the start of its word: the cost is the change, not the
    # segment (an hour of audio without endpointing is one segment).
    kept = bisect.bisect_right(shown.starts, same) - 1 if shown is not None else 0
    kept = max(kept, 0)
    first = shown.starts[kept] if shown is not None and shown.starts else 0
    tokens, _ = hyp.tail(hyp.num_tokens - first)
    new, starts = _words_from(tokens, first, a.stream)
    old_words = shown.words[:kept] if shown is not None else []
    old_starts = shown.starts[:kept] if shown is not None else []
    a.shown = _Shown(hyp, old_words + new, old_starts + starts)
    printer.partial(a.name, a.stream.segment_start, kept, new, a.shown.words)


def _words_from(tokens: List[int], first: int, stream: Stream) -> Tuple[List[str], List[int]]:
    """Words of ``tokens`` (which begin a word) and the index of each word's first token,
    counting from ``first``: tokens are grouped at word-start pieces, as results group them."""
    words: List[str] = []
    starts: List[int] = []
    group: List[int] = []
    begin = 0
    for i, token in enumerate(tokens + [-1]):
        if group and (token < 0 or stream.piece(token).startswith(WORD_START)):
            text = stream.spell(group)
            if text:  # a bare word-start piece spells nothing
                words.append(text)
                starts.append(first + begin)
            group, begin = [], i
        if token >= 0:
            group.append(token)
    return words, starts
