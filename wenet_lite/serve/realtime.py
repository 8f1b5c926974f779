"""OpenAI's Realtime transcription sessions on `wenet-lite serve`'s port: the websocket at
``/v1/realtime`` (``?intent=transcription``, as the official client's
``client.realtime.connect(extra_query={"intent": "transcription"})`` opens it).

Client events: ``session.update`` (a ``transcription`` session: ``audio.input.format``
``audio/pcm`` at 24 or 16 kHz, ``audio/pcmu`` or ``audio/pcma`` at 8 kHz; ``turn_detection``
``server_vad`` or null; ``transcription`` ``model``, ``language``, ``prompt`` and
``keywords``), the older ``transcription_session.update`` (``input_audio_format`` ``pcm16``,
``g711_ulaw``, ``g711_alaw``), ``input_audio_buffer.append`` (base64 audio), ``.commit`` and
``.clear``. Server events: ``session.created``/``updated``, ``input_audio_buffer.committed``/
``cleared``/``speech_started``/``speech_stopped``,
``conversation.item.input_audio_transcription.delta`` and ``.completed``, ``error``.

How a session maps onto the server's streams: the audio of one input buffer (from the start,
or a commit or clear, to the next commit or clear) is one stream of the decode loop, decoded as
it arrives, resampled in the stream from the session's rate. With turn detection
(``server_vad``, the default) and the server's VAD (`serve --vad`, on where silero-vad is
installed), Silero VAD decides the turns with the session's ``threshold``,
``silence_duration_ms`` and ``prefix_padding_ms`` (OpenAI's defaults 0.5, 500 and 300):
speech started where it hears speech (``audio_start_ms`` padded back by the prefix), speech
stopped once the silence lasted, and the segment ends there (the endpointer's rule "vad"), so
the session's transcripts are `wenet-lite stream --vad-silence S --vad-threshold P`'s final
segments for the same audio. Without the VAD each segment the endpointer closes is an item,
speech started when its first token appears (the parameters are kept and echoed, not used).
Either way an item is speech started, speech stopped, committed, deltas and the completed
transcript (with the VAD a turn is one item: the segments rule 3, ``--max-segment``, ends
inside it are joined). Without turn detection the client commits: the buffer is one item
whose transcript is the stream's whole text. A clear drops the buffer's stream. A format
change needs an empty buffer; hotwords (``keywords``, and the ``prompt``'s phrases) and turn
detection's parameters apply from the next buffer.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import secrets
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import numpy as np

from wenet_lite.features.g711 import decode_alaw, decode_ulaw
from wenet_lite.runtime.result import Result
from wenet_lite.runtime.streaming import Stream, StreamCursor
from wenet_lite.serve.openai_api import hotword_phrase, prompt_phrases
from wenet_lite.serve.protocols import (
    MAX_JSON_DEPTH,
    Actions,
    Boundary,
    Protocol,
    ProtocolError,
    Served,
    Start,
    json_depth,
)
from wenet_lite.vad.silero import RATE as VAD_RATE
from wenet_lite.vad.silero import VadOptions

__all__ = ["RealtimeProtocol"]

_FORMATS = {  # type -> the rates it may have
    "audio/pcm": (24000, 16000),
    "audio/pcmu": (8000,),
    "audio/pcma": (8000,),
}
_BETA_FORMATS = {"pcm16": ("audio/pcm", 24000), "g711_ulaw": ("audio/pcmu", 8000),
                 "g711_alaw": ("audio/pcma", 8000)}  # fmt: skip
_MAX_KEYWORDS = 1000


@dataclass(frozen=True)
class _Turns:
    """``server_vad``'s parameters (OpenAI's defaults)."""

    threshold: float = 0.5
    silence_ms: int = 500
    prefix_ms: int = 300

    def vad(self) -> VadOptions:
        return VadOptions(self.threshold, min_speech_ms=250, min_silence_ms=self.silence_ms,
                          pad_ms=self.prefix_ms)  # fmt: skip

    def echo(self) -> Dict[str, Any]:
        return {"type": "server_vad", "threshold": self.threshold,
                "silence_duration_ms": self.silence_ms,
                "prefix_padding_ms": self.prefix_ms}  # fmt: skip


class _EventError(Exception):
    """A client event the session refuses: an ``error`` event, the session goes on."""

    def __init__(self, message: str, code: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.code, self.param = code, param


@dataclass
class _Settings:
    kind: str = "audio/pcm"
    rate: int = 24000
    turns: Optional[_Turns] = _Turns()
    prompt: str = ""
    keywords: Tuple[str, ...] = ()


class RealtimeProtocol(Protocol):
    """A Realtime transcription session (see the module docstring). The event loop calls
    ``on_text``; the decode thread calls ``events`` and ``stream_replaced``."""

    name = "realtime"
    segmented = True
    ends_by_closing = True

    def __init__(self, model_id: str, language: str, beam: bool, vad: bool = False) -> None:
        self.model_id, self.language, self.beam = model_id, language, beam
        self.vad = vad
        """the server's VAD decides turns (else the endpointer)"""
        self.settings = _Settings()
        self._beta = False
        self._events = 0
        self.session_id = "sess_" + secrets.token_hex(8)
        # the event loop's side: the open buffer and the ids of the buffers so far
        self._buffered = 0  # samples in the open buffer (at the session's rate)
        self._buffer_ids: List[str] = [self._new_id()]
        self._committed: Set[int] = set()
        self._seconds: Dict[int, float] = {}  # a closed buffer's length
        self._last_committed: Optional[str] = None
        # the decode thread's side: where the current stream is in the session
        self._index = 0  # the buffer of the current stream
        self._offset = 0.0  # seconds of session audio before it
        self._item: Optional[str] = None  # the open item (turn detection)
        self._sent = ""  # text sent as deltas for it
        self._completed = False  # this stream's end is rendered
        self._previous: Optional[str] = None
        self._stopped = False  # the VAD said speech stopped for the open item
        self._start_s = 0.0  # where the open item's speech started
        self._parts: List[str] = []  # the open item's texts of segments ended inside it

    @classmethod
    def open(cls, served: Served) -> RealtimeProtocol:
        return cls(served.model_id, served.language, served.beam, served.vad)

    # --- the event loop's side ----------------------------------------------------------------

    def greeting(self) -> Optional[str]:
        return self._event("session.created", session=self._session())

    @property
    def input_rate(self) -> int:  # type: ignore[override]
        return self.settings.rate

    def on_text(self, text: str) -> Union[Start, str, Actions]:
        event_id = None
        try:
            # The nesting can be no deeper than the brackets: an append event has one (its
            # base64 none), so the scan runs only for an event that could nest too deep.
            if text.count("{") + text.count("[") > MAX_JSON_DEPTH:
                depth = json_depth(text)
                if depth > MAX_JSON_DEPTH:
                    raise _EventError(f"the event nests {depth} deep; at most {MAX_JSON_DEPTH}",
                                      "invalid_json")  # fmt: skip
            try:
                event = json.loads(text)
            except (ValueError, RecursionError):
                raise _EventError(f"the event is not JSON: {text[:60]!r}", "invalid_json") from None
            if not isinstance(event, dict):
                raise _EventError("the event is not a JSON object", "invalid_json")
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            kind = event.get("type")
            if kind == "input_audio_buffer.append":
                return self._append(event)
            if kind == "input_audio_buffer.commit":
                return self._commit()
            if kind == "input_audio_buffer.clear":
                return self._clear()
            if kind in ("session.update", "transcription_session.update"):
                return self._update(event, kind == "transcription_session.update")
            raise _EventError(
                f"unknown or unsupported event type {str(kind)[:60]!r} in a transcription "
                "session (session.update, input_audio_buffer.append/commit/clear)",
                "invalid_value", "type",
            )  # fmt: skip
        except _EventError as e:
            return Actions(replies=(self.error(str(e), e.code, e.param, event_id),))

    def on_binary(self, data: bytes) -> np.ndarray:
        raise ProtocolError("the Realtime API sends audio as input_audio_buffer.append events")

    def error(self, message: str, code: str, param: Optional[str] = None,
              event_id: Optional[str] = None,
              kind: str = "invalid_request_error") -> str:  # fmt: skip
        """An ``error`` event in OpenAI's shape."""
        return self._event("error", error={"type": kind, "code": code, "message": message,
                                           "param": param, "event_id": event_id})  # fmt: skip

    def failed(self, reason: str) -> Optional[str]:
        return self.error(reason, "server_error", kind="server_error")

    def _append(self, event: Dict[str, Any]) -> Actions:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise _EventError("input_audio_buffer.append needs 'audio', base64 text",
                              "invalid_value", "audio")  # fmt: skip
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise _EventError("'audio' is not valid base64", "invalid_value", "audio") from None
        kind = self.settings.kind
        if kind == "audio/pcm":
            if len(data) % 2:
                raise _EventError(
                    f"{len(data)} bytes of audio/pcm: 16-bit samples take 2 bytes each",
                    "invalid_value", "audio",
                )  # fmt: skip
            samples = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
        else:
            samples = (decode_ulaw if kind == "audio/pcmu" else decode_alaw)(data)
        self._buffered += samples.size
        return Actions(audio=samples)

    def _commit(self) -> Actions:
        if self._buffered == 0:
            raise _EventError(
                "error committing input audio buffer: the buffer is empty",
                "input_audio_buffer_commit_empty",
            )
        index = len(self._buffer_ids) - 1
        self._committed.add(index)
        replies: Tuple[str, ...] = ()
        if self.settings.turns is None:  # one item a buffer: committed now, transcribed at its end
            item = self._buffer_ids[index]
            replies = (self._event("input_audio_buffer.committed", item_id=item,
                                   previous_item_id=self._last_committed),)  # fmt: skip
            self._last_committed = item
        return Actions(replies=replies, boundary=self._close_buffer("commit"))

    def _clear(self) -> Actions:
        boundary = self._close_buffer("clear")
        return Actions(replies=(self._event("input_audio_buffer.cleared"),), boundary=boundary)

    def _close_buffer(self, kind: str) -> Boundary:
        seconds = self._buffered / self.settings.rate
        self._seconds[len(self._buffer_ids) - 1] = seconds
        self._buffered = 0
        self._buffer_ids.append(self._new_id())
        return Boundary(kind, self.settings.rate, seconds, vad=self.stream_vad())

    def stream_vad(self) -> Optional[VadOptions]:
        """The VAD of the next buffer's stream: server_vad's, where the server has a VAD."""
        turns = self.settings.turns
        return turns.vad() if self.vad and turns is not None else None

    def _update(self, event: Dict[str, Any], beta: bool) -> Actions:
        session = event.get("session")
        if not isinstance(session, dict):
            raise _EventError(f"{event.get('type')} needs a 'session' object", "invalid_value",
                              "session")  # fmt: skip
        new = dataclasses.replace(self.settings)
        if beta:
            self._read_beta(session, new)
        else:
            self._read_session(session, new)
        format_changed = (new.kind, new.rate) != (self.settings.kind, self.settings.rate)
        if format_changed and self._buffered:
            raise _EventError(
                "the audio format cannot change while the input buffer holds audio: commit or "
                "clear it first", "invalid_value", "session.audio.input.format",
            )  # fmt: skip
        hotwords = self._hotwords(new)
        rebuild = hotwords != self._hotwords(self.settings)
        turns_changed = new.turns != self.settings.turns
        self.settings, self._beta = new, beta
        reply = self._event(
            "transcription_session.updated" if beta else "session.updated",
            session=self._session(),
        )  # fmt: skip
        boundary = None
        if format_changed or rebuild or turns_changed:  # the open buffer's too when empty
            boundary = Boundary("settings", new.rate, 0.0, now=self._buffered == 0,
                                vad=self.stream_vad())  # fmt: skip
        return Actions(replies=(reply,), boundary=boundary,
                       hotwords=hotwords if rebuild else None)  # fmt: skip

    def _hotwords(self, s: _Settings) -> Tuple[str, ...]:
        """This session's hotword lines: the keywords and the prompt's phrases, when the
        server searches with a beam (else they are accepted and not used)."""
        if not self.beam:
            return ()
        keywords = [hotword_phrase(k) for k in s.keywords]
        return tuple(dict.fromkeys(p for p in keywords + prompt_phrases(s.prompt) if p))

    def _read_session(self, session: Dict[str, Any], new: _Settings) -> None:
        kind = session.get("type", "transcription")
        if kind != "transcription":
            raise _EventError(
                f"session type {str(kind)[:40]!r}: this server holds transcription sessions "
                "(connect with ?intent=transcription)", "invalid_value", "session.type",
            )  # fmt: skip
        audio = _object(session.get("audio", {}), "session.audio")
        inp = _object(audio.get("input", {}), "session.audio.input")
        if "format" in inp and inp["format"] is not None:
            fmt = _object(inp["format"], "session.audio.input.format")
            kind = fmt.get("type", "audio/pcm")
            if not isinstance(kind, str) or kind not in _FORMATS:
                raise _EventError(
                    f"audio format {str(kind)[:40]!r}: audio/pcm, audio/pcmu or audio/pcma",
                    "invalid_value", "session.audio.input.format.type",
                )  # fmt: skip
            rate = fmt.get("rate", _FORMATS[kind][0])
            if rate not in _FORMATS[kind]:
                raise _EventError(
                    f"{kind} at {rate} Hz: this server takes it at "
                    f"{' or '.join(str(r) for r in _FORMATS[kind])} Hz",
                    "invalid_value", "session.audio.input.format.rate",
                )  # fmt: skip
            new.kind, new.rate = kind, int(rate)
        if "turn_detection" in inp:
            where = "session.audio.input.turn_detection"
            new.turns = _turn_detection(inp["turn_detection"], where, new.turns)
        if "transcription" in inp and inp["transcription"] is not None:
            self._read_transcription(
                _object(inp["transcription"], "session.audio.input.transcription"), new,
                "session.audio.input.transcription",
            )  # fmt: skip

    def _read_beta(self, session: Dict[str, Any], new: _Settings) -> None:
        if "input_audio_format" in session:
            name = session["input_audio_format"]
            if not isinstance(name, str) or name not in _BETA_FORMATS:
                raise _EventError(
                    f"input_audio_format {str(name)[:40]!r}: pcm16, g711_ulaw or g711_alaw",
                    "invalid_value", "session.input_audio_format",
                )  # fmt: skip
            new.kind, new.rate = _BETA_FORMATS[name]
        if "turn_detection" in session:
            new.turns = _turn_detection(session["turn_detection"], "session.turn_detection",
                                        new.turns)  # fmt: skip
        if session.get("input_audio_transcription") is not None:
            path = "session.input_audio_transcription"
            self._read_transcription(_object(session["input_audio_transcription"], path), new,
                                     path)  # fmt: skip

    def _read_transcription(self, t: Dict[str, Any], new: _Settings, path: str) -> None:
        model = t.get("model")
        if model is not None and model != self.model_id:
            raise _EventError(
                f"the model '{str(model)[:60]}' does not exist; this server serves "
                f"'{self.model_id}'", "model_not_found", f"{path}.model",
            )  # fmt: skip
        language = t.get("language")
        if language is not None and str(language).lower() != self.language:
            raise _EventError(
                f"language '{str(language)[:20]}': this model transcribes '{self.language}'",
                "unsupported_language", f"{path}.language",
            )  # fmt: skip
        if "prompt" in t:
            if not isinstance(t["prompt"], (str, type(None))):
                raise _EventError("'prompt' must be text", "invalid_value", f"{path}.prompt")
            new.prompt = t["prompt"] or ""
        if "keywords" in t:
            words = t["keywords"] or []
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise _EventError("'keywords' must be a list of strings", "invalid_value",
                                  f"{path}.keywords")  # fmt: skip
            if len(words) > _MAX_KEYWORDS:
                raise _EventError(f"{len(words)} keywords; at most {_MAX_KEYWORDS}",
                                  "invalid_value", f"{path}.keywords")  # fmt: skip
            new.keywords = tuple(words)

    def _session(self) -> Dict[str, Any]:
        s = self.settings
        transcription = {"model": self.model_id, "language": self.language,
                         "prompt": s.prompt, "keywords": list(s.keywords)}  # fmt: skip
        turn = s.turns.echo() if s.turns is not None else None
        if self._beta:
            beta = {v: k for k, v in _BETA_FORMATS.items()}
            return {"id": self.session_id, "object": "realtime.transcription_session",
                    "input_audio_format": beta.get((s.kind, s.rate), "pcm16"),
                    "input_audio_transcription": transcription, "turn_detection": turn}  # fmt: skip
        fmt: Dict[str, Any] = {"type": s.kind}
        if s.kind == "audio/pcm":
            fmt["rate"] = s.rate
        return {
            "type": "transcription", "id": self.session_id,
            "object": "realtime.transcription_session",
            "audio": {"input": {"format": fmt, "transcription": transcription,
                                "turn_detection": turn, "noise_reduction": None}},
            "include": [],
        }  # fmt: skip

    # --- the decode thread's side ---------------------------------------------------------------

    def stream_replaced(self, boundary: Boundary) -> None:
        """The decoder started a new stream at ``boundary`` (a commit or clear ends a buffer;
        a settings change on an empty buffer keeps it)."""
        if boundary.kind in ("commit", "clear"):
            self._index += 1
            self._offset += boundary.seconds
            self._item, self._sent, self._completed = None, "", False

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        if self._completed:
            return [], stream.done
        out: List[str] = []
        if self.settings.turns is not None and stream.vad is not None:
            return self._vad_events(stream, cursor)
        if self.settings.turns is not None:
            finals = cursor.new_finals()
            for _, r in finals:
                self._open_item(out, r.start, r.timestamps)
                self._close_item(out, r.text, r.end, r.start)
            if not stream.done and stream.hypothesis.num_tokens:
                partial = stream.partial_result(False)
                self._open_item(out, partial.start, partial.timestamps)
                self._delta(out, partial.text)
            if stream.done:
                self._completed = True
                if self._index in self._committed and not finals:
                    self._empty_item(out)
            return out, stream.done
        # no turn detection: the buffer is one item, transcribed when committed
        item = self._buffer_ids[self._index]
        finals = [r.text for r in stream.final_results if r.text]
        cursor.new_finals()
        if stream.done:
            self._completed = True
            if self._index in self._committed:
                text = " ".join(finals)
                self._delta(out, text, item)
                out.append(self._completed_event(item, text, self._seconds.get(self._index, 0.0)))
            return out, True
        if stream.hypothesis.num_tokens:
            finals.append(stream.partial_result(False).text)
        self._delta(out, " ".join(t for t in finals if t), item)
        return out, False

    def _vad_events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        """Turns by the VAD: its starts and stops, and the segments they end, in time order. A
        turn is one item: segments that rule 3 ends inside it are joined into its text."""
        out: List[str] = []
        speech = [(e.decided / VAD_RATE, 0, e) for e in stream.take_speech_events()]
        finals = [(r.end, 1, r) for _, r in cursor.new_finals()]
        happened = sorted(speech + finals, key=lambda x: (x[0], x[1]))
        for k, (_, _, what) in enumerate(happened):
            if isinstance(what, Result):
                if self._item is None:  # words the VAD did not hear as a turn: their own item
                    self._open_item(out, what.start, what.timestamps)
                    self._close_item(out, what.text, what.end)
                else:
                    self._parts.append(what.text)
                    if self._stopped:
                        self._close_item(out, self._turn_text(), what.end)
            elif what.kind == "started":
                if self._item is None:
                    self._item = self._new_id()
                    out.append(self._event("input_audio_buffer.speech_started",
                                           item_id=self._item,
                                           audio_start_ms=self._ms(what.seconds)))  # fmt: skip
                    self._start_s, self._stopped, self._parts = what.seconds, False, []
            elif self._item is not None and not self._stopped:  # stopped
                out.append(self._event("input_audio_buffer.speech_stopped", item_id=self._item,
                                       audio_end_ms=self._ms(what.seconds)))  # fmt: skip
                self._stopped = True
                if not any(isinstance(x[2], Result) for x in happened[k + 1 :]):
                    # the turn's last segment held no words: the text is what came before
                    self._close_item(out, self._turn_text(), what.seconds)
        if not stream.done and self._item is not None:
            partial = stream.partial_result(False).text if stream.hypothesis.num_tokens else ""
            self._delta(out, self._turn_text(partial))
        if stream.done:
            self._completed = True
            if self._item is not None:  # a turn still open at the buffer's end
                self._close_item(out, self._turn_text(), max(stream.segment_start, self._start_s))
            elif self._index in self._committed and not finals:
                self._empty_item(out)
        return out, stream.done

    def _empty_item(self, out: List[str]) -> None:
        """A commit with no turn open: answered by an empty item all the same."""
        item = self._buffer_ids[self._index]
        out.append(self._event("input_audio_buffer.committed", item_id=item,
                               previous_item_id=self._previous))  # fmt: skip
        out.append(self._completed_event(item, "", 0.0))
        self._previous = item

    def _turn_text(self, more: str = "") -> str:
        """The open turn's text: its segments so far, then ``more``."""
        return " ".join(t for t in [*self._parts, more] if t)

    def _close_item(
        self, out: List[str], text: str, end: float, start: Optional[float] = None
    ) -> None:
        """The open item's end: speech stopped (unless the VAD said so), committed, the last
        delta and the completed transcript (its seconds from ``start``, by default where the
        item's speech started)."""
        item = self._item
        if not self._stopped:
            out.append(self._event("input_audio_buffer.speech_stopped", item_id=item,
                                   audio_end_ms=self._ms(end)))  # fmt: skip
        out.append(self._event("input_audio_buffer.committed", item_id=item,
                               previous_item_id=self._previous))  # fmt: skip
        self._delta(out, text)
        start = self._start_s if start is None else start
        out.append(self._completed_event(item, text, max(0.0, end - start)))
        self._previous, self._item, self._sent = item, None, ""
        self._stopped, self._parts = False, []

    def _open_item(self, out: List[str], start: float, timestamps: List[float]) -> None:
        if self._item is None:
            self._item = self._new_id()
            self._stopped = False
            first = timestamps[0] if timestamps else start
            self._start_s = first
            out.append(self._event("input_audio_buffer.speech_started", item_id=self._item,
                                   audio_start_ms=self._ms(first)))  # fmt: skip

    def _delta(self, out: List[str], text: str, item: Optional[str] = None) -> None:
        """The text's new end as a delta, when it extends what was sent (the completed event
        has the final text either way)."""
        if text.startswith(self._sent) and len(text) > len(self._sent):
            out.append(self._event("conversation.item.input_audio_transcription.delta",
                                   item_id=item or self._item, content_index=0,
                                   delta=text[len(self._sent):]))  # fmt: skip
            self._sent = text

    def _completed_event(self, item: Optional[str], text: str, seconds: float) -> str:
        return self._event("conversation.item.input_audio_transcription.completed",
                           item_id=item, content_index=0, transcript=text,
                           usage={"type": "duration", "seconds": round(seconds, 3)})  # fmt: skip

    def _ms(self, seconds: float) -> int:
        return int(round((self._offset + seconds) * 1000))

    def _event(self, kind: str, **fields: Any) -> str:
        self._events += 1
        return json.dumps({"type": kind, "event_id": f"event_{self._events}", **fields},
                          ensure_ascii=False)  # fmt: skip

    def _new_id(self) -> str:
        return "item_" + secrets.token_hex(8)


def _object(value: Any, path: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _EventError(f"'{path}' must be an object", "invalid_value", path)
    return value


def _turn_detection(value: Any, path: str, now: Optional[_Turns]) -> Optional[_Turns]:
    """Turn detection's parameters (None: off): ``server_vad`` (``semantic_vad`` is taken as
    it), each parameter given or kept from ``now``."""
    if value is None:
        return None
    given = _object(value, path)
    kind = given.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise _EventError(f"turn_detection type {str(kind)[:40]!r}: server_vad or null",
                          "invalid_value", f"{path}.type")  # fmt: skip
    turns = now or _Turns()
    threshold = given.get("threshold", turns.threshold)
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not (0 < threshold < 1)
    ):
        raise _EventError(f"threshold {str(threshold)[:20]}: a number between 0 and 1",
                          "invalid_value", f"{path}.threshold")  # fmt: skip
    values = []
    for name, was in (("silence_duration_ms", turns.silence_ms),
                      ("prefix_padding_ms", turns.prefix_ms)):  # fmt: skip
        v = given.get(name, was)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 60000:
            raise _EventError(f"{name} {str(v)[:20]}: whole milliseconds from 0 to 60000",
                              "invalid_value", f"{path}.{name}")  # fmt: skip
        values.append(v)
    return _Turns(float(threshold), values[0], values[1])
