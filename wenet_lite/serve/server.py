"""`wenet-lite serve`: streaming recognition over websockets for many clients at once.

Two threads share the work. The asyncio event loop (``websockets``) receives messages, checks
them and queues each client's samples in its inbox; it never touches a stream. One decode
thread owns every stream: each step it moves the queued samples into the streams (online
fbank), decodes one chunk of every ready stream of every connection in ONE batched encoder call
(``StreamingRecognizer.decode_streams``, at most ``max_batch_size`` streams, the longest-waiting
first) and writes the results as protocol messages, which the event loop sends. While the
decode thread works, audio keeps arriving; the next step takes all of it. A stream's results
are those of `wenet-lite stream` on the same audio: streaming is exact whatever sizes the audio
arrives in and whichever streams share a batch.

Operations: ``/health`` (JSON counters), ``max_connections`` (a client beyond it gets HTTP 503
with the reason), ``max_message_size`` (close 1009), ``idle_timeout`` (a client silent that long
has its input ended: it gets its final results and a close reason), graceful shutdown on SIGTERM
or Ctrl-C (open streams are finished and get their final results, then close 1001), one log line
per connection and one every ``log_interval`` seconds. A bad message closes only its own
connection, with the reason (protocols.py); every error is counted.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import http
import json
import logging
import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np
import torch

from wenet_lite.decode.streaming import Stream, StreamingRecognizer
from wenet_lite.serve.protocols import (
    SHERPA_DONE,
    SHERPA_END,
    WENET_READY,
    WENET_SPEECH_END,
    ProtocolError,
    WenetStart,
    close_reason,
    decode_float32,
    decode_int16,
    empty_result,
    parse_wenet_text,
    sherpa_result,
    wenet_failed,
    wenet_final,
    wenet_partial,
)

__all__ = ["Server", "ServerOptions", "serve"]

_log = logging.getLogger("wenet_lite.serve")
_STATIC = {  # HTTP path -> (file in wenet_lite/serve/static, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
}
_WEBSOCKET_PATHS = {"/": "sherpa", "/sherpa": "sherpa", "/wenet": "wenet"}
_SHUTDOWN_GRACE_S = 30.0


@dataclass(frozen=True)
class ServerOptions:
    """How `wenet-lite serve` listens and batches (the recognizer has its own options)."""

    host: str = "127.0.0.1"
    port: int = 6006
    """0: any free port (the log line 'listening on ...' names it)"""
    max_connections: int = 1000
    max_batch_size: int = 256
    """streams decoded in one encoder call; more ready streams wait for the next step"""
    max_wait_ms: float = 0.0
    """before a step, wait this long for more audio to fill the batch (0: decode at once)"""
    max_message_size: int = 1 << 20
    """bytes; a larger message closes its connection (1009)"""
    idle_timeout: float = 30.0
    """seconds without a message before a client's input is ended"""
    log_interval: float = 10.0
    """seconds between the periodic load lines (0: none)"""
    workers: int = 1
    """processes serving the one port, each with its own decode thread and batches
    (``max_connections`` counts the connections of all)"""

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_batch_size", "max_message_size", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_wait_ms", "idle_timeout", "log_interval"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")


class _Client:
    """One connection: its stream, and what passes between the event loop and the decode
    thread (the loop writes ``inbox``, ``finished`` and ``gone``; the thread owns ``stream``)."""

    def __init__(self, cid: str, protocol: str, ws: Any, stream: Stream) -> None:
        self.id, self.protocol, self.ws, self.stream = cid, protocol, ws, stream
        self.inbox: Deque[np.ndarray] = collections.deque()
        self.finished = False  # no more audio will come
        self.gone = False  # the connection is over: the decode thread forgets the stream
        self.eof = False  # (decode thread) the last result is written
        self.outbox: asyncio.Queue = asyncio.Queue()  # messages; None: close
        self.sent_finals = 0
        self.last_step = -1  # the step that last decoded this stream (fairness)
        self.wenet: Optional[WenetStart] = None
        self.samples = 0
        self.opened = time.monotonic()
        self.outcome = "open"
        self.close_code, self.close_reason = 1000, ""

    @property
    def name(self) -> str:
        peer = self.ws.remote_address
        where = f"{peer[0]}:{peer[1]}" if peer else "?"
        return f"connection {self.id} ({self.protocol}, {where})"


@dataclass
class _Counters:
    connections: int = 0
    refused: int = 0
    errors: int = 0
    vanished: int = 0
    idle: int = 0
    steps: int = 0
    batched: int = 0
    decode_s: float = 0.0


class Server:
    """The server over one :class:`StreamingRecognizer`; :meth:`run` serves until stopped."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        options: ServerOptions,
        sock: Optional[socket.socket] = None,
        worker: int = 0,
        open_count: Any = None,
    ) -> None:
        self.rec, self.opts = recognizer, options
        self._sock, self.worker = sock, worker
        self._open_count = open_count  # the workers' shared count of open connections
        self.sample_rate = recognizer.cfg.features.sample_rate
        self.counters = _Counters()
        self._clients: Dict[str, _Client] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
        self._step_index = 0
        self._stopping = False
        self._wake: Optional[asyncio.Event] = None
        self._stop: Optional[asyncio.Event] = None
        self.port: Optional[int] = None

    # --- the event loop side ---------------------------------------------------------------

    async def run(self, ready: Optional[asyncio.Event] = None) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`); then finish the open streams."""
        from websockets.asyncio.server import serve as ws_serve

        loop = asyncio.get_running_loop()
        self._wake, self._stop = asyncio.Event(), asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
                pass
        await loop.run_in_executor(self._pool, self._warm_up)
        decoder = asyncio.create_task(self._decode_loop())
        ticker = asyncio.create_task(self._log_loop())
        sock = self._sock if self._sock is not None else listen(self.opts.host, self.opts.port)
        async with ws_serve(
            self._handle, sock=sock, process_request=self._http,
            max_size=self.opts.max_message_size, compression=None,
        ) as server:  # fmt: skip
            self.port = sock.getsockname()[1]
            _log.info(
                "%slistening on ws://%s:%d (sherpa-onnx protocol on /, WeNet's on /wenet; page "
                "http://%s:%d/)", self._who, self.opts.host, self.port, self.opts.host, self.port,
            )  # fmt: skip
            if ready is not None:
                ready.set()
            await self._stop.wait()
            _log.info("%sshutting down: finishing %d open stream(s)", self._who, len(self._clients))
            server.close(close_connections=False)  # no new connections
            for c in list(self._clients.values()):
                self._end_input(c, 1001, "server shutting down")
            deadline = time.monotonic() + _SHUTDOWN_GRACE_S
            while self._clients and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        decoder.cancel()
        ticker.cancel()
        self._pool.shutdown(wait=True)
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

    def _http(self, connection: Any, request: Any) -> Any:
        """Plain HTTP (the page, /health) and the admission of websocket clients."""
        path = request.path.split("?", 1)[0]
        if request.headers.get("Upgrade", "").lower() != "websocket":
            if path == "/health":
                response = connection.respond(http.HTTPStatus.OK, json.dumps(self.health()))
                return _typed(response, "application/json")
            if path not in _STATIC:
                return connection.respond(http.HTTPStatus.NOT_FOUND, f"no page at {path}\n")
            name, mime = _STATIC[path]
            text = resources.files("wenet_lite.serve").joinpath("static", name).read_text("utf-8")
            return _typed(connection.respond(http.HTTPStatus.OK, text), mime)
        if path not in _WEBSOCKET_PATHS:
            return connection.respond(
                http.HTTPStatus.NOT_FOUND,
                f"no websocket endpoint at {path}: / speaks sherpa-onnx's protocol, /wenet "
                "WeNet's\n",
            )
        if self._stopping or self._open_connections() >= self.opts.max_connections:
            self.counters.refused += 1
            why = (
                "the server is shutting down"
                if self._stopping
                else f"the server is at its limit of {self.opts.max_connections} connections"
            )
            _log.info("refused a connection from %s: %s", connection.remote_address, why)
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, f"{why}; retry later\n")
        return None

    def _open_connections(self) -> int:
        if self._open_count is None:
            return len(self._clients)
        return int(self._open_count.value)

    def _count_open(self, step: int) -> None:
        if self._open_count is not None:
            with self._open_count.get_lock():
                self._open_count.value += step

    def health(self) -> Dict[str, Any]:
        status = "stopping" if self._stopping else "ok"
        return {"status": status, "worker": self.worker, "workers": self.opts.workers,
                "open_streams": len(self._clients),
                **dataclasses.asdict(self.counters)}  # fmt: skip

    async def _handle(self, ws: Any) -> None:
        self.counters.connections += 1
        protocol = _WEBSOCKET_PATHS[ws.request.path.split("?", 1)[0]]
        n = self.counters.connections
        cid = f"{self.worker}.{n}" if self.opts.workers > 1 else str(n)
        c = _Client(cid, protocol, ws, self.rec.create_stream())
        self._clients[c.id] = c
        self._count_open(1)
        sender = asyncio.create_task(self._send_loop(c))
        try:
            await self._receive(c)
            await sender  # ends after the last result (or when the client goes)
            if c.outcome == "open":
                c.outcome = "done"
        except ProtocolError as e:
            self.counters.errors += 1
            c.outcome = f"error: {e}"
            if c.protocol == "wenet":
                c.outbox.put_nowait(wenet_failed(str(e)))
            c.close_code, c.close_reason = e.code, close_reason(str(e))
            c.outbox.put_nowait(None)
            c.gone = True
            await asyncio.wait([sender], timeout=5)
        except Exception as e:  # noqa: BLE001 - the client vanished (ConnectionClosed) or worse
            if not c.eof:
                self.counters.vanished += 1
                c.outcome = f"client left mid-stream ({type(e).__name__})"
        finally:
            c.gone = True
            sender.cancel()
            self._clients.pop(c.id, None)
            self._count_open(-1)
            _log.info(
                "%s: %.2f s open, %.2f s of audio, %d segment(s), %s", c.name,
                time.monotonic() - c.opened, c.samples / self.sample_rate, c.sent_finals,
                c.outcome,
            )  # fmt: skip

    async def _receive(self, c: _Client) -> None:
        """Read messages until the input ends (or the client goes: ConnectionClosed)."""
        while not c.finished:
            try:
                message = await asyncio.wait_for(c.ws.recv(), self.opts.idle_timeout or None)
            except asyncio.TimeoutError:
                self.counters.idle += 1
                c.outcome = f"idle for {self.opts.idle_timeout:g} s: input ended"
                self._end_input(c, 1000, c.outcome)
                return
            if isinstance(message, bytes):
                self._take_audio(c, message)
            elif c.protocol == "sherpa":
                if message != SHERPA_END:
                    raise ProtocolError(
                        f"unexpected text message {message[:40]!r}: send float32 samples as "
                        f"binary messages and {SHERPA_END!r} at the end"
                    )
                self._end_input(c)
            else:
                signal_ = parse_wenet_text(message)
                if isinstance(signal_, WenetStart):
                    if c.wenet is not None:
                        raise ProtocolError("a second start signal in one session")
                    if signal_.hotwords:
                        try:
                            graph = self.rec.hotwords_graph(signal_.hotwords, f"{c.name}: hotwords")
                        except ValueError as e:
                            raise ProtocolError(str(e)) from None
                        c.stream = self.rec.create_stream(graph)  # it has had no audio yet
                    c.wenet = signal_
                    c.outbox.put_nowait(WENET_READY)
                elif c.wenet is None:
                    raise ProtocolError("end signal before the start signal", 1008)
                else:
                    self._end_input(c)

    def _take_audio(self, c: _Client, data: bytes) -> None:
        if c.protocol == "wenet":
            if c.wenet is None:
                raise ProtocolError("Start signal is expected before binary data", 1008)
            samples = decode_int16(data)
        else:
            samples = decode_float32(data)
        if samples.size:
            c.inbox.append(samples)
            c.samples += samples.size
            assert self._wake is not None
            self._wake.set()

    def _end_input(self, c: _Client, code: int = 1000, reason: str = "") -> None:
        if not c.finished:
            c.finished = True
            c.close_code, c.close_reason = code, close_reason(reason)
            assert self._wake is not None
            self._wake.set()

    async def _send_loop(self, c: _Client) -> None:
        while True:
            message = await c.outbox.get()
            if message is None:
                break
            await c.ws.send(message)
        await c.ws.close(c.close_code, c.close_reason)

    async def _decode_loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        more = False
        while True:
            if not more:
                await self._wake.wait()
                if self.opts.max_wait_ms > 0:
                    await asyncio.sleep(self.opts.max_wait_ms / 1000)
            self._wake.clear()
            clients = list(self._clients.values())
            try:
                results, more = await loop.run_in_executor(self._pool, self._step, clients)
            except Exception:  # a bug, not a client's fault: keep serving the others
                _log.exception("decode step failed")
                results, more = [], False
            for c, messages, eof in results:
                if c.gone:
                    continue
                for m in messages:
                    c.outbox.put_nowait(m)
                if eof:
                    if c.protocol == "sherpa":
                        c.outbox.put_nowait(SHERPA_DONE)
                    c.outbox.put_nowait(None)

    async def _log_loop(self) -> None:
        if not self.opts.log_interval:
            return
        last = dataclasses.replace(self.counters)
        while True:
            await asyncio.sleep(self.opts.log_interval)
            now = self.counters
            steps = now.steps - last.steps
            if steps or self._clients:
                _log.info(
                    "%s%d open stream(s); %d steps, mean batch %.1f, %.1f ms of decoding a step, "
                    "decode thread busy %.0f %%; %s", self._who, len(self._clients), steps,
                    (now.batched - last.batched) / max(steps, 1),
                    1000 * (now.decode_s - last.decode_s) / max(steps, 1),
                    100 * (now.decode_s - last.decode_s) / self.opts.log_interval, self._totals(),
                )  # fmt: skip
            last = dataclasses.replace(now)

    def _totals(self) -> str:
        n = self.counters
        return (
            f"{n.connections} connection(s) in all, {n.refused} refused, {n.errors} protocol "
            f"error(s), {n.vanished} left mid-stream, {n.idle} idle"
        )

    # --- the decode thread -----------------------------------------------------------------

    def _warm_up(self) -> None:
        """One chunk through the model so that the first client does not wait for it."""
        s = self.rec.create_stream()
        s.accept_waveform(self.sample_rate, np.zeros(self.sample_rate, np.float32))
        s.input_finished()
        self.rec.decode_until_done([s])

    def _step(self, clients: List[_Client]) -> Tuple[List[Tuple[_Client, List[str], bool]], bool]:
        """Take queued audio, decode one chunk of up to max_batch_size ready streams; return
        each touched client's messages and whether they end its stream, and whether more
        chunks are ready."""
        live = [c for c in clients if not c.gone and not c.eof]
        for c in live:
            finished = c.finished  # read before draining: no audio follows it
            while c.inbox:
                c.stream.accept_waveform(self.sample_rate, c.inbox.popleft())
            if finished:
                c.stream.input_finished()
        ready = sorted((c for c in live if c.stream.is_ready), key=lambda c: c.last_step)
        batch = ready[: self.opts.max_batch_size]
        self._step_index += 1
        if batch:
            self._decode(batch)
            self.counters.steps += 1
            self.counters.batched += len(batch)
        # A stream whose input ended has at most two chunks left: decode them now, so that its
        # final result does not wait for further steps.
        ending = [c for c in live if c.finished and c.stream.is_ready]
        while ending:
            self._decode(ending)
            ending = [c for c in ending if c.stream.is_ready]
        touched = [c for c in live if c.last_step == self._step_index or c.stream.done]
        results = [(c, *self._messages(c)) for c in touched]
        more = any(c.stream.is_ready for c in ready)
        return results, more

    def _decode(self, clients: List[_Client]) -> None:
        """One batched chunk of these clients' streams, timed, marked as this step's."""
        start = time.perf_counter()
        self.rec.decode_streams([c.stream for c in clients])
        self.counters.decode_s += time.perf_counter() - start
        for c in clients:
            c.last_step = self._step_index

    def _messages(self, c: _Client) -> Tuple[List[str], bool]:
        s = c.stream
        n = s.num_final_results
        finals = s.final_results[c.sent_finals :] if n > c.sent_finals else []
        messages: List[str] = []
        eof = s.done
        if c.protocol == "sherpa":
            for i, r in enumerate(finals):
                last = eof and i == len(finals) - 1
                messages.append(sherpa_result(r, c.sent_finals + i, True, last))
            c.sent_finals = n
            if eof and not finals:
                messages.append(sherpa_result(empty_result(s.segment_start), n, True, True))
            elif not eof:
                messages.append(sherpa_result(s.partial_result(False), n, False, False))
        else:
            assert c.wenet is not None, "no audio is taken before the start signal"
            for r in finals:
                messages.append(wenet_final(r))
                c.sent_finals += 1
                if not c.wenet.continuous_decoding:
                    eof = True  # WeNet ends a session at its first endpoint unless continuous
                    break
            if s.done and not finals:
                messages.append(wenet_final(empty_result(s.segment_start)))
            elif not eof and s.hypothesis.num_tokens:
                messages.append(wenet_partial(s.partial_result(False)))
            if eof:
                messages.append(WENET_SPEECH_END)
        c.eof = eof
        return messages, eof


def _typed(response: Any, mime: str) -> Any:
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = mime
    return response


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


def serve(recognizer: StreamingRecognizer, options: ServerOptions, threads: int = 1) -> int:
    """Serve until SIGTERM or Ctrl-C; returns the exit code.

    With ``options.workers`` > 1 the process forks that many workers after the model is loaded
    (they share its memory) and before any inference; they accept connections from one
    listening socket, each running its own event loop and decode thread: one Python process
    runs one decode thread's Python at a time (the GIL), so on a machine with several cores
    workers serve more streams. This process forwards SIGTERM and SIGINT to them and waits.
    """
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per connection is ours
    if options.workers == 1:
        torch.set_num_threads(threads)
        asyncio.run(Server(recognizer, options).run())
        return 0
    sock = listen(options.host, options.port)
    open_count = multiprocessing.get_context("fork").Value("i", 0)
    children = []
    for i in range(options.workers):
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                torch.set_num_threads(threads)
                asyncio.run(Server(recognizer, options, sock, i, open_count).run())
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    sock.close()
    forward = lambda sig, _frame: [_kill(pid, sig) for pid in children]  # noqa: E731
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code:
            _log.error("worker %d exited with %d", children.index(pid), code)
            worst = max(worst, 1)
            for other in children:
                _kill(other, signal.SIGTERM)
    return worst


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
