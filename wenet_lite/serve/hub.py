"""The streams of one server: every protocol opens, feeds, ends and closes its streams here.

A :class:`StreamHub` owns the open streams (:class:`~wenet_lite.serve.connection.Client`) and
the decode loop over them: the event loop queues a stream's samples (or a segmented protocol's
boundaries) and wakes the loop; the decode thread (decode_thread.py) moves queued audio into the
streams, decodes one chunk of every ready stream in one batched call and renders each stream's
results as its protocol's messages, which the hub puts in the stream's outbox. Whoever opened a
stream drains that outbox: the websocket handler sends it (server.py), an OpenAI API request
reads it (openai_api.py). The hub knows a stream's far end only as a :class:`Peer` (its address,
the bytes still unsent to it, how to drop it): it never asks what kind of peer it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.search.context import ContextGraph
from wenet_lite.serve.connection import Client, Counters, Peer
from wenet_lite.serve.decode_thread import DecodeThread
from wenet_lite.serve.protocols import Boundary, Protocol, close_reason
from wenet_lite.serve.workers import Board

__all__ = ["StreamHub"]

_log = logging.getLogger("wenet_lite.serve")


class StreamHub:
    """Open streams of one recogniser, decoded together (see the module's docstring).

    ``queue_limit``: samples a stream may have queued before its producer waits (backpressure);
    ``max_unsent``: characters of results and bytes of a peer's send buffer beyond which the
    peer is dropped for not reading; ``max_wait_ms``: how long a step waits for more audio;
    ``batch_window_ms``: how long a ready stream may wait for others to share its step
    (decode_thread.py)."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        counters: Counters,
        board: Board,
        worker: int,
        who: str,
        max_batch_size: int,
        queue_limit: int,
        max_unsent: int,
        max_wait_ms: float = 0.0,
        name_prefix: str = "",
        batch_window_ms: float = 0.0,
    ) -> None:
        self.rec, self.counters = recognizer, counters
        self.queue_limit, self.max_unsent, self.max_wait_ms = queue_limit, max_unsent, max_wait_ms
        self.streams: Dict[str, Client] = {}
        self.thread = DecodeThread(recognizer, max_batch_size, counters, board, worker, who,
                                   batch_window_ms)  # fmt: skip
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
        self.hotwords = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hotwords")
        self.who, self._prefix = who, name_prefix
        self._wake = asyncio.Event()
        self.sample_rate = recognizer.cfg.features.sample_rate

    # --- a stream's life ---------------------------------------------------------------------

    def open(
        self,
        protocol: Protocol,
        peer: Peer,
        rate: Optional[int] = None,
        graph: Optional[ContextGraph] = None,
    ) -> Client:
        """A new stream for ``protocol``'s audio from ``peer`` at ``rate`` Hz (None: the
        model's), with ``graph``'s hotwords."""
        self.counters.connections += 1
        c = Client(f"{self._prefix}{self.counters.connections}", protocol, peer,
                   self.rec.create_stream(graph, protocol.stream_vad()))  # fmt: skip
        c.rate = rate
        self.streams[c.id] = c
        return c

    def feed(self, c: Client, samples: np.ndarray) -> int:
        """Queue samples (the producer checks the room first); the count queued."""
        if samples.size and not c.gone:
            c.inbox.append(samples)
            c.received += samples.size
            self._wake.set()
        return samples.size

    async def feed_when_room(self, c: Client, samples: np.ndarray) -> None:
        """Queue samples, first waiting while the stream has ``queue_limit`` queued."""
        while c.queued >= self.queue_limit and not c.gone:
            c.room.clear()
            await c.room.wait()
        self.feed(c, samples)

    def mark(self, c: Client, boundary: Boundary) -> None:
        """Queue a segmented protocol's boundary after the audio queued so far."""
        c.inbox.append(boundary)
        self._wake.set()

    def end(self, c: Client, code: int = 1000, reason: str = "") -> None:
        """No more audio: the stream is decoded to its end, then closed with ``code``. A
        stream whose protocol never started closes at once."""
        if c.finished:
            return
        c.finished = True
        c.room.set()
        if not c.started:  # nothing to decode
            if c.outcome == "open":
                c.outcome = "ended before the start signal"
            c.eof = True
            self.close(c, code, reason)
            return
        c.close_code, c.close_reason = code, close_reason(reason)
        self._wake.set()

    def abort(self, c: Client) -> None:
        """The audio cannot be read to its end: the stream is dropped, its outbox closed."""
        c.gone = True
        c.room.set()
        c.outbox.put(None)

    def close(self, c: Client, code: int, reason: str) -> None:
        """Close ``c`` after what it was sent (a protocol that reports failures as a message
        gets the reason as one)."""
        failed = c.protocol.failed(reason) if code not in (1000, 1001) else None
        if failed is not None:
            self.send(c, failed)
        c.close_code, c.close_reason = code, close_reason(reason)
        c.outbox.put(None)
        c.gone = True
        c.room.set()

    def done(self, c: Client, outcome: str, audio_s: Optional[float] = None) -> None:
        """The stream is over (answered, closed, or its peer went): forgotten, logged."""
        c.gone = True
        c.room.set()
        if c.outcome == "open":
            c.outcome = outcome
        self.streams.pop(c.id, None)
        seconds = audio_s if audio_s is not None else c.received / (c.rate or self.sample_rate)
        _log.info("%s: %.2f s open, %.2f s of audio, %d segment(s), %s", c.name,
                  time.monotonic() - c.opened, seconds, c.cursor.taken, c.outcome)  # fmt: skip

    # --- messages ----------------------------------------------------------------------------

    def send(self, c: Client, message: str, result: bool = False) -> None:
        c.outbox.put(message, result)
        self.check_unsent(c)

    def check_unsent(self, c: Client) -> None:
        """Drop a peer that lets unsent results and bytes pile up past ``max_unsent``."""
        unsent = c.outbox.chars + c.peer.unsent()
        if unsent <= self.max_unsent or c.outcome.startswith("not reading"):
            return
        self.counters.unread += 1
        c.outcome = f"not reading: {unsent} bytes unsent"
        c.close_code, c.close_reason = 1008, close_reason(c.outcome)
        c.outbox.put(None)
        c.gone = True
        c.room.set()
        c.peer.abort(c.close_code, c.close_reason)

    def graph_later(
        self, c: Client, lines: Sequence[str], label: str, on_error: Callable[[str], None]
    ) -> concurrent.futures.Future:
        """A hotword graph built in the hotwords thread (None for no lines); a bad line calls
        ``on_error`` on the event loop, and the decode loop is woken when it is built."""
        if not lines:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(None)
            return done
        loop = asyncio.get_running_loop()
        future = self.hotwords.submit(self.rec.hotwords_graph, tuple(lines), label)

        def built(f: concurrent.futures.Future) -> None:
            error = f.exception()
            if error is not None and not c.gone:
                loop.call_soon_threadsafe(on_error, str(error))
            loop.call_soon_threadsafe(self._wake.set)

        future.add_done_callback(built)
        return future

    async def graph_now(self, lines: Sequence[str], label: str) -> Optional[ContextGraph]:
        """A hotword graph built off the event loop (a long list takes a while); ValueError
        for a bad line."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.hotwords, self.rec.hotwords_graph, tuple(lines), label
        )

    # --- the decode loop ---------------------------------------------------------------------

    async def warm_up(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.pool, self.thread.warm_up)

    async def decode_loop(self) -> None:
        """Forever: wait for work, run one step in the decode thread, deliver its results."""
        loop = asyncio.get_running_loop()
        more = False
        while True:
            if not more:
                await self._wake.wait()
                if self.max_wait_ms > 0:
                    await asyncio.sleep(self.max_wait_ms / 1000)
            self._wake.clear()
            clients = list(self.streams.values())
            try:
                results, more, wait = await loop.run_in_executor(
                    self.pool, self.thread.step, clients
                )
            except Exception:  # a bug outside any one stream: keep serving
                _log.exception("%sdecode step failed", self.who)
                results, more, wait = [], False, 0.0
            for c in clients:
                if not c.room.is_set() and c.queued < self.queue_limit:
                    c.room.set()
            for c, messages, eof in results:
                self._deliver(c, messages, eof)
            if wait > 0:  # put off for the batch window: more streams will be ready then
                await asyncio.sleep(wait)

    def _deliver(self, c: Client, messages: List[str], eof: bool) -> None:
        if c.gone:
            return
        if c.failure is not None:
            self.counters.failed += 1
            c.outcome = c.failure
            self.close(c, 1011, c.failure)
            return
        for m in messages:
            self.send(c, m, result=True)
        if eof and not c.gone:
            c.outbox.put(None)

    def watch(self) -> None:
        """Check every open stream's unsent bytes (pongs to a peer that never reads are written
        without the hub's knowing)."""
        for c in list(self.streams.values()):
            if not c.gone:
                self.check_unsent(c)

    async def finish(self, grace_s: float) -> None:
        """Shutdown: end every stream's input (1001), wait up to ``grace_s`` for their final
        results, then drop the peers still open."""
        for c in list(self.streams.values()):
            self.end(c, 1001, "server shutting down")
        deadline = time.monotonic() + grace_s
        while self.streams and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self.streams.values()):
            _log.warning("%s: not finished %g s after shutdown began: dropped", c.name, grace_s)
            c.peer.abort(1001, "server shutting down")

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
        self.hotwords.shutdown(wait=False, cancel_futures=True)

    @property
    def open_count(self) -> int:
        return len(self.streams)
