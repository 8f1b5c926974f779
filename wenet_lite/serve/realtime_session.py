"""A Realtime transcription session's configuration: its settings, and the ``session.update``
(and older ``transcription_session.update``) events that change them, read and checked field
by field; every refusal an :class:`EventError` naming the field (the session goes on)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from wenet_lite.vad.silero import VadOptions

__all__ = ["BETA_FORMATS", "EventError", "Settings", "Turns", "read_update", "session_object"]

FORMATS = {  # type -> the rates it may have
    "audio/pcm": (24000, 16000),
    "audio/pcmu": (8000,),
    "audio/pcma": (8000,),
}
BETA_FORMATS = {"pcm16": ("audio/pcm", 24000), "g711_ulaw": ("audio/pcmu", 8000),
                "g711_alaw": ("audio/pcma", 8000)}  # fmt: skip
_MAX_KEYWORDS = 1000
LOGPROBS = "item.input_audio_transcription.logprobs"


@dataclass(frozen=True)
class Turns:
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


class EventError(Exception):
    """A client event the session refuses: an ``error`` event, the session goes on."""

    def __init__(self, message: str, code: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.code, self.param = code, param


@dataclass
class Settings:
    kind: str = "audio/pcm"
    rate: int = 24000
    turns: Optional[Turns] = Turns()
    prompt: str = ""
    keywords: Tuple[str, ...] = ()
    logprobs: bool = False
    """``include`` names ``item.input_audio_transcription.logprobs``: completed transcripts
    carry each token's log confidence"""


def read_update(event: Dict[str, Any], beta: bool, now: Settings,
                served: Tuple[str, str]) -> Settings:  # fmt: skip
    """The settings after an update event (``beta``: the older event's shape), from ``now``;
    ``served``: the model id and language the session may name. EventError naming a field."""
    session = event.get("session")
    if not isinstance(session, dict):
        raise EventError(f"{event.get('type')} needs a 'session' object", "invalid_value",
                         "session")  # fmt: skip
    new = dataclasses.replace(now)
    (_read_beta if beta else _read_session)(session, new, served)
    if "include" in session:
        new.logprobs = _include(session["include"])
    return new


def _include(value: Any) -> bool:
    """Whether ``include`` asks for the transcripts' log probabilities (the one it may name)."""
    if value is None:
        return False
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EventError("'include' must be a list of strings", "invalid_value",
                         "session.include")  # fmt: skip
    other = [v for v in value if v != LOGPROBS]
    if other:
        raise EventError(f"include {other[0][:60]!r}: this server can include {LOGPROBS!r}",
                         "invalid_value", "session.include")  # fmt: skip
    return bool(value)


def _read_session(session: Dict[str, Any], new: Settings, served: Tuple[str, str]) -> None:
    kind = session.get("type", "transcription")
    if kind != "transcription":
        raise EventError(
            f"session type {str(kind)[:40]!r}: this server holds transcription sessions "
            "(connect with ?intent=transcription)", "invalid_value", "session.type",
        )  # fmt: skip
    audio = _object(session.get("audio", {}), "session.audio")
    inp = _object(audio.get("input", {}), "session.audio.input")
    if "format" in inp and inp["format"] is not None:
        fmt = _object(inp["format"], "session.audio.input.format")
        kind = fmt.get("type", "audio/pcm")
        if not isinstance(kind, str) or kind not in FORMATS:
            raise EventError(
                f"audio format {str(kind)[:40]!r}: audio/pcm, audio/pcmu or audio/pcma",
                "invalid_value", "session.audio.input.format.type",
            )  # fmt: skip
        rate = fmt.get("rate", FORMATS[kind][0])
        if rate not in FORMATS[kind]:
            raise EventError(
                f"{kind} at {rate} Hz: this server takes it at "
                f"{' or '.join(str(r) for r in FORMATS[kind])} Hz",
                "invalid_value", "session.audio.input.format.rate",
            )  # fmt: skip
        new.kind, new.rate = kind, int(rate)
    if "turn_detection" in inp:
        where = "session.audio.input.turn_detection"
        new.turns = _turn_detection(inp["turn_detection"], where, new.turns)
    if "transcription" in inp and inp["transcription"] is not None:
        path = "session.audio.input.transcription"
        _read_transcription(_object(inp["transcription"], path), new, path, served)


def _read_beta(session: Dict[str, Any], new: Settings, served: Tuple[str, str]) -> None:
    if "input_audio_format" in session:
        name = session["input_audio_format"]
        if not isinstance(name, str) or name not in BETA_FORMATS:
            raise EventError(
                f"input_audio_format {str(name)[:40]!r}: pcm16, g711_ulaw or g711_alaw",
                "invalid_value", "session.input_audio_format",
            )  # fmt: skip
        new.kind, new.rate = BETA_FORMATS[name]
    if "turn_detection" in session:
        new.turns = _turn_detection(session["turn_detection"], "session.turn_detection",
                                    new.turns)  # fmt: skip
    if session.get("input_audio_transcription") is not None:
        path = "session.input_audio_transcription"
        _read_transcription(_object(session["input_audio_transcription"], path), new, path,
                            served)  # fmt: skip


def _read_transcription(
    t: Dict[str, Any], new: Settings, path: str, served: Tuple[str, str]
) -> None:
    model_id, served_language = served
    model = t.get("model")
    if model is not None and model != model_id:
        raise EventError(
            f"the model '{str(model)[:60]}' does not exist; this server serves "
            f"'{model_id}'", "model_not_found", f"{path}.model",
        )  # fmt: skip
    language = t.get("language")
    if language is not None and str(language).lower() != served_language:
        raise EventError(
            f"language '{str(language)[:20]}': this model transcribes '{served_language}'",
            "unsupported_language", f"{path}.language",
        )  # fmt: skip
    if "prompt" in t:
        if not isinstance(t["prompt"], (str, type(None))):
            raise EventError("'prompt' must be text", "invalid_value", f"{path}.prompt")
        new.prompt = t["prompt"] or ""
    if "keywords" in t:
        words = t["keywords"] or []
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise EventError("'keywords' must be a list of strings", "invalid_value",
                             f"{path}.keywords")  # fmt: skip
        if len(words) > _MAX_KEYWORDS:
            raise EventError(f"{len(words)} keywords; at most {_MAX_KEYWORDS}",
                             "invalid_value", f"{path}.keywords")  # fmt: skip
        new.keywords = tuple(words)


def session_object(s: Settings, session_id: str, beta: bool, model_id: str,
                   language: str) -> Dict[str, Any]:  # fmt: skip
    """The session as ``session.created``/``updated`` (or the older event) show it."""
    transcription = {"model": model_id, "language": language,
                     "prompt": s.prompt, "keywords": list(s.keywords)}  # fmt: skip
    turn = s.turns.echo() if s.turns is not None else None
    if beta:
        names = {v: k for k, v in BETA_FORMATS.items()}
        return {"id": session_id, "object": "realtime.transcription_session",
                "input_audio_format": names.get((s.kind, s.rate), "pcm16"),
                "input_audio_transcription": transcription, "turn_detection": turn,
                "include": [LOGPROBS] if s.logprobs else []}  # fmt: skip
    fmt: Dict[str, Any] = {"type": s.kind}
    if s.kind == "audio/pcm":
        fmt["rate"] = s.rate
    return {
        "type": "transcription", "id": session_id,
        "object": "realtime.transcription_session",
        "audio": {"input": {"format": fmt, "transcription": transcription,
                            "turn_detection": turn, "noise_reduction": None}},
        "include": [LOGPROBS] if s.logprobs else [],
    }  # fmt: skip


def _object(value: Any, path: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise EventError(f"'{path}' must be an object", "invalid_value", path)
    return value


def _turn_detection(value: Any, path: str, now: Optional[Turns]) -> Optional[Turns]:
    """Turn detection's parameters (None: off): ``server_vad`` (``semantic_vad`` is taken as
    it), each parameter given or kept from ``now``."""
    if value is None:
        return None
    given = _object(value, path)
    kind = given.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise EventError(f"turn_detection type {str(kind)[:40]!r}: server_vad or null",
                          "invalid_value", f"{path}.type")  # fmt: skip
    turns = now or Turns()
    threshold = given.get("threshold", turns.threshold)
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not (0 < threshold < 1)
    ):
        raise EventError(f"threshold {str(threshold)[:20]}: a number between 0 and 1",
                          "invalid_value", f"{path}.threshold")  # fmt: skip
    values = []
    for name, was in (("silence_duration_ms", turns.silence_ms),
                      ("prefix_padding_ms", turns.prefix_ms)):  # fmt: skip
        v = given.get(name, was)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 60000:
            raise EventError(f"{name} {str(v)[:20]}: whole milliseconds from 0 to 60000",
                              "invalid_value", f"{path}.{name}")  # fmt: skip
        values.append(v)
    return Turns(float(threshold), values[0], values[1])
