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

Operations: ``/health`` (the whole server's counters and status, workers.py),
``max_connections`` and ``max_connections_per_peer`` (HTTP 503 with the reason), origins, a
token and TLS (gate.py), graceful shutdown on SIGTERM or Ctrl-C (open streams get their final
results, then close 1001), one log line per connection and one every ``log_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from websockets.exceptions import ConnectionClosed

from wenet_lite.recognizer import EngineSpec, open_offline
from wenet_lite.runtime.streaming import StreamCursor, StreamingRecognizer
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.serve.connection import COUNTERS, Client, Counters
from wenet_lite.serve.gate import WEBSOCKET_PATHS, Gate, read_token, tls_context
from wenet_lite.serve.http_exchange import HttpExchange, front_connection
from wenet_lite.serve.hub import StreamHub
from wenet_lite.serve.openai_api import ApiError, TranscriptionApi
from wenet_lite.serve.options import ServerOptions
from wenet_lite.serve.protocols import (
    PROTOCOLS,
    Actions,
    ProtocolError,
    Served,
    Start,
    close_reason,
)
from wenet_lite.serve.realtime import RealtimeProtocol
from wenet_lite.serve.uploads import UploadDecoder
from wenet_lite.serve.workers import Board, peer_host, supervise
from wenet_lite.vad.silero import RATE as VAD_RATE
from wenet_lite.vad.silero import vad_available

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

    tls: Any = None
    token: Optional[str] = None

    @classmethod
    def load(cls, options: ServerOptions) -> Secrets:
        tls = None
        if options.certfile is not None and options.keyfile is not None:
            tls = tls_context(options.certfile, options.keyfile)
        token = read_token(options.token_file) if options.token_file else None
        return cls(tls, token)


class WebSocketPeer:
    """A websocket connection as a stream's :class:`~wenet_lite.serve.connection.Peer`."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    @property
    def address(self) -> Optional[Tuple[str, int]]:
        return self.ws.remote_address

    def unsent(self) -> int:
        transport = self.ws.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def abort(self, code: int, reason: str) -> None:
        asyncio.get_running_loop().create_task(_abort(self.ws, code, reason))


class Server:
    """The server over one :class:`StreamingRecognizer`; :meth:`run` serves until stopped.
    It keeps the transport (websockets, and HTTP exchanges on the same port), admission and
    monitoring; the streams are its :class:`StreamHub`'s."""

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
        self.sample_rate = recognizer.cfg.features.sample_rate
        self.counters = Counters()
        self.hub = StreamHub(
            recognizer, self.counters, self.board, worker, self._who, options.max_batch_size,
            max(1, int(options.max_queued_audio * self.sample_rate)), options.max_unsent,
            options.max_wait_ms, f"{worker}." if options.workers > 1 else "",
        )  # fmt: skip
        vad = options.openai_api and _uses_vad(recognizer, options)
        if vad:
            recognizer.require_vad()  # loaded once, before the first session needs it
        self._served = Served(options.model_id or "wenet-lite", options.language.lower(),
                              recognizer.options.takes_hotwords, vad)  # fmt: skip
        self.api: Optional[TranscriptionApi] = None
        self._adapters: Dict[str, Any] = dict(PROTOCOLS)
        if options.openai_api:
            self.api = TranscriptionApi(
                self.hub, recognizer, self._served.model_id, self._served.language,
                self._secrets.token, options.max_connections,
                int(options.max_upload_mb * 1e6) + 64 * 1024,
                _upload_decoder(recognizer, options, vad),
            )  # fmt: skip
            self._adapters[RealtimeProtocol.name] = RealtimeProtocol
        self._stopping = False
        self._stop: Optional[asyncio.Event] = None
        self.port: Optional[int] = None

    # --- the event loop side ---------------------------------------------------------------

    async def run(self, ready: Optional[asyncio.Event] = None) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`); then finish the open streams."""
        from websockets.asyncio.server import serve as ws_serve

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
        async with ws_serve(
            self._handle, sock=sock, process_request=self._http, ssl=self._secrets.tls,
            max_size=self.opts.max_message_size, max_queue=_MAX_QUEUE,
            write_limit=_WRITE_LIMIT, compression=None, server_header=None,
            create_connection=front_connection(self._exchange),
        ) as server:  # fmt: skip
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
            server.close(close_connections=False)  # no new connections
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

    def _exchange(self, address: Any) -> Optional[HttpExchange]:
        """Where a request of another method than GET goes (None: websockets refuses it). An
        HTTP exchange is a connection like a websocket's: it counts against the connection
        limits from its first byte to its close (a body in flight holds a file and a socket)."""
        if self.api is None or self._stopping:
            return None
        peer = peer_host(address)
        full = self._full(peer)
        if full is not None:  # answered 503 before any body is read
            self.counters.refused += 1
            _log.info("%srefused an HTTP request from %s: %s", self._who, peer, full)
            busy = ApiError(503, f"{full}; retry later", kind="server_error").response()
            return HttpExchange(self.api.handle, lambda *_: busy, self.api.open_body,
                                self.api.max_body)  # fmt: skip
        self.board.count(self.worker, peer, 1)
        return HttpExchange(self.api.handle, self.api.refuse, self.api.open_body,
                            self.api.max_body, self.opts.idle_timeout,
                            lambda: self.board.count(self.worker, peer, -1),
                            self.api.body_error)  # fmt: skip

    def _http(self, connection: Any, request: Any) -> Any:
        """Plain HTTP (the page, /health, /v1/models) and the admission of websocket clients."""
        path = request.path.split("?", 1)[0]
        if self.api is not None and path.startswith("/v1/models"):
            headers = {k.lower(): v for k, v in request.headers.raw_items()}
            status, body = self.api.models(path, headers)
            r = connection.respond(http.HTTPStatus(status), json.dumps(body))
            del r.headers["Content-Type"]
            r.headers["Content-Type"] = "application/json"
            if status == 401:
                r.headers["WWW-Authenticate"] = "Bearer"
            return r
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return self.gate.page(connection, request.method, path, self.health)
        if WEBSOCKET_PATHS.get(path) not in self._adapters:  # Realtime: with the API only
            return connection.respond(
                http.HTTPStatus.NOT_FOUND,
                "no websocket endpoint here: / speaks sherpa-onnx's protocol, /wenet WeNet's, "
                "/v1/realtime OpenAI's Realtime transcription\n",
            )
        peer = peer_host(connection.remote_address)
        refusal = self.gate.refusal(connection, request)
        why = None if refusal is None else f"HTTP {refusal.status_code}"
        if refusal is None:
            why = self._full(peer)
            if why is not None:
                refusal = connection.respond(
                    http.HTTPStatus.SERVICE_UNAVAILABLE, f"{why}; retry later\n"
                )
        if refusal is not None:
            self.counters.refused += 1
            _log.info("%srefused a connection from %s: %s", self._who, peer, why)
        return refusal

    def _full(self, peer: str) -> Optional[str]:
        """Why a new connection from ``peer`` cannot be taken now, or None."""
        if self._stopping:
            return "the server is shutting down"
        if self.board.open_connections() >= self.opts.max_connections:
            return f"the server is at its limit of {self.opts.max_connections} connections"
        most = self.opts.max_connections_per_peer
        if most and self.board.peer_connections(peer) >= most:
            return f"{peer} has {most} connection(s) open, the most one address may"
        return None

    def health(self) -> Dict[str, Any]:
        """The whole server's health (every worker's row; this worker's is refreshed)."""
        self._publish()
        return self.board.health(self.worker, self._stopping)

    def _publish(self, **values: float) -> None:
        row = {"pid": os.getpid(), "heartbeat": time.time(), "open_streams": self.hub.open_count}
        self.board.publish(self.worker, {**row, **dataclasses.asdict(self.counters), **values})

    async def _handle(self, ws: Any) -> None:
        kind = self._adapters[WEBSOCKET_PATHS[ws.request.path.split("?", 1)[0]]]
        protocol = kind.open(self._served)
        c = self.hub.open(protocol, WebSocketPeer(ws), protocol.input_rate)
        self.board.count(self.worker, c.host, 1)
        sender = asyncio.create_task(self._send_loop(c, ws))
        greeting = protocol.greeting()
        if greeting is not None:
            self.hub.send(c, greeting)
        try:
            await self._receive(c, ws)
            await sender  # ends after the last result (or when the client goes)
            if c.outcome == "open":
                c.outcome = "done"
        except ProtocolError as e:
            self.counters.errors += 1
            c.outcome = f"error: {e}"
            self.hub.close(c, e.code, str(e))
            await asyncio.wait([sender], timeout=5)
        except ConnectionClosed as e:
            if c.outcome == "open" and c.protocol.ends_by_closing:
                c.outcome = "closed by its client"
            elif c.outcome == "open" and not c.eof:
                self.counters.vanished += 1
                c.outcome = f"client left mid-stream ({type(e).__name__})"
        except Exception as e:  # noqa: BLE001 - the server's fault, on this connection only
            self.counters.failed += 1
            c.outcome = f"server error while handling it: {type(e).__name__}"
            _log.exception("%s: %s; closing it", c.name, c.outcome)
            self.hub.close(c, 1011, c.outcome)
            await asyncio.wait([sender], timeout=5)
        finally:
            sender.cancel()
            self.hub.done(c, c.outcome)
            self.board.count(self.worker, c.host, -1)

    async def _receive(self, c: Client, ws: Any) -> None:
        """Read messages until the input ends (or the client goes: ConnectionClosed). The idle
        clock: a client may fall ``idle_timeout`` s behind real time in the audio it sends;
        credit for audio sent ahead is capped at that, and paused reading does not count."""
        idle = self.opts.idle_timeout
        deadline = time.monotonic() + idle
        while not c.finished:
            if c.queued >= self.hub.queue_limit:  # backpressure: stop reading this socket
                self.counters.throttled += 1
                c.room.clear()
                paused = time.monotonic()
                await c.room.wait()
                deadline += time.monotonic() - paused
                continue
            timeout = max(0.0, deadline - time.monotonic()) if idle else None
            try:
                message = await asyncio.wait_for(ws.recv(), timeout)
            except asyncio.TimeoutError:
                self.counters.idle += 1
                if c.started:
                    c.outcome = f"idle for {idle:g} s: input ended"
                    self.hub.end(c, 1000, c.outcome)
                else:
                    c.outcome = f"no start signal within {idle:g} s"
                    self.hub.end(c, 1008, c.outcome)
                return
            if isinstance(message, bytes):
                n = self.hub.feed(c, c.protocol.on_binary(message))
                deadline = min(deadline + n / self.sample_rate, time.monotonic() + idle)
                continue
            action = c.protocol.on_text(message)
            if isinstance(action, Actions):
                n = self._act(c, action)
                deadline = min(deadline + n / (c.rate or self.sample_rate),
                               time.monotonic() + idle)  # fmt: skip
            elif isinstance(action, Start):
                await self._start(c, action)
            else:
                self.hub.end(c)

    async def _start(self, c: Client, start: Start) -> None:
        if start.hotwords:
            try:
                graph = await self.hub.graph_now(start.hotwords, f"{c.name}: hotwords")
            except ValueError as e:
                raise ProtocolError(str(e)) from None
            c.stream = self.rec.create_stream(graph, c.protocol.stream_vad())  # no audio yet
            c.cursor = StreamCursor(c.stream)
        self.hub.send(c, start.reply)

    def _act(self, c: Client, action: Actions) -> int:
        """A segmented protocol's actions: replies, audio, a boundary (with the hotword graph
        it brings, built off the loop; the decoder waits for it there; a bad line is an error
        event, the session keeps its graph)."""
        for reply in action.replies:
            self.hub.send(c, reply)
        n = self.hub.feed(c, action.audio) if action.audio is not None else 0
        boundary = action.boundary
        if boundary is not None:
            if action.hotwords is not None:

                def refused(why: str) -> None:
                    self.hub.send(c, c.protocol.error(why, "invalid_value", "keywords"))

                graph = self.hub.graph_later(c, action.hotwords, f"{c.name}: keywords", refused)
                boundary = dataclasses.replace(boundary, graph=graph)
            self.hub.mark(c, boundary)
        return n

    async def _send_loop(self, c: Client, ws: Any) -> None:
        while True:
            message = await c.outbox.get()
            if message is None:
                break
            await ws.send(message)
        await ws.close(c.close_code, c.close_reason)

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


async def _abort(ws: Any, code: int, reason: str) -> None:
    """Close a connection that does not read: the close frame may never get through, so the
    socket is dropped after a second."""
    try:
        await asyncio.wait_for(ws.close(code, close_reason(reason)), 1.0)
    except Exception:  # noqa: BLE001 - timed out or already closed: drop it either way
        pass
    if ws.transport is not None:
        ws.transport.abort()


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


def _upload_decoder(
    rec: StreamingRecognizer, options: ServerOptions, vad: bool
) -> Optional[UploadDecoder]:
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
    )
    return UploadDecoder(offline, options.max_batch_size, rec.require_vad() if vad else None)


def _uses_vad(rec: StreamingRecognizer, options: ServerOptions) -> bool:
    """Whether the API runs the VAD: ``--vad on`` (refused where it cannot run), or auto where
    silero-vad is installed and the model hears 16 kHz audio, as the VAD does."""
    if options.vad == "auto":
        return vad_available() and rec.cfg.features.sample_rate == VAD_RATE
    return options.vad == "on"


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
