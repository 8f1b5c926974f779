"""A websocket connection's session: its protocol adapter opened over a stream of the hub, the
messages it receives turned into audio, boundaries and replies, its results sent as they come.

The idle clock: a client may fall ``idle_timeout`` seconds behind real time in the audio it
sends (credit for audio sent ahead is capped at that; paused reading does not count); one that
never started its protocol is closed. Backpressure: at ``queue_limit`` samples waiting to be
decoded the session stops reading the socket until the decoder catches up (websockets' own
buffer fills, then TCP pushes back on the sender).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Dict, Optional, Tuple, Type

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.serve.connection import Client, Counters
from wenet_lite.serve.gate import WEBSOCKET_PATHS
from wenet_lite.serve.hub import StreamHub
from wenet_lite.serve.protocols import Actions, Protocol, ProtocolError, Served, Start, close_reason

__all__ = ["WebSocketPeer", "WebSocketSessions"]

_log = logging.getLogger("wenet_lite.serve")


class WebSocketPeer:
    """A websocket connection as a stream's :class:`~wenet_lite.serve.connection.Peer`."""

    def __init__(self, ws: Connection) -> None:
        self.ws = ws

    @property
    def address(self) -> Optional[Tuple[str, int]]:
        return self.ws.remote_address

    def unsent(self) -> int:
        transport = self.ws.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def abort(self, code: int, reason: str) -> None:
        asyncio.get_running_loop().create_task(_abort(self.ws, code, reason))


class WebSocketSessions:
    """The websocket side of a server: one :meth:`run` per connection."""

    def __init__(
        self, hub: StreamHub, rec: StreamingRecognizer, counters: Counters,
        adapters: Dict[str, Type[Protocol]], served: Served, idle_timeout: float,
    ) -> None:  # fmt: skip
        self.hub, self.rec, self.counters = hub, rec, counters
        self.adapters, self.served, self.idle = adapters, served, idle_timeout
        self.sample_rate = rec.cfg.features.sample_rate

    def serves(self, path: str) -> bool:
        """Whether a websocket endpoint answers at ``path``."""
        return WEBSOCKET_PATHS.get(path) in self.adapters

    async def run(self, ws: Connection) -> None:
        """The session of an open websocket, until its last result is sent or it goes."""
        assert ws.request is not None, "handed over after its handshake"
        kind = self.adapters[WEBSOCKET_PATHS[ws.request.path.split("?", 1)[0]]]
        protocol = kind.open(self.served)
        c = self.hub.open(protocol, WebSocketPeer(ws), protocol.input_rate)
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

    async def _receive(self, c: Client, ws: Connection) -> None:
        """Read messages until the input ends (or the client goes: ConnectionClosed)."""
        idle = self.idle
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
                self._idle(c)
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

    def _idle(self, c: Client) -> None:
        self.counters.idle += 1
        if c.started:
            c.outcome = f"idle for {self.idle:g} s: input ended"
            self.hub.end(c, 1000, c.outcome)
        else:
            c.outcome = f"no start signal within {self.idle:g} s"
            self.hub.end(c, 1008, c.outcome)

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

    async def _send_loop(self, c: Client, ws: Connection) -> None:
        while True:
            message = await c.outbox.get()
            if message is None:
                break
            await ws.send(message)
        await ws.close(c.close_code, c.close_reason)


async def _abort(ws: Connection, code: int, reason: str) -> None:
    """Close a connection that does not read: the close frame may never get through, so the
    socket is dropped after a second."""
    try:
        await asyncio.wait_for(ws.close(code, close_reason(reason)), 1.0)
    except Exception:  # noqa: BLE001 - timed out or already closed: drop it either way
        pass
    if ws.transport is not None:
        ws.transport.abort()
