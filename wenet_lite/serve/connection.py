"""A stream's state, shared by the event loop and the decode thread: its stream and inbox
(:class:`Client`), its outgoing messages (:class:`Outbox`), the far end it serves
(:class:`Peer`: a websocket, or an HTTP request), and the server's counters.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
import typing
from dataclasses import dataclass
from typing import Any, Deque, Optional, Tuple, Union

import numpy as np

from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.streaming import Stream
from wenet_lite.serve.protocols import Boundary, Partial, Protocol
from wenet_lite.serve.workers import peer_host

__all__ = ["COUNTERS", "Client", "Counters", "Outbox", "Peer"]


class Peer(typing.Protocol):
    """The far end of a stream as the hub sees it, whatever carries it."""

    @property
    def address(self) -> Optional[Tuple[str, int]]:
        """(host, port) of the client, when known."""

    def unsent(self) -> int:
        """Bytes written to the peer's socket and not yet sent (0 where nothing is buffered)."""

    def abort(self, code: int, reason: str) -> None:
        """Drop the peer (close with ``code`` where it can take a close, then the socket)."""


class Outbox:
    """A connection's messages waiting for its send loop, in order; ``None`` closes. A partial
    result still waiting when the stream's next result comes is replaced by it, so a client
    that reads late (or sends audio far faster than real time and reads at the end) gets every
    final and the latest partial, and what waits for it grows with its finals only."""

    def __init__(self) -> None:
        self._items: Deque[Optional[str]] = collections.deque()
        self._ready = asyncio.Event()
        self.chars = 0
        """characters waiting"""

    def put(self, message: Optional[str], result: bool = False) -> None:
        """Queue ``message``; a ``result`` (a protocol's partial or final) first drops a
        :class:`Partial` waiting last."""
        if result and self._items and isinstance(self._items[-1], Partial):
            self.chars -= len(self._items.pop())
        self._items.append(message)
        self.chars += len(message) if message is not None else 0
        self._ready.set()

    async def get(self) -> Optional[str]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        message = self._items.popleft()
        self.chars -= len(message) if message is not None else 0
        return message


class Client:
    """One connection: its stream, and what passes between the event loop and the decode
    thread (the loop writes ``inbox``, ``received``, ``finished`` and ``gone``; the thread owns
    ``stream`` and writes ``taken``, ``failure`` and ``eof``)."""

    def __init__(self, cid: str, protocol: Protocol, peer: Peer, stream: Stream) -> None:
        self.id, self.protocol, self.peer, self.stream = cid, protocol, peer, stream
        self.host = peer_host(peer.address)
        self.inbox: Deque[Union[np.ndarray, Boundary]] = collections.deque()
        self.received = 0  # samples received
        self.taken = 0  # samples moved into the stream
        self.room = asyncio.Event()  # set: the loop may read more audio
        self.room.set()
        self.finished = False  # no more audio will come
        self.gone = False  # the connection is over: the decode thread forgets the stream
        self.eof = False  # the last result is written
        self.failure: Optional[str] = None  # (decode thread) why the stream was dropped
        self.outbox = Outbox()
        self.cursor = StreamCursor(stream)  # (decode thread) the finals sent
        self.last_step = -1  # the step that last decoded this stream (fairness)
        self.ready_since: Optional[float] = None  # (decode thread) ready, not yet decoded, since
        self.opened = time.monotonic()
        self.outcome = "open"
        self.close_code, self.close_reason = 1000, ""
        self.rate: Optional[int] = None  # its audio's rate, when not the model's
        self.graph: Any = None  # (segmented protocols) hotwords of its next streams

    @property
    def name(self) -> str:
        address = self.peer.address
        where = f"{address[0]}:{address[1]}" if address else "?"
        return f"connection {self.id} ({self.protocol.name}, {where})"

    @property
    def started(self) -> bool:
        """Whether its protocol started (WeNet's needs the start signal)."""
        return self.protocol.started

    @property
    def queued(self) -> int:
        """Samples received and not yet moved into the stream."""
        return self.received - self.taken


@dataclass
class Counters:
    connections: int = 0
    refused: int = 0
    errors: int = 0
    """protocol errors: a client's fault"""
    failed: int = 0
    """connections closed for an exception of the server's while serving them"""
    vanished: int = 0
    idle: int = 0
    unread: int = 0
    """clients closed for not reading their results or pongs"""
    throttled: int = 0
    """times reading a connection paused for its queued audio"""
    steps: int = 0
    batched: int = 0
    step_failures: int = 0
    decode_s: float = 0.0


COUNTERS = tuple(f.name for f in dataclasses.fields(Counters))
