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
import json
import secrets
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from wenet_lite.features.g711 import decode_alaw, decode_ulaw
from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.streaming import Stream
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
from wenet_lite.serve.realtime_session import EventError, Settings, read_update, session_object
from wenet_lite.serve.realtime_turns import Buffers, TurnWriter
from wenet_lite.vad.silero import VadOptions

__all__ = ["RealtimeProtocol"]


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
        self.settings = Settings()
        self._beta = False
        self._events = 0
        self.session_id = "sess_" + secrets.token_hex(8)
        # the event loop's side: the open buffer and the buffers so far
        self._buffered = 0  # samples in the open buffer (at the session's rate)
        self._buffers = Buffers([self._new_id()])
        self._last_committed: Optional[str] = None
        # the decode thread's side: the items of the current stream
        self._turns = TurnWriter(self._buffers, self._event, self._new_id)

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
                    raise EventError(f"the event nests {depth} deep; at most {MAX_JSON_DEPTH}",
                                      "invalid_json")  # fmt: skip
            try:
                event = json.loads(text)
            except (ValueError, RecursionError):
                raise EventError(f"the event is not JSON: {text[:60]!r}", "invalid_json") from None
            if not isinstance(event, dict):
                raise EventError("the event is not a JSON object", "invalid_json")
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
            raise EventError(
                f"unknown or unsupported event type {str(kind)[:60]!r} in a transcription "
                "session (session.update, input_audio_buffer.append/commit/clear)",
                "invalid_value", "type",
            )  # fmt: skip
        except EventError as e:
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
            raise EventError("input_audio_buffer.append needs 'audio', base64 text",
                              "invalid_value", "audio")  # fmt: skip
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise EventError("'audio' is not valid base64", "invalid_value", "audio") from None
        kind = self.settings.kind
        if kind == "audio/pcm":
            if len(data) % 2:
                raise EventError(
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
            raise EventError(
                "error committing input audio buffer: the buffer is empty",
                "input_audio_buffer_commit_empty",
            )
        index = len(self._buffers.ids) - 1
        self._buffers.committed.add(index)
        replies: Tuple[str, ...] = ()
        if self.settings.turns is None:  # one item a buffer: committed now, transcribed at its end
            item = self._buffers.ids[index]
            replies = (self._event("input_audio_buffer.committed", item_id=item,
                                   previous_item_id=self._last_committed),)  # fmt: skip
            self._last_committed = item
        return Actions(replies=replies, boundary=self._close_buffer("commit"))

    def _clear(self) -> Actions:
        boundary = self._close_buffer("clear")
        return Actions(replies=(self._event("input_audio_buffer.cleared"),), boundary=boundary)

    def _close_buffer(self, kind: str) -> Boundary:
        seconds = self._buffered / self.settings.rate
        self._buffers.seconds[len(self._buffers.ids) - 1] = seconds
        self._buffered = 0
        self._buffers.ids.append(self._new_id())
        return Boundary(kind, self.settings.rate, seconds, vad=self.stream_vad())

    def stream_vad(self) -> Optional[VadOptions]:
        """The VAD of the next buffer's stream: server_vad's, where the server has a VAD."""
        turns = self.settings.turns
        return turns.vad() if self.vad and turns is not None else None

    def _update(self, event: Dict[str, Any], beta: bool) -> Actions:
        new = read_update(event, beta, self.settings, (self.model_id, self.language))
        format_changed = (new.kind, new.rate) != (self.settings.kind, self.settings.rate)
        if format_changed and self._buffered:
            raise EventError(
                "the audio format cannot change while the input buffer holds audio: commit or "
                "clear it first", "invalid_value", "session.audio.input.format",
            )  # fmt: skip
        hotwords = self._hotwords(new)
        rebuild = hotwords != self._hotwords(self.settings)
        turns_changed = new.turns != self.settings.turns
        self.settings, self._beta = new, beta
        self._buffers.turns = new.turns is not None
        self._buffers.logprobs = new.logprobs
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

    def _hotwords(self, s: Settings) -> Tuple[str, ...]:
        """This session's hotword lines: the keywords and the prompt's phrases, when the
        server searches with a beam (else they are accepted and not used)."""
        if not self.beam:
            return ()
        keywords = [hotword_phrase(k) for k in s.keywords]
        return tuple(dict.fromkeys(p for p in keywords + prompt_phrases(s.prompt) if p))

    def _session(self) -> Dict[str, Any]:
        return session_object(self.settings, self.session_id, self._beta, self.model_id,
                              self.language)  # fmt: skip

    # --- the decode thread's side ---------------------------------------------------------------

    def stream_replaced(self, boundary: Boundary) -> None:
        """The decoder started a new stream at ``boundary``."""
        self._turns.stream_replaced(boundary)

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        return self._turns.events(stream, cursor)

    # --- both sides -----------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> str:
        self._events += 1
        return json.dumps({"type": kind, "event_id": f"event_{self._events}", **fields},
                          ensure_ascii=False)  # fmt: skip

    def _new_id(self) -> str:
        return "item_" + secrets.token_hex(8)
