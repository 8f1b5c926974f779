"""`wenet-lite serve`: streaming recognition over websockets for many clients at once.

Two threads share the work. The asyncio event loop (``websockets``) receives messages, checks
them and queues each client's samples in its inbox; it never touches a stream. One decode
thread (decoder.py) owns every stream: each step it moves queued samples into the streams that
need audio (at most ``FEED_S`` seconds each), decodes one chunk of every ready stream of every
connection in ONE batched encoder call (``StreamingRecognizer.decode_streams``, at most
``max_batch_size`` streams, the longest-waiting first) and writes the results as protocol
messages, which the event loop sends. A stream's results are those of `wenet-lite stream` on
the same audio: streaming is exact whatever sizes the audio arrives in and whichever streams
share a batch.

No client can hurt another:
- **Backpressure.** When ``max_queued_audio`` seconds of a connection's audio wait to be
  decoded, the loop stops reading that socket until the decoder catches up; websockets' own
  buffer (``max_queue`` frames) fills and TCP pushes back on the sender.
- **Isolation.** Any exception while taking, decoding or rendering one connection's stream
  closes that connection (1011, counted as ``failed``); a batched step that fails is retried
  stream by stream, so the others go on.
- **Bounded output.** Results and pongs a client does not read count against ``max_unsent``;
  beyond it the client is closed (1008, counted as ``unread``). A partial result still waiting
  when the next result comes is replaced by it, so only finals pile up for a client that reads
  late: one that sends a long file at full speed and reads at the end loses nothing.
- **Idle clients.** A client that falls ``idle_timeout`` seconds behind real time in the audio
  it sends has its input ended (tiny messages do not keep a slot); one that never started its
  protocol is closed.

The transport is one HTTP front that owns the port (http_front.py): it reads each
connection's request head (within ``head_timeout``), answers the plain routes of one table
(routes.py) and hands websocket upgrades to websockets; the sessions (sessions.py) run them.

Operations: ``/health`` (the whole server's counters and status, workers.py),
``max_connections`` and ``max_connections_per_peer`` (HTTP 503 with the reason, answered at a
connection's first bytes; every open connection counts, refused ones too, until it closes),
origins, a token and TLS (gate.py), graceful shutdown on SIGTERM or Ctrl-C (open streams get
their final results, then close 1001), one log line per connection and one every
``log_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Type, Union

import torch
from websockets.asyncio.connection import Connection

from wenet_lite.recognizer import EngineSpec, open_offline
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.serve.accept import Acceptor
from wenet_lite.serve.connection import COUNTERS, Counters
from wenet_lite.serve.gate import Gate, read_token, tls_context
from wenet_lite.serve.http_front import (
    HttpFront,
    HttpResponse,
    PlainRoute,
    RequestHead,
    WebSocketSettings,
)
from wenet_lite.serve.hub import StreamHub
from wenet_lite.serve.openai_api import TranscriptionApi
from wenet_lite.serve.options import ServerOptions
from wenet_lite.serve.protocols import PROTOCOLS, Protocol, Served
from wenet_lite.serve.realtime import RealtimeProtocol
from wenet_lite.serve.routes import plain_routes
from wenet_lite.serve.sessions import WebSocketSessions
from wenet_lite.serve.uploads import UploadDecoder
from wenet_lite.serve.workers import Board, supervise

__all__ = ["Secrets", "Server", "ServerOptions", "serve"]

_log = logging.getLogger("wenet_lite.serve")
_SHUTDOWN_GRACE_S = 30.0
_WATCH_S = 0.25
"""how often unsent bytes are checked and this worker's counters published"""
_MAX_QUEUE = 4
"""websocket frames websockets buffers per connection before it stops reading the socket"""
_WRITE_LIMIT = 1 << 16
"""bytes in a connection's write buffer above which sending a result waits"""


@dataclass(frozen=True)
class Secrets:
    """The TLS context and the token of :class:`ServerOptions`, read once (before forking)."""

    tls: Optional[ssl.SSLContext] = None
    token: Optional[str] = None

    @classmethod
    def load(cls, options: ServerOptions) -> Secrets:
        tls = None
        if options.certfile is not None and options.keyfile is not None:
            tls = tls_context(options.certfile, options.keyfile)
        token = read_token(options.token_file) if options.token_file else None
        return cls(tls, token)


class Server:
    """The server over one :class:`StreamingRecognizer`; :meth:`run` serves until stopped.
    It is the site of the HTTP front (admission, the routes, the websocket sessions) and
    keeps the monitoring; the streams are its :class:`StreamHub`'s."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        options: ServerOptions,
        sock: Optional[socket.socket] = None,
        worker: int = 0,
        board: Optional[Board] = None,
        secrets: Optional[Secrets] = None,
    ) -> None:
        self.rec, self.opts = recognizer, options
        self._sock, self.worker = sock, worker
        self.board = board if board is not None else Board(1, COUNTERS)
        self._secrets = secrets if secrets is not None else Secrets.load(options)
        self.gate = Gate(options.origins, self._secrets.token, worker, options.workers)
        self.counters = Counters()
        self.hub = StreamHub(
            recognizer, self.counters, self.board, worker, self._who, options.max_batch_size,
            max(1, int(options.max_queued_audio * recognizer.cfg.features.sample_rate)),
            options.max_unsent, options.max_wait_ms, f"{worker}." if options.workers > 1 else "",
            options.batch_window_ms,
        )  # fmt: skip
        vad = options.openai_api and recognizer.vad is not None  # chosen when it was opened
        served = Served(options.model_id or "wenet-lite", options.language.lower(),
                        recognizer.options.takes_hotwords, vad)  # fmt: skip
        self.api: Optional[TranscriptionApi] = None
        adapters: Dict[str, Type[Protocol]] = dict(PROTOCOLS)
        if options.openai_api:
            self.api = TranscriptionApi(
                self.hub, recognizer, served.model_id, served.language, self.gate,
                options.max_connections, int(options.max_upload_mb * 1e6) + 64 * 1024,
                _upload_decoder(recognizer, options), options.max_upload_minutes * 60,
            )  # fmt: skip
            adapters[RealtimeProtocol.name] = RealtimeProtocol
        self.sessions = WebSocketSessions(self.hub, recognizer, self.counters, adapters, served,
                                          options.idle_timeout)  # fmt: skip
        # the front's site: its routes, timeouts and websocket settings
        self.routes: List[PlainRoute] = plain_routes(self.gate, self.health, self.api)
        self.websocket = WebSocketSettings(options.max_message_size, _MAX_QUEUE, _WRITE_LIMIT)
        self.head_timeout, self.idle_timeout = options.head_timeout, options.idle_timeout
        self._stopping = False
        self._stop: Optional[asyncio.Event] = None
        self.port: Optional[int] = None

    # --- the event loop side ---------------------------------------------------------------

    async def run(self, ready: Optional[asyncio.Event] = None) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`); then finish the open streams."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
                pass
        self._publish(alive=1)
        await self.hub.warm_up()
        tasks = [asyncio.create_task(t) for t in (self.hub.decode_loop(), self._log_loop(),
                                                  self._watch_loop())]  # fmt: skip
        sock = self._sock if self._sock is not None else listen(self.opts.host, self.opts.port)
        acceptor = Acceptor(sock, lambda: HttpFront(self), self.board, self.worker,
                            self._secrets.tls, self.head_timeout)  # fmt: skip
        acceptor.start()
        self.port = sock.getsockname()[1]
        s, host = self.opts.scheme, self.opts.host
        _log.info(
            "%slistening on ws%s://%s:%d (sherpa-onnx protocol on /, WeNet's on /wenet; page "
            "http%s://%s:%d/)", self._who, s, host, self.port, s, host, self.port,
        )  # fmt: skip
        if ready is not None:
            ready.set()
        await self._stop.wait()
        _log.info("%sshutting down: finishing %d open stream(s)", self._who,
                  self.hub.open_count)  # fmt: skip
        acceptor.close()  # no new connections; the open ones go on
        await self.hub.finish(_SHUTDOWN_GRACE_S)
        for t in tasks:
            t.cancel()
        self.hub.shutdown()
        if self.api is not None:
            self.api.pool.shutdown(wait=False, cancel_futures=True)
        _ignore_late_sigterm(loop)
        _log.info("%sstopped: %s", self._who, self._totals())

    @property
    def _who(self) -> str:
        return f"worker {self.worker}: " if self.opts.workers > 1 else ""

    def stop(self) -> None:
        """Stop accepting connections, finish the open streams, return from :meth:`run`."""
        self._stopping = True
        if self._stop is not None:
            self._stop.set()

    # --- the front's site -------------------------------------------------------------------

    def opened(self, peer: str) -> Optional[str]:
        """A connection arrived (counted until it closes, refused or not): why it is refused
        (answered 503), or None."""
        why = self._full(peer)
        self.board.count(self.worker, peer, 1)
        if why is not None:
            self.counters.refused += 1
            _log.info("%srefused a connection from %s: %s", self._who, peer, why)
        return why

    def closed(self, peer: str) -> None:
        self.board.count(self.worker, peer, -1)

    def upgrade(self, head: RequestHead) -> Optional[HttpResponse]:
        """A websocket handshake's refusal: no endpoint at its path, its origin or token."""
        if not self.sessions.serves(head.path):  # Realtime: with the API only
            return HttpResponse.text(
                404, "no websocket endpoint here: / speaks sherpa-onnx's protocol, /wenet "
                "WeNet's, /v1/realtime OpenAI's Realtime transcription",
            )  # fmt: skip
        refusal = self.gate.refusal(head)
        if refusal is not None:
            self.counters.refused += 1
            _log.info("%srefused a connection from %s: HTTP %d", self._who, head.peer,
                      refusal.status)  # fmt: skip
        return refusal

    async def serve_websocket(self, connection: Connection) -> None:
        await self.sessions.run(connection)

    def _full(self, peer: str) -> Optional[str]:
        """Why a new connection from ``peer`` cannot be taken now, or None."""
        if self._stopping:
            return "the server is shutting down"
        if self.board.open_connections() >= self.opts.max_connections:
            return f"the server is at its limit of {self.opts.max_connections} connections"
        most = self.opts.peer_limit
        if most and self.board.peer_connections(peer) >= most:
            return f"{peer} has {most} connection(s) open, the most one address may"
        return None

    def health(self) -> Dict[str, object]:
        """The whole server's health (every worker's row; this worker's is refreshed)."""
        self._publish()
        return self.board.health(self.worker, self._stopping)

    def _publish(self, **values: float) -> None:
        row = {"pid": os.getpid(), "heartbeat": time.time(), "open_streams": self.hub.open_count}
        self.board.publish(self.worker, {**row, **dataclasses.asdict(self.counters), **values})

    async def _watch_loop(self) -> None:
        """Publish this worker's counters; close clients that let unsent bytes pile up."""
        while True:
            self._publish(alive=1)
            self.hub.watch()
            await asyncio.sleep(_WATCH_S)

    async def _log_loop(self) -> None:
        if not self.opts.log_interval:
            return
        last = dataclasses.replace(self.counters)
        while True:
            await asyncio.sleep(self.opts.log_interval)
            now = self.counters
            steps = now.steps - last.steps
            if steps or self.hub.open_count:
                _log.info(
                    "%s%d open stream(s); %d steps, mean batch %.1f, %.1f ms of decoding a step, "
                    "decode thread busy %.0f %%; %s", self._who, self.hub.open_count, steps,
                    (now.batched - last.batched) / max(steps, 1),
                    1000 * (now.decode_s - last.decode_s) / max(steps, 1),
                    100 * (now.decode_s - last.decode_s) / self.opts.log_interval, self._totals(),
                )  # fmt: skip
            last = dataclasses.replace(now)

    def _totals(self) -> str:
        n = self.counters
        return (
            f"{n.connections} connection(s) in all, {n.refused} refused, {n.errors} protocol "
            f"error(s), {n.failed} failed, {n.vanished} left mid-stream, {n.idle} idle, "
            f"{n.unread} not reading"
        )


def _ignore_late_sigterm(loop: asyncio.AbstractEventLoop) -> None:
    """Once the streams are finished the process only exits: a SIGTERM then (e.g. a
    supervisor's second one) must not turn the clean exit into death by signal. Closing the
    loop would restore the default action, so SIGTERM is ignored from here on."""
    try:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        pass


def listen(host: str, port: int) -> socket.socket:
    """The server's listening TCP socket (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _upload_decoder(rec: StreamingRecognizer, options: ServerOptions) -> Optional[UploadDecoder]:
    """Full-context decoding of uploads over the recogniser's own fp32 model (no second copy),
    with its search; None when uploads stream (``--upload-context streamed``, or an export
    directory: no model to run whole files)."""
    if options.upload_context != "full" or rec.model is None:
        return None
    device = next(rec.model.parameters()).device
    spec = EngineSpec(threads=torch.get_num_threads(), device=str(device))
    offline = open_offline(
        (rec.model, rec.tokenizer, rec.cfg),
        DecodeOptions(rec.options, window_progress=False),
        rec.options,
        spec,
        rec.punctuator,
        rec.vad or "off",  # the live streams' VAD finds the uploads' speech too
        itn=rec.itn,
    )
    return UploadDecoder(offline, options.max_batch_size)


def serve(
    recognizer: Union[StreamingRecognizer, Callable[[], StreamingRecognizer]],
    options: ServerOptions,
    threads: int = 1,
    secrets: Optional[Secrets] = None,
) -> int:
    """Serve until SIGTERM or Ctrl-C; returns the exit code.

    With ``options.workers`` > 1 the process forks that many workers after the model is loaded
    (they share its memory) and before any inference; they accept connections from one
    listening socket, each running its own event loop and decode thread: one Python process
    runs one decode thread's Python at a time (the GIL), so on a machine with several cores
    workers serve more streams. This process supervises them (workers.py): a worker that dies
    is logged and restarted; SIGTERM and SIGINT are passed on and waited for.

    ``recognizer`` may be a function that makes one: each worker then calls it after the fork
    (a model on a GPU: a CUDA context cannot cross a fork, so the parent must not start one,
    and each worker puts its own copy on the GPU).
    """
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection is ours
    secrets = secrets if secrets is not None else Secrets.load(options)
    board = Board(options.workers, COUNTERS)
    sock = listen(options.host, options.port)

    def made(i: int) -> StreamingRecognizer:
        if not callable(recognizer):  # made already (not a function that makes one)
            return recognizer
        _log.info("worker %d: making its recognizer", i)
        return recognizer()

    if options.workers == 1:
        torch.set_num_threads(threads)
        asyncio.run(Server(made(0), options, sock, 0, board, secrets).run())
        return 0

    def start(i: int) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 1  # the worker
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            torch.set_num_threads(threads)
            asyncio.run(Server(made(i), options, sock, i, board, secrets).run())
            code = 0
        except BaseException:  # noqa: BLE001 - logged; the parent restarts the worker
            _log.exception("worker %d failed", i)
        finally:
            os._exit(code)

    try:
        return supervise(start, board)
    finally:
        sock.close()
