"""OpenAI's audio API on `wenet-lite serve`'s port: ``POST /v1/audio/transcriptions`` and
``GET /v1/models``, so that the official ``openai`` clients (and the applications built on
them) need only a ``base_url``.

A request's audio is decoded as one more stream of the server's decode loop, batched with the
live streams and fed a bounded share a step (so 16 requests are one batch, and a long upload
cannot stall the live ones); its final segments are what `wenet-lite transcribe` with the
server's chunk size and search gives (streaming is exact whatever shares a batch).

Fields: ``file`` (any format the toolkit reads; else 415), ``model`` (the served id; else 404
``model_not_found``), ``response_format`` (``json``,
``text``, ``srt``, ``vtt``, ``verbose_json``), ``timestamp_granularities[]`` (``segment``,
``word``), ``language`` (must be the model's), ``prompt`` (its phrases, split at commas,
become hotwords of this request when the server searches with a beam; else ignored),
``temperature`` (ignored). More than ``max_requests`` under way get 429. Errors are OpenAI's
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import AsyncIterator, Dict, FrozenSet, Iterator, List, Optional, Tuple

import numpy as np
import soundfile as sf

from wenet_lite.features.audio import AudioError, check_rate, read_audio_blocks
from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.streaming import Stream, StreamingRecognizer
from wenet_lite.search.context import ContextGraph
from wenet_lite.serve.connection import Client
from wenet_lite.serve.gate import Gate, bearer_token
from wenet_lite.serve.http_front import BodyError, HttpRequest, HttpResponse, RequestHead
from wenet_lite.serve.hub import StreamHub
from wenet_lite.serve.protocols import Protocol
from wenet_lite.serve.upload_form import UploadForm
from wenet_lite.serve.uploads import UploadDecoder
from wenet_lite.transcript import DEFAULT_PAUSE_S, Segment, Transcript, format_transcript

__all__ = ["ApiError", "RESPONSE_FORMATS", "RequestPeer", "RequestProtocol", "TranscriptionApi",
           "hotword_phrase", "prompt_phrases"]  # fmt: skip

_log = logging.getLogger("wenet_lite.serve")
Json = Dict[str, object]
"""a JSON object as the API sends it"""
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
_BLOCK_S = 10.0
"""seconds of an upload read at a time (as `transcribe` reads a file it streams)"""
_LANGUAGES = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "ja": "japanese",
    "ko": "korean",
    "ru": "russian",
}


class ApiError(Exception):
    """A failure as OpenAI reports it."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: Optional[str] = None,
        code: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code

    def error(self) -> Json:
        """OpenAI's error object: message, type, param, code."""
        return {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}

    def response(self) -> HttpResponse:
        body = {"error": self.error()}
        extra = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        return HttpResponse.json(self.status, body, **extra)


@dataclass(frozen=True)
class _Asked:
    """What a request asks for, checked."""

    format: str
    grains: FrozenSet[str]
    """timestamp granularities: word, segment"""
    stream: bool
    language: str
    """the model's language as OpenAI names it (``english``)"""
    prompt: str


class _Job:
    """One request's audio: its spooled file, the block reader over it, what was read."""

    def __init__(self, path: str, name: str, max_seconds: float) -> None:
        self.path, self.name, self.max_seconds = path, name, max_seconds
        self.blocks: Optional[Iterator[Tuple[np.ndarray, int]]] = None
        self.first: Optional[Tuple[np.ndarray, int]] = None
        self.rate = 0
        self.samples = 0
        self.read = 0
        """samples decoded so far (a header may understate them)"""
        self.graph: Optional[ContextGraph] = None
        self.error: Optional[ApiError] = None

    def open(self) -> None:
        """The block reader, once the header's duration is within the limit (ApiError)."""
        try:
            declared = sf.info(self.path).duration
        except (sf.LibsndfileError, RuntimeError, TypeError):
            declared = 0.0  # the reader names what is wrong with it
        self._check(declared)
        self.blocks = read_audio_blocks(self.path, _BLOCK_S)

    def _check(self, seconds: float) -> None:
        if seconds > self.max_seconds:
            raise ApiError(
                400, f"{self.name}: {seconds / 60:.1f} min of audio, over this server's limit "
                f"of {self.max_seconds / 60:g} min", param="file", code="audio_too_long",
            )  # fmt: skip

    def next_block(self) -> Optional[Tuple[np.ndarray, int]]:
        """The next block; ApiError once the audio runs past the limit."""
        assert self.blocks is not None
        block = next(self.blocks, None)
        if block is not None:
            self.read += block[0].size
            self._check(self.read / block[1])
        return block

    def read_all(self) -> np.ndarray:
        """(N,) every sample of the upload: the first block and the rest."""
        assert self.first is not None
        blocks = [self.first[0]]
        while (block := self.next_block()) is not None:
            blocks.append(block[0])
        self.samples = sum(b.size for b in blocks)
        return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]

    def close(self) -> None:
        if self.blocks is not None and hasattr(self.blocks, "close"):
            self.blocks.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class RequestPeer:
    """An HTTP request as a stream's :class:`~wenet_lite.serve.connection.Peer`: its handler
    reads each result from the outbox, so nothing is buffered beyond it; dropping it ends the
    request's stream (its handler answers with what it has, or an error)."""

    def __init__(self, host: str) -> None:
        self.address: Optional[Tuple[str, int]] = (host, 0)

    def unsent(self) -> int:
        return 0

    def abort(self, code: int, reason: str) -> None:
        pass  # the hub closed the stream's outbox: the handler sees the end


class RequestProtocol(Protocol):
    """An API request's stream: each final segment's text as it comes, no partials."""

    name = "openai"

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        return [r.text for _, r in cursor.new_finals() if r.text], stream.done


class TranscriptionApi:
    """The API's routes. A request's audio is decoded in full context by ``uploads`` (what
    `transcribe FILE` gives), or, without it or for a prompt's hotwords, as a stream of the
    ``hub``, batched with the live streams."""

    def __init__(
        self,
        hub: StreamHub,
        recognizer: StreamingRecognizer,
        model_id: str,
        language: str,
        gate: Gate,
        max_requests: int,
        max_body: int,
        uploads: Optional[UploadDecoder] = None,
        max_seconds: float = float("inf"),
    ) -> None:
        self.hub, self.rec, self.uploads = hub, recognizer, uploads
        self.model_id, self.language = model_id, language.lower()
        self.gate = gate
        self.max_requests = max_requests
        self.max_body = max_body
        self.max_seconds = max_seconds
        """an upload's longest audio, read from its header before it is decoded"""
        self.model_rate = recognizer.cfg.features.sample_rate
        self.busy = 0
        self.created = int(time.time())
        self.pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="openai")

    # --- admission --------------------------------------------------------------------------

    def check_token(self, headers: Dict[str, str]) -> None:
        """ApiError 401 unless the request carries the server's token (the gate's check)."""
        given = bearer_token(headers)
        if self.gate.token is not None and not given:
            raise ApiError(
                401, "no API key given: send 'Authorization: Bearer TOKEN'", code="invalid_api_key"
            )
        if not self.gate.authorized(given):
            raise ApiError(401, "incorrect API key provided", code="invalid_api_key")

    def refuse(self, head: RequestHead) -> Optional[HttpResponse]:
        """Before a transcription's body is read: a wrong token, too large, too many."""
        try:
            self.check_token(head.headers)
            if head.length > self.max_body:
                raise ApiError(
                    413,
                    f"the upload has {head.length / 1e6:.1f} MB, over this server's "
                    f"limit of {self.max_body / 1e6:.1f} MB",
                )
            if self.busy >= self.max_requests:
                raise ApiError(
                    429,
                    f"the server is busy: {self.busy} transcriptions under way, retry later",
                    kind="rate_limit_error",
                    code="rate_limit_exceeded",
                )
        except ApiError as e:
            return e.response()
        return None

    # --- routes -----------------------------------------------------------------------------

    async def unknown(self, request: HttpRequest) -> HttpResponse:
        """Any other ``/v1/`` path: OpenAI's 404."""
        message = f"no such endpoint: {request.path} (POST /v1/audio/transcriptions)"
        return ApiError(404, message, code="unknown_url").response()

    async def models(self, request: HttpRequest) -> HttpResponse:
        """GET /v1/models and /v1/models/{id}."""
        try:
            self.check_token(request.headers)
            entry = {"id": self.model_id, "object": "model", "created": self.created,
                     "owned_by": "wenet-lite"}  # fmt: skip
            if request.path.rstrip("/") == "/v1/models":
                return HttpResponse.json(200, {"object": "list", "data": [entry]})
            wanted = request.path[len("/v1/models/") :]
            if wanted != self.model_id:
                raise _no_model(wanted, self.model_id)
            return HttpResponse.json(200, entry)
        except ApiError as e:
            return e.response()

    def open_body(self, head: RequestHead) -> UploadForm:
        """Where a request's body goes as it arrives: its form, the file spooled."""
        return UploadForm(head.headers.get("content-type", ""))

    def body_error(self, e: BodyError) -> HttpResponse:
        """A body refused while it arrived, as OpenAI reports errors."""
        return ApiError(e.status, str(e), kind="server_error" if e.status >= 500 else
                        "invalid_request_error").response()  # fmt: skip

    async def handle(self, request: HttpRequest[UploadForm]) -> HttpResponse:
        """POST /v1/audio/transcriptions."""
        self.busy += 1
        try:
            form = request.body
            options = _asked(form, self.model_id, self.language)
            if form.path is None:
                raise ApiError(400, "you must provide a 'file' field with the audio", param="file")
            loop = asyncio.get_running_loop()
            job = await loop.run_in_executor(self.pool, self._prepare, form, options.prompt)
            if self.uploads is not None and job.graph is None:
                return await self._in_full_context(job, options)
            c = self.hub.open(RequestProtocol(), RequestPeer(request.peer), job.rate, job.graph)
            feeder = asyncio.ensure_future(self._feed(c, job))
            if options.stream:
                return HttpResponse(200, self._events(c, job, feeder), "text/event-stream")
            try:
                async for _ in _messages(c):
                    pass
                await feeder
                transcript = _transcript(c, job)
            finally:
                feeder.cancel()
                self._done(c, job)
            return _render(transcript, options)
        except ApiError as e:
            return e.response()
        finally:
            self.busy -= 1

    async def _in_full_context(self, job: _Job, options: _Asked) -> HttpResponse:
        """The upload decoded whole, as `transcribe FILE` decodes it (batched with the other
        uploads waiting); with ``stream`` its segments as events once it is decoded."""
        transcript = asyncio.ensure_future(self._transcribe_whole(job))
        if options.stream:
            return HttpResponse(200, _whole_events(transcript), "text/event-stream")
        return _render(await transcript, options)

    async def _transcribe_whole(self, job: _Job) -> Transcript:
        assert self.uploads is not None
        loop = asyncio.get_running_loop()
        try:
            samples = await loop.run_in_executor(self.pool, job.read_all)
        except AudioError as e:
            raise _audio_error(e, job) from None
        finally:
            job.close()
        try:
            return await self.uploads.transcript(samples, job.rate, job.name, DEFAULT_PAUSE_S,
                                                 self.pool)  # fmt: skip
        except AudioError as e:
            raise _audio_error(e, job) from None
        except Exception as e:  # noqa: BLE001 - logged where it failed; the client gets a 500
            raise ApiError(500, f"the transcription failed ({type(e).__name__})",
                           kind="server_error") from None  # fmt: skip

    async def _events(self, c: Client, job: _Job, feeder: asyncio.Future) -> AsyncIterator[bytes]:
        """Server-sent events: a delta per segment as it becomes final, then the text."""
        first = True
        try:
            async for text in _messages(c):
                yield _event({"type": "transcript.text.delta",
                              "delta": text if first else " " + text})  # fmt: skip
                first = False
            try:
                await feeder
                transcript = _transcript(c, job)
            except ApiError as e:
                yield _event({"type": "error", "error": e.error()})
                return
            yield _event({"type": "transcript.text.done", "text": transcript.text})
        finally:
            feeder.cancel()
            self._done(c, job)

    def _prepare(self, form: UploadForm, prompt: str) -> _Job:
        """The spooled upload's first block read (the reader of `transcribe FILE`), and the
        prompt's hotword graph."""
        job = _Job(form.take(), form.filename, self.max_seconds)
        try:
            job.open()
            job.first = job.next_block()
            if job.first is None:
                raise AudioError(job.path, "empty", "audio file contains no samples")
            job.rate = job.first[1]
            check_rate(form.filename, job.rate, self.model_rate)
            job.graph = self._graph(prompt)
        except AudioError as e:
            job.close()
            raise _audio_error(e, job) from None
        except BaseException:
            job.close()
            raise
        return job

    def _graph(self, prompt: str) -> Optional[ContextGraph]:
        """The prompt's phrases (split at commas and line ends) as this request's hotwords,
        when the server searches with a beam; else None (the prompt is ignored)."""
        phrases = prompt_phrases(prompt)
        if not phrases or not self.rec.options.takes_hotwords:
            return None
        try:
            return self.rec.hotwords_graph(phrases, "prompt")
        except ValueError as e:
            raise ApiError(400, str(e), param="prompt") from None

    async def _feed(self, c: Client, job: _Job) -> None:
        """The spooled audio into the request's stream, a block at a time, waiting while the
        decoder has enough of it queued (memory stays bounded for an hour-long upload)."""
        loop = asyncio.get_running_loop()
        try:
            block = job.first
            while block is not None:
                job.samples += block[0].size
                await self.hub.feed_when_room(c, block[0])
                try:
                    block = await loop.run_in_executor(self.pool, job.next_block)
                except (AudioError, ApiError) as e:
                    job.error = _audio_error(e, job) if isinstance(e, AudioError) else e
                    c.failure = str(job.error)
                    self.hub.abort(c)
                    return
            self.hub.end(c)
        finally:
            job.close()

    def _done(self, c: Client, job: _Job) -> None:
        self.hub.done(c, "answered" if c.eof else "its client left", job.samples / max(job.rate, 1))


def _no_model(name: str, served: str) -> ApiError:
    return ApiError(404, f"the model '{name}' does not exist; this server serves '{served}'",
                    param="model", code="model_not_found")  # fmt: skip


def _asked(form: UploadForm, model_id: str, served_language: str) -> _Asked:
    """What a transcription request asks for, each field checked (ApiError naming it)."""
    model = form.one("model")
    if not model:
        raise ApiError(400, "you must provide a model parameter", param="model")
    if model != model_id:
        raise _no_model(model, model_id)
    fmt = form.one("response_format", "json") or "json"
    if fmt not in RESPONSE_FORMATS:
        raise ApiError(
            400,
            f"response_format '{fmt}' is not one of {', '.join(RESPONSE_FORMATS)}",
            param="response_format",
        )
    language = (form.one("language") or served_language).lower()
    if language != served_language:
        raise ApiError(
            400,
            f"language '{language}': this model transcribes '{served_language}'",
            param="language",
            code="unsupported_language",
        )
    grains = form.fields.get("timestamp_granularities[]", []) + form.fields.get(
        "timestamp_granularities", []
    )
    for g in grains:
        if g not in ("word", "segment"):
            raise ApiError(
                400,
                f"timestamp_granularities: '{g}' is not word or segment",
                param="timestamp_granularities",
            )
    stream = (form.one("stream") or "false").lower() == "true"
    if stream and fmt not in ("json", "text"):
        raise ApiError(
            400,
            f"stream=true sends text events: response_format '{fmt}' cannot stream",
            param="stream",
        )
    return _Asked(
        fmt,
        frozenset(grains) or frozenset({"segment"}),
        stream,
        _LANGUAGES.get(served_language, served_language),
        form.one("prompt") or "",
    )


def hotword_phrase(text: str) -> str:
    """A phrase given as text (a prompt's, a keyword) as a hotword line: whitespace collapsed,
    ':' (the score separator of hotword lines) a space."""
    return " ".join(text.replace(":", " ").split())


def prompt_phrases(prompt: str) -> List[str]:
    """A prompt's phrases as hotword lines: split at commas, semicolons and line ends."""
    return [p for p in (hotword_phrase(x) for x in re.split(r"[,;\n]", prompt)) if p]


async def _messages(c: Client) -> AsyncIterator[str]:
    """A request stream's messages (final segments' texts) until it ends."""
    while (message := await c.outbox.get()) is not None:
        yield message


def _transcript(c: Client, job: _Job) -> Transcript:
    """What `transcribe` gives for the stream's audio: its final segments."""
    if job.error is not None:
        raise job.error
    if c.failure is not None or not c.eof:
        raise ApiError(500, f"the transcription failed ({c.failure or 'stopped'})",
                       kind="server_error")  # fmt: skip
    segments = [Segment(r.start, r.end, r.text, tuple(r.words))
                for r in c.stream.final_results if r.text]  # fmt: skip
    text = " ".join(s.text for s in segments)
    return Transcript(job.name, text, segments, job.samples / max(job.rate, 1))


def _audio_error(e: AudioError, job: _Job) -> ApiError:
    """An unreadable upload as 415, another audio problem as 400, named as uploaded."""
    status = 415 if e.kind == "unreadable" else 400
    code = "invalid_audio" if status == 400 else "unsupported_audio"
    message = str(e).replace(job.path, job.name)
    return ApiError(status, message, param="file", code=code)


async def _whole_events(transcript: asyncio.Future) -> AsyncIterator[bytes]:
    """Server-sent events of a transcript decoded whole: a delta per segment, then the text."""
    try:
        done = await transcript
    except ApiError as e:
        yield _event({"type": "error", "error": e.error()})
        return
    for i, segment in enumerate(done.segments):
        yield _event({"type": "transcript.text.delta",
                      "delta": segment.text if i == 0 else " " + segment.text})  # fmt: skip
    yield _event({"type": "transcript.text.done", "text": done.text})


def _event(value: Json) -> bytes:
    return b"data: " + json.dumps(value, ensure_ascii=False).encode() + b"\n\n"


def _render(transcript: Transcript, options: _Asked) -> HttpResponse:
    fmt = options.format
    if fmt == "json":
        return HttpResponse.json(200, {"text": transcript.text})
    if fmt == "text":
        return HttpResponse(200, transcript.text.encode(), "text/plain; charset=utf-8")
    if fmt in ("srt", "vtt"):
        kind = "application/x-subrip" if fmt == "srt" else "text/vtt"
        return HttpResponse(
            200, format_transcript(transcript, fmt).encode(), f"{kind}; charset=utf-8"
        )
    body: Json = {
        "task": "transcribe",
        "language": options.language,
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
    }
    if "segment" in options.grains:
        body["segments"] = [
            {
                "id": i,
                "seek": 0,
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text,
                "tokens": [],
                "temperature": 0.0,
                "avg_logprob": 0.0,
                "compression_ratio": 0.0,
                "no_speech_prob": 0.0,
            }
            for i, s in enumerate(transcript.segments)
        ]
    if "word" in options.grains:
        body["words"] = [
            {
                "word": w.text,
                "start": round(w.start, 3),
                "end": round(w.end, 3),
                "confidence": w.confidence,
            }  # an extra field: the word's mean token posterior
            for w in transcript.words
        ]
    return HttpResponse.json(200, body)
