"""Accepting connections from the listening socket the workers share, the least loaded first.

Forked workers read one listening socket; left to the kernel, a connection goes to whichever
worker's event loop wakes first, which says nothing about how many streams each already
decodes: one core can fall behind real time while the other idles. Here each worker accepts
itself (:class:`Acceptor`) and, while it holds more connections than the least loaded of the
other workers that take connections (the shared :class:`~wenet_lite.serve.workers.Board`,
where each acceptor marks its worker accepting from its start to its close, plus the
connections it accepted that are not counted there yet), it stops reading the socket for a
moment so that one of them takes the connection; after :data:`PATIENCE_S` it takes the
connection itself (the other may be stuck in a long step), so nobody waits long. One worker
never waits.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl as ssl_module
from typing import Callable, Optional, Set

from wenet_lite.serve.workers import Board

__all__ = ["Acceptor", "PATIENCE_S"]

_log = logging.getLogger("wenet_lite.serve")

PATIENCE_S = 0.05
"""how long a more loaded worker leaves a waiting connection to the others"""
_RETRY_S = 0.005
"""a waiting worker looks again this often"""
_PER_WAKE = 64
"""connections accepted in one go (as asyncio's own server does, up to its backlog)"""
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_RESOURCE_PAUSE_S = 1.0


class Acceptor:
    """Accepts ``sock``'s connections into ``factory``'s protocols on the running loop,
    leaving them to a less loaded worker (module doc) when there is one."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        board: Board,
        worker: int,
        ssl: Optional[ssl_module.SSLContext] = None,
        handshake_timeout: Optional[float] = None,
    ) -> None:
        self._sock, self._factory, self._board, self._worker = sock, factory, board, worker
        self._ssl, self._handshake_timeout = ssl, handshake_timeout
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False
        self._waiting_since: Optional[float] = None
        self._retry: Optional[asyncio.TimerHandle] = None
        self._starting: Set[asyncio.Task] = set()
        """accepted connections whose protocol is not made yet (not on the board)"""
        self.deferred = 0
        """times this worker left a waiting connection to the others"""

    def start(self) -> None:
        self._read(True)
        self._board.publish(self._worker, {"accepting": 1})

    def close(self) -> None:
        """No new connections (the open ones go on): this process's copy of the listening
        socket is closed, as asyncio's server closes its own."""
        self._read(False)
        self._closed = True
        self._board.publish(self._worker, {"accepting": 0})
        if self._retry is not None:
            self._retry.cancel()
        self._sock.close()

    def _read(self, on: bool) -> None:
        if on and not self._reading and not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._ready)
        elif not on and self._reading:
            self._loop.remove_reader(self._sock.fileno())
        self._reading = on and not self._closed

    def _pause(self, seconds: float) -> None:
        self._read(False)
        self._retry = self._loop.call_later(seconds, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self._read(True)

    def _more_loaded(self) -> bool:
        """Whether another worker that takes connections holds fewer than this one."""
        mine = self._board.open_of(self._worker) + len(self._starting)
        least = self._board.least_open(besides=self._worker)
        return least is not None and least < mine

    def _ready(self) -> None:
        if self._more_loaded():
            now = self._loop.time()
            if self._waiting_since is None or now - self._waiting_since > 10 * PATIENCE_S:
                self._waiting_since = now  # (a wait long past: another worker took that one)
            if now - self._waiting_since < PATIENCE_S:
                self.deferred += 1
                self._pause(_RETRY_S)
                return
        for _ in range(_PER_WAKE):
            try:
                conn, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                self._waiting_since = None
                break  # another worker took it, or nothing more is waiting
            except OSError as e:
                if e.errno in _OUT_OF_RESOURCES:
                    _log.error("cannot accept a connection (%s): pausing %.0f s", e.strerror,
                               _RESOURCE_PAUSE_S)  # fmt: skip
                    self._pause(_RESOURCE_PAUSE_S)
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client left before we took it
                raise  # as asyncio's own server does: the loop logs it, reading goes on
            self._waiting_since = None
            conn.setblocking(False)
            task = self._loop.create_task(self._connect(conn))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)
            if self._more_loaded():
                break  # the next one may go to another worker

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._factory, conn, ssl=self._ssl,
                ssl_handshake_timeout=self._handshake_timeout if self._ssl else None,
            )  # fmt: skip
        except (OSError, ssl_module.SSLError, asyncio.TimeoutError) as e:
            conn.close()  # a failed TLS handshake or a client gone: that connection only
            _log.debug("a connection failed before it opened: %s", e)
