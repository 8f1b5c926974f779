"""The two websocket protocols `wenet-lite serve` speaks: one adapter class each (text in,
binary in, events out: :class:`SherpaProtocol`, :class:`WenetProtocol`), over plain functions
that read and write the messages.

**sherpa-onnx** (path ``/``; k2-fsa/sherpa-onnx ``online-websocket-server-impl.cc`` and its
Python clients): the client sends binary messages of float32 little-endian samples in [-1, 1]
at 16 kHz, then the text ``Done``. After each decoded chunk the server sends the open segment as
``OnlineRecognizerResult::AsJsonString`` writes it (``text``, ``tokens``, ``timestamps`` in
seconds from ``start_time``, ``ys_probs``, ``lm_probs``, ``context_scores``, ``segment``,
``words``, ``start_time``, ``is_final``, ``is_eof``; ``ys_probs`` holds each token's log
confidence, the log of its peak posterior); a closed segment comes with ``is_final``
true and the next one has ``segment`` one higher; the last message has ``is_eof`` true, then
the text ``Done!`` and a normal close.

**WeNet** (path ``/wenet``; wenet-e2e/wenet ``runtime/core/websocket/websocket_server.cc``):
``{"signal": "start", "nbest": 1, "continuous_decoding": true}`` is answered by
``{"status": "ok", "type": "server_ready"}``; then binary int16 little-endian PCM at 16 kHz;
``partial_result`` and ``final_result`` messages carry ``nbest``, a JSON *string* of
``[{"sentence": ..., "word_pieces": [{"word", "start", "end"}]}]`` (times in ms, word pieces on
finals only; ours add each word's ``confidence`` in [0, 1]); ``{"signal": "end"}`` gets the
last ``final_result`` and ``speech_end``. Without ``continuous_decoding`` the session ends
at the first endpoint, as WeNet's does. Our extension: the start signal may hold
``"hotwords": ["PHRASE", "NEW YORK :2.0", ...]``, this session's own hotwords, added to the
server's (WeNet's server ignores keys it does not know). Errors are
``{"status": "failed", "message": ...}``. Our search keeps one best path per stream, so
``nbest`` holds one entry whatever the client asks for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

import numpy as np

from wenet_lite.runtime.result import Result, token_logprobs

if TYPE_CHECKING:
    from wenet_lite.runtime.cursor import StreamCursor
    from wenet_lite.runtime.streaming import Stream

__all__ = [
    "Actions", "Boundary", "END", "PROTOCOLS", "Partial", "Protocol", "Served", "SherpaProtocol",
    "Start",
    "WenetProtocol",
    "ProtocolError", "WenetStart", "close_reason", "decode_float32", "decode_int16",
    "empty_result", "json_depth", "parse_wenet_text", "sherpa_result", "wenet_failed",
    "wenet_final", "wenet_partial", "SHERPA_DONE", "SHERPA_END", "WENET_READY", "WENET_SPEECH_END",
]  # fmt: skip

SHERPA_END = "Done"
"""text message of a sherpa-onnx client: no more audio"""
SHERPA_DONE = "Done!"
"""text message of the server after a sherpa-onnx stream's last result"""
MAX_SESSION_HOTWORDS = 1000
"""hotword lines a WeNet client may give in its start signal"""
MAX_HOTWORD_CHARS = 200
"""characters in one of a WeNet client's hotword lines (bounds the graph a session builds)"""
MAX_JSON_DEPTH = 8
"""nesting of a WeNet text message (a start signal nests 2 deep)"""
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_OPENERS = np.frombuffer(b"[{", np.uint8)
_CLOSERS = np.frombuffer(b"]}", np.uint8)
WENET_READY = json.dumps({"status": "ok", "type": "server_ready"})
WENET_SPEECH_END = json.dumps({"status": "ok", "type": "speech_end"})


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``code`` is the websocket close code to answer."""

    def __init__(self, message: str, code: int = 1003) -> None:
        super().__init__(message)
        self.code = code


def decode_float32(data: bytes) -> np.ndarray:
    """Samples of a sherpa-onnx binary message, (N,) float32, checked."""
    if len(data) % 4:
        raise ProtocolError(
            f"a binary message of {len(data)} bytes is not float32 samples (4 bytes each)", 1007
        )
    return _finite(np.frombuffer(data, dtype="<f4").astype(np.float32))


def decode_int16(data: bytes) -> np.ndarray:
    """Samples of a WeNet binary message (int16 PCM) as (N,) float32 in [-1, 1)."""
    if len(data) % 2:
        raise ProtocolError(
            f"a binary message of {len(data)} bytes is not 16-bit PCM (2 bytes a sample)", 1007
        )
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def _finite(x: np.ndarray) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ProtocolError(
            f"sample {int(bad[0])} of a binary message is {x[bad[0]]}: samples must be finite",
            1007,
        )
    return x


def sherpa_result(result: Result, segment: int, is_final: bool, is_eof: bool) -> str:
    """One segment as sherpa-onnx's ``OnlineRecognizerResult::AsJsonString`` writes it."""
    return json.dumps(
        {
            "text": result.text,
            "tokens": result.tokens,
            "timestamps": [round(t - result.start, 2) for t in result.timestamps],
            "ys_probs": token_logprobs(result),
            "lm_probs": [],
            "context_scores": [],
            "segment": segment,
            "words": [],
            "start_time": round(result.start, 2),
            "is_final": is_final,
            "is_eof": is_eof,
        },
        ensure_ascii=False,
    )


@dataclass(frozen=True)
class WenetStart:
    """A WeNet client's start signal."""

    nbest: int = 1
    continuous_decoding: bool = False
    hotwords: Tuple[str, ...] = ()
    """our extension: this session's hotword lines (``PHRASE`` or ``PHRASE :SCORE``)"""


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not
    count), found without parsing: a vectorised scan, so a megabyte costs milliseconds."""
    bare = _JSON_STRING.sub('""', text).encode("utf-8", errors="replace")
    b = np.frombuffer(bare, np.uint8)
    steps = np.isin(b, _OPENERS).astype(np.int32) - np.isin(b, _CLOSERS).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0))


def parse_wenet_text(text: str) -> Union[WenetStart, str]:
    """A WeNet text message: a :class:`WenetStart`, or ``"end"``. Anything else raises
    :class:`ProtocolError` with WeNet's reason."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ProtocolError(
            f"Wrong protocol: JSON nested {depth} deep; at most {MAX_JSON_DEPTH} levels"
        )
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        raise ProtocolError(f"Wrong protocol: not JSON: {text[:60]!r}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"Wrong protocol: not a JSON object: {text[:60]!r}")
    if "signal" not in message:
        raise ProtocolError(f"Wrong message header: no 'signal' in {text[:60]!r}")
    signal = message["signal"]
    if signal == "end":
        return "end"
    if signal != "start":
        raise ProtocolError(f"Unexpected signal type {signal!r} (start or end)")
    nbest = message.get("nbest", 1)
    if not isinstance(nbest, int) or isinstance(nbest, bool) or nbest < 1:
        raise ProtocolError(f"integer >= 1 is expected for nbest option, got {nbest!r}")
    continuous = message.get("continuous_decoding", False)
    if not isinstance(continuous, bool):
        raise ProtocolError(
            f"boolean true or false is expected for continuous_decoding option, got {continuous!r}"
        )
    hotwords = message.get("hotwords", [])
    if not isinstance(hotwords, list) or not all(isinstance(h, str) for h in hotwords):
        raise ProtocolError(f"hotwords must be a list of strings, got {str(hotwords)[:60]}")
    if len(hotwords) > MAX_SESSION_HOTWORDS:
        raise ProtocolError(
            f"{len(hotwords)} hotwords in the start signal; at most {MAX_SESSION_HOTWORDS}"
        )
    long = next((i for i, h in enumerate(hotwords) if len(h) > MAX_HOTWORD_CHARS), None)
    if long is not None:
        raise ProtocolError(
            f"hotword {long} is {len(hotwords[long])} characters long; at most "
            f"{MAX_HOTWORD_CHARS} a line"
        )
    return WenetStart(nbest, continuous, tuple(hotwords))


def _nbest(result: Result, with_words: bool) -> str:
    path: dict = {"sentence": result.text}
    if with_words:
        path["word_pieces"] = [
            {
                "word": w.text,
                "start": round(w.start * 1000),
                "end": round(w.end * 1000),
                "confidence": w.confidence,
            }
            for w in result.words
        ]
    return json.dumps([path], ensure_ascii=False)


def wenet_partial(result: Result) -> str:
    return json.dumps({"status": "ok", "type": "partial_result", "nbest": _nbest(result, False)})


def wenet_final(result: Result) -> str:
    return json.dumps({"status": "ok", "type": "final_result", "nbest": _nbest(result, True)})


def wenet_failed(message: str) -> str:
    return json.dumps({"status": "failed", "message": message})


def close_reason(message: str, limit: int = 120) -> str:
    """A websocket close reason (at most 123 bytes of UTF-8) from an error message."""
    encoded = message.encode("utf-8")[:limit]
    return encoded.decode("utf-8", errors="ignore")


def empty_result(start: float, end: Optional[float] = None) -> Result:
    """A segment with nothing recognised, starting at ``start`` seconds."""
    return Result("", [], [], [], [], 1.0, start, start if end is None else end, True)


@dataclass(frozen=True)
class Start:
    """A client asked to start a session: build its stream (with ``hotwords``, if any, added
    to the server's), then send ``reply``."""

    hotwords: Tuple[str, ...]
    reply: str


END = "end"
"""What :meth:`Protocol.on_text` returns when the client's input has ended."""


@dataclass(frozen=True)
class Boundary:
    """A mark in a connection's queued audio where its stream changes (a protocol whose
    session holds many streams: :attr:`Protocol.segmented`). ``commit``: the stream so far
    ends (decoded to its end, its results sent) and a new one takes the audio after the mark;
    ``clear``: the stream is dropped for a new one; ``settings``: new streams take ``rate``
    and the hotword graph that ``graph`` (a ``concurrent.futures.Future``, None: no change)
    gives once built, the current stream too when ``now`` (it has no audio).
    ``seconds``: the audio of the stream that a commit or clear ends. ``vad``: the VAD
    settings (``VadOptions``) of the streams it starts (None: the recogniser's)."""

    kind: str
    rate: int
    seconds: float = 0.0
    now: bool = False
    graph: Any = None
    vad: Any = None


@dataclass(frozen=True)
class Actions:
    """What a text message of a segmented protocol asks for: ``replies`` to send at once,
    ``audio`` to queue, then a ``boundary`` to queue; ``hotwords``: the lines of the hotword
    graph the ``settings`` boundary brings (built off the event loop)."""

    replies: Tuple[str, ...] = ()
    audio: Optional[np.ndarray] = None
    boundary: Optional[Boundary] = None
    hotwords: Optional[Tuple[str, ...]] = None


class Partial(str):
    """A partial result's message: the stream's next result supersedes it, so the server may
    drop it while it still waits to be sent (a client reading late gets the latest partial and
    every final)."""


@dataclass(frozen=True)
class Served:
    """What a protocol may need to know of the server: the served model's id and language,
    whether its search takes hotwords (a beam: CTC's prefix beam or the transducer's), and
    whether its VAD decides Realtime turns (`serve --vad`)."""

    model_id: str
    language: str
    beam: bool
    vad: bool = False


class Protocol:
    """One connection's protocol: text in, binary in, events out. The server keeps the
    transport, admission, scheduling and workers; an adapter holds what the protocol says."""

    name = ""
    segmented = False
    """a session of many streams, changed at :class:`Boundary` marks in the queued audio; its
    input ends only with the connection (or idleness)"""
    ends_by_closing = False
    """the client ends its session by closing the connection (not counted as vanished)"""
    input_rate: Optional[int] = None
    """the rate of the audio it takes in, when not the model's"""

    @classmethod
    def open(cls, served: Served) -> Protocol:
        """The adapter of a new connection."""
        return cls()

    @property
    def started(self) -> bool:
        """Whether audio may come (a protocol with a start signal: once it came)."""
        return True

    def stream_vad(self) -> Any:
        """The VAD settings (``VadOptions``) of its streams; None: the recogniser's."""
        return None

    def greeting(self) -> Optional[str]:
        """The first message of a session, sent when the connection opens (if any)."""
        return None

    def on_text(self, text: str) -> Union[Start, str, Actions]:
        """A text message: :data:`END`, a :class:`Start` or (a segmented protocol)
        :class:`Actions`; anything else: ProtocolError."""
        raise NotImplementedError

    def stream_replaced(self, boundary: Boundary) -> None:
        """(decode thread) A segmented protocol's stream was replaced at ``boundary``."""

    def on_binary(self, data: bytes) -> np.ndarray:
        """A binary message: its (N,) float32 samples (ProtocolError if it breaks the rules)."""
        raise NotImplementedError

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        """The messages for what is new in ``stream`` since the last call (``cursor`` hands
        out each final segment once; a partial result last, as a :class:`Partial`), and
        whether the session is over."""
        raise NotImplementedError

    def failed(self, reason: str) -> Optional[str]:
        """A message telling the client why the server closes on it, if the protocol has one."""
        return None


class SherpaProtocol(Protocol):
    """sherpa-onnx's protocol (see the module docstring)."""

    name = "sherpa"

    def on_text(self, text: str) -> Union[Start, str]:
        if text != SHERPA_END:
            raise ProtocolError(
                f"unexpected text message {text[:40]!r}: send float32 samples as binary "
                f"messages and {SHERPA_END!r} at the end"
            )
        return END

    def on_binary(self, data: bytes) -> np.ndarray:
        return decode_float32(data)

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        eof = stream.done
        finals = cursor.new_finals()
        messages = [
            sherpa_result(r, index, True, eof and k == len(finals) - 1)
            for k, (index, r) in enumerate(finals)
        ]
        if eof and not finals:  # every stream ends with a final, an empty one if need be
            messages.append(sherpa_result(empty_result(stream.segment_start), cursor.taken,
                                          True, True))  # fmt: skip
        elif not eof:
            messages.append(Partial(sherpa_result(stream.partial_result(False), cursor.taken,
                                                  False, False)))  # fmt: skip
        if eof:
            messages.append(SHERPA_DONE)
        return messages, eof


class WenetProtocol(Protocol):
    """WeNet's protocol (see the module docstring)."""

    name = "wenet"

    def __init__(self) -> None:
        self.start: Optional[WenetStart] = None

    @property
    def started(self) -> bool:
        return self.start is not None

    def on_text(self, text: str) -> Union[Start, str]:
        signal = parse_wenet_text(text)
        if not isinstance(signal, WenetStart):
            if self.start is None:
                raise ProtocolError("end signal before the start signal", 1008)
            return END
        if self.start is not None:
            raise ProtocolError("a second start signal in one session")
        self.start = signal
        return Start(signal.hotwords, WENET_READY)

    def on_binary(self, data: bytes) -> np.ndarray:
        if self.start is None:
            raise ProtocolError("Start signal is expected before binary data", 1008)
        return decode_int16(data)

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        assert self.start is not None, "only started streams are decoded"
        continuous = self.start.continuous_decoding
        # WeNet ends a session at its first endpoint unless decoding continuously.
        finals = cursor.new_finals(None if continuous else 1)
        messages = [wenet_final(r) for _, r in finals]
        eof = stream.done or bool(finals and not continuous)
        if stream.done and not finals:
            messages.append(wenet_final(empty_result(stream.segment_start)))
        elif not eof and stream.hypothesis.num_tokens:
            messages.append(Partial(wenet_partial(stream.partial_result(False))))
        if eof:
            messages.append(WENET_SPEECH_END)
        return messages, eof

    def failed(self, reason: str) -> Optional[str]:
        return wenet_failed(reason)


PROTOCOLS = {SherpaProtocol.name: SherpaProtocol, WenetProtocol.name: WenetProtocol}
"""The adapters by the name ``gate.WEBSOCKET_PATHS`` gives each websocket path."""
