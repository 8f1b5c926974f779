"""The server's decode thread: each step moves queued audio into the streams that need it (at
most ``FEED_S`` seconds each), decodes one chunk of up to ``max_batch_size`` ready streams in ONE
batched call, the longest-waiting first, and renders each touched stream's results as its
protocol's messages. A failure in one stream marks that connection only; a failed batch is
retried stream by stream. It owns every stream; the event loop (hub.py) only queues audio
and sends what a step returns.

The batch window: a batched step costs far less per stream than a small one (the demo model's
chunk of 16 streams under a third of 16 single ones), but real-time streams become ready one
by one, so a decoder that steps as soon as anything is ready decodes a few streams at a time.
With ``batch_window_ms`` a ready stream may wait up to that long for others to become ready
and share its step: a step is put off while fewer than half the live streams are ready, none
of them has its input finished (a final result is not kept waiting) or a second of audio
queued behind its chunk (a stream sent faster than real time, an upload: waiting would only
slow it), and the batch is not full. Under light load (one stream, or all of them ready at
once) nothing waits.
"""

from __future__ import annotations

import logging
import time
from typing import Any, List, Tuple

import numpy as np

from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.serve.connection import Client, Counters
from wenet_lite.serve.protocols import Boundary
from wenet_lite.serve.workers import Board

__all__ = ["DecodeThread", "FEED_S"]

_log = logging.getLogger("wenet_lite.serve.server")

FEED_S = 1.0
"""seconds of a connection's queued audio moved into its stream per step, at most"""


class DecodeThread:
    """The decode thread's work for one server (one worker)."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        max_batch_size: int,
        counters: Counters,
        board: Board,
        worker: int,
        who: str = "",
        batch_window_ms: float = 0.0,
    ) -> None:
        self.rec = recognizer
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_ms / 1000
        self.counters, self.board, self.worker, self.who = counters, board, worker, who
        self.sample_rate = recognizer.cfg.features.sample_rate
        self.feed_limit = int(FEED_S * self.sample_rate)
        self.step_index = 0

    def warm_up(self) -> None:
        """One chunk through the model so that the first client does not wait for it."""
        s = self.rec.create_stream()
        s.accept_waveform(self.sample_rate, np.zeros(self.sample_rate, np.float32))
        s.input_finished()
        self.rec.decode_until_done([s])

    def step(
        self, clients: List[Client]
    ) -> Tuple[List[Tuple[Client, List[str], bool]], bool, float]:
        """Feed queued audio, decode one chunk of up to max_batch_size ready streams; return
        each touched client's messages and whether they end its stream, whether more work
        is waiting, and how many seconds to wait before the next step when this one was put
        off for the batch window (module docstring; nothing decoded then, only the results of
        streams already done written). A failure in one client's stream marks that client
        only (``failure``)."""
        streams = [c for c in clients if c.started and not (c.gone or c.eof or c.failure)]
        for c in streams:
            self._guard(c, "taking its audio", self._feed, c)
        live = [c for c in streams if c.failure is None]
        ready = sorted((c for c in live if c.stream.is_ready), key=lambda c: c.last_step)
        wait = self._batch_wait(live, ready)
        self.step_index += 1
        if not wait:
            self._decode(ready[: self.max_batch_size])
            # A stream whose input ended (or was committed) has at most a few chunks left:
            # decode them now, so that its final result does not wait for further steps.
            ending = [c for c in live if c.stream.fbank.finished and c.stream.is_ready]
            while ending:
                self._decode(ending)
                ending = [c for c in ending if c.failure is None and c.stream.is_ready]
        touched = [c for c in live if c.last_step == self.step_index or c.stream.done]
        results = []
        for c in touched:
            messages = self._guard(c, "writing its results", self._messages, c)
            results.append((c, *(messages or ([], True))))
        results += [(c, [], True) for c in streams if c.failure is not None and c not in touched]
        more = any(c.failure is None and (c.stream.is_ready or c.inbox) for c in live)
        return results, more, wait

    def _batch_wait(self, live: List[Client], ready: List[Client]) -> float:
        """Seconds this step should be put off so that more streams join its batch (0: step
        now): see the module docstring."""
        now = time.monotonic()
        for c in ready:
            if c.ready_since is None:
                c.ready_since = now
        if (self.batch_window_s <= 0 or not ready or len(ready) >= self.max_batch_size
                or 2 * len(ready) >= len(live)
                or any(c.finished or c.stream.fbank.finished or c.queued >= self.feed_limit
                       for c in ready)):  # fmt: skip
            return 0.0
        oldest = min(c.ready_since for c in ready if c.ready_since is not None)
        return max(0.0, oldest + self.batch_window_s - now)

    def _guard(self, c: Client, what: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``; an exception marks ``c`` failed (logged with its traceback)."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - whatever it is, it is this connection's
            c.failure = f"server error while {what}: {type(e).__name__}"
            _log.exception("%s: %s; closing it", c.name, c.failure)
            return None

    def _feed(self, c: Client) -> None:
        """Move queued audio into a stream that cannot decode a chunk yet, at most ``_FEED_S``
        seconds a step (``FEED_S``): one client's backlog never makes a step long. A
        :class:`Boundary` in the queue changes the stream there (segmented protocols)."""
        finished = c.finished  # read before draining: no audio follows it
        budget = self.feed_limit
        while c.inbox and budget > 0 and not c.stream.is_ready:
            piece = c.inbox[0]
            if isinstance(piece, Boundary):
                if not self._at_boundary(c, piece):
                    break  # the stream is decoded to its end first
                c.inbox.popleft()
                continue
            c.inbox.popleft()
            if piece.size > budget:
                c.inbox.appendleft(piece[budget:])
                piece = piece[:budget]
            c.stream.accept_waveform(c.rate or self.sample_rate, piece)
            c.taken += piece.size
            budget -= piece.size
        if finished and not c.inbox:
            c.stream.input_finished()

    def _at_boundary(self, c: Client, b: Boundary) -> bool:
        """Act on ``b`` at the head of ``c``'s queue; False while a committed stream is still
        being decoded (its results go out before the next stream starts)."""
        if b.kind == "commit" and not c.stream.done:
            c.stream.input_finished()
            return False
        if b.graph is not None:  # a session's new hotwords
            if not b.graph.done():
                return False  # its audio waits for them
            if b.graph.exception() is None:
                c.graph = b.graph.result()
        if b.kind != "settings" or b.now:
            c.rate = b.rate
            c.stream = self.rec.create_stream(c.graph, b.vad)
            c.cursor = StreamCursor(c.stream)
            c.protocol.stream_replaced(b)
        return True

    def _decode(self, clients: List[Client]) -> None:
        """One batched chunk of these clients' streams, timed, marked as this step's. If the
        batch fails, each stream is decoded alone, and those that fail again are marked."""
        if not clients:
            return
        start = time.perf_counter()
        self.board.publish(self.worker, {"busy_since": time.time()})
        try:
            self.rec.decode_streams([c.stream for c in clients])
            self.counters.steps += 1
            self.counters.batched += len(clients)
        except Exception:  # noqa: BLE001 - find the stream(s) at fault, keep the others
            self.counters.step_failures += 1
            self.board.publish(self.worker, {"failed_at": time.time()})
            _log.exception("%sa step of %d stream(s) failed; decoding each alone", self.who,
                           len(clients))  # fmt: skip
            for c in clients:
                self._guard(c, "decoding", self.rec.decode_streams, [c.stream])
        finally:
            self.counters.decode_s += time.perf_counter() - start
            self.board.publish(self.worker, {"busy_since": 0})
        for c in clients:
            c.last_step = self.step_index
            c.ready_since = None

    def _messages(self, c: Client) -> Tuple[List[str], bool]:
        messages, eof = c.protocol.events(c.stream, c.cursor)
        if c.protocol.segmented:  # its streams end at boundaries; the session with its input
            eof = eof and c.finished and not c.inbox
        c.eof = eof
        return messages, eof
