"""How `wenet-lite serve` listens, batches and bounds each client: one frozen object that the
CLI fills (each field declares its flag) and :class:`~wenet_lite.serve.server.Server` takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Tuple

from wenet_lite.config import flag
from wenet_lite.config.fields import FieldError, Setting, literal

__all__ = ["ServerOptions"]


@dataclass(frozen=True)
class ServerOptions:
    """How `wenet-lite serve` listens, batches and bounds its clients (the recognizer has its
    own options)."""

    host: str = field(default="127.0.0.1", metadata=flag("--host", "address to listen on"))
    port: int = field(default=6006, metadata=flag("--port", "0: any free port"))
    max_connections: int = field(
        default=1000,
        metadata=flag("--max-connections", "more are refused with HTTP 503 and the reason"),
    )
    max_connections_per_peer: Optional[int] = field(
        default=None,
        metadata=flag(
            "--max-connections-per-peer",
            "connections one client address may hold open, more get HTTP 503 (default: "
            "--max-connections less a tenth, kept for the other addresses; 0: no limit)",
        ),
    )
    head_timeout: float = field(
        default=10.0,
        metadata=flag(
            "--head-timeout",
            "s from a connection's start within which its request head (an HTTP request's line "
            "and headers, a websocket's handshake) must have arrived; later is 408, closed",
        ),
    )
    max_batch_size: int = field(
        default=256, metadata=flag("--max-batch-size", "streams decoded in one encoder call")
    )
    max_wait_ms: float = field(
        default=0.0,
        metadata=flag("--max-wait-ms", "wait this long for more audio before each decode step"),
    )
    batch_window_ms: float = field(
        default=100.0,
        metadata=flag(
            "--batch-window-ms",
            "how long a ready stream may wait for others to share its decode step, while fewer "
            "than half the streams are ready (larger batches cost less CPU a stream; 0: step "
            "as soon as one is ready)",
        ),
    )
    max_message_size: int = field(
        default=1 << 20,
        metadata=flag("--max-message-size", "bytes; a larger message closes its connection"),
    )
    max_queued_audio: float = field(
        default=5.0,
        metadata=flag(
            "--max-queued-audio",
            "seconds of a connection's audio received but not yet decoded; at this much the "
            "server stops reading that connection until the decoder catches up",
        ),
    )
    max_unsent: int = field(
        default=1 << 20,
        metadata=flag(
            "--max-unsent",
            "bytes of results and pongs waiting for a client to read them; beyond, the "
            "client is closed (1008)",
        ),
    )
    idle_timeout: float = field(
        default=30.0,
        metadata=flag(
            "--idle-timeout",
            "s a client may fall behind real time in the audio it sends before its input is "
            "ended; an HTTP request that sends nothing for this long is answered 408 (0: never)",
        ),
    )
    log_interval: float = field(
        default=10.0, metadata=flag("--log-interval", "s between load lines (0: none)")
    )
    workers: int = field(
        default=1,
        metadata=flag(
            "--jobs",
            "parallel workers: processes serving the port, each with its own decode thread; "
            "a worker that dies is restarted",
            aliases=("--workers",),
        ),
    )
    certfile: Optional[str] = field(
        default=None,
        metadata=flag("--certfile", "TLS certificate (PEM): serve wss:// and https://"),
    )
    keyfile: Optional[str] = field(
        default=None, metadata=flag("--keyfile", "TLS private key (PEM) of --certfile")
    )
    allowed_origins: str = field(
        default="",
        metadata=flag(
            "--allowed-origins",
            "comma-separated origins whose pages may open a websocket, or '*' (default: "
            "this server's own pages and pages on localhost)",
        ),
    )
    token_file: Optional[str] = field(
        default=None,
        metadata=flag(
            "--token-file",
            "file holding a token that every websocket must give ('Authorization: Bearer "
            "TOKEN' or ?token=TOKEN); others get HTTP 401",
        ),
    )

    openai_api: bool = field(
        default=True,
        metadata=flag(
            "--no-openai-api",
            "do not serve OpenAI's audio API on the port (POST /v1/audio/transcriptions, GET "
            "/v1/models; served by default)",
        ),
    )
    model_id: str = field(
        default="",
        metadata=flag("--model-id", "the model's id in the OpenAI API (default: the model's name)"),
    )
    language: str = field(
        default="en",
        metadata=flag(
            "--language", "the model's language: OpenAI API requests in another get HTTP 400"
        ),
    )
    max_upload_mb: float = field(
        default=100.0,
        metadata=flag("--max-upload-mb", "MB an OpenAI API upload may have (HTTP 413 beyond)"),
    )
    max_upload_minutes: float = field(
        default=60.0,
        metadata=flag(
            "--max-upload-minutes",
            "minutes of audio an OpenAI API upload may hold, read from its header before it is "
            "decoded (HTTP 400 beyond): a few MB of compressed silence can hold hours",
        ),
    )
    upload_context: Literal["full", "streamed"] = field(
        default="full",
        metadata=flag(
            "--upload-context",
            "how OpenAI API uploads are decoded: full (default: full context, what `transcribe "
            "FILE` gives; the model file's fp32 model, uploads batched together) or streamed "
            "(as a live stream, at --chunk-size; also where the model is an export directory, "
            "and for a prompt's hotwords under the prefix beam)",
        ),
    )
    vad: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata=flag(
            "--vad",
            "Silero VAD in the OpenAI API: uploads decoded in full context are cut to their "
            "speech regions (as `transcribe` does), and it decides Realtime server_vad turns "
            "with the session's threshold, silence_duration_ms and prefix_padding_ms (auto: "
            "where silero-vad is installed; off: whole uploads, turns by the endpointer)",
        ),
    )

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_batch_size", "max_message_size", "workers",
                     "max_unsent"):  # fmt: skip
            if getattr(self, name) < 1:
                raise _wrong(self, name, "must be at least 1")
        for name in ("idle_timeout", "log_interval"):
            if not getattr(self, name) >= 0:
                raise _wrong(self, name, "must be >= 0")
        for name in ("max_wait_ms", "batch_window_ms"):  # a decode step never waits long
            if not 0 <= getattr(self, name) <= 10_000:
                raise _wrong(self, name, "must be in 0..10000 (ms)")
        if self.max_connections_per_peer is not None and self.max_connections_per_peer < 0:
            raise _wrong(self, "max_connections_per_peer", "must be >= 0")
        for name in ("head_timeout", "max_upload_minutes"):
            if not 0 < getattr(self, name) < float("inf"):
                raise _wrong(self, name, "must be a number > 0")
        if self.upload_context not in ("full", "streamed"):
            raise _wrong(self, "upload_context", "must be full or streamed")
        if self.vad not in ("auto", "on", "off"):
            raise _wrong(self, "vad", "must be auto, on or off")
        if not self.max_upload_mb > 0:
            raise _wrong(self, "max_upload_mb", "must be > 0")
        if not self.max_queued_audio > 0:
            raise _wrong(self, "max_queued_audio", "must be > 0 s")
        if not 0 <= self.port <= 65535:
            raise _wrong(self, "port", "must be in 0..65535")
        if (self.certfile is None) != (self.keyfile is None):
            raise FieldError("{cert} and {key} go together: give both or neither",
                             cert=Setting("certfile"), key=Setting("keyfile"))  # fmt: skip

    @property
    def peer_limit(self) -> int:
        """Connections one address may hold (0: any number)."""
        if self.max_connections_per_peer is None:  # a tenth kept for the other addresses
            return max(1, self.max_connections - max(1, self.max_connections // 10))
        return self.max_connections_per_peer

    @property
    def origins(self) -> Tuple[str, ...]:
        return tuple(o.strip().rstrip("/") for o in self.allowed_origins.split(",") if o.strip())

    @property
    def scheme(self) -> str:
        return "s" if self.certfile else ""


def _wrong(options: ServerOptions, name: str, rule: str) -> FieldError:
    """A field of :class:`ServerOptions` out of its range, named in the reader's words."""
    value = getattr(options, name)
    shown = repr(value) if isinstance(value, str) else str(value)
    return FieldError(f"{{field}} {rule}, got {literal(shown)}", field=Setting(name))
