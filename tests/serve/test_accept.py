"""Workers accept by load (serve/accept.py): a worker holding more connections than another
worker that takes connections leaves a waiting connection to it for a moment, then takes it
itself; with no other such worker (none running, or it warms up or shuts down), or as few
connections as the others, it takes it at once. A real listening socket and a real board;
the other worker is the board's row."""

from __future__ import annotations

import asyncio
import socket
import time

from wenet_lite.serve.accept import PATIENCE_S, Acceptor
from wenet_lite.serve.connection import COUNTERS
from wenet_lite.serve.server import listen
from wenet_lite.serve.workers import Board


class _Opened(asyncio.Protocol):
    def __init__(self, times: list) -> None:
        self.times = times

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.times.append(time.monotonic())
        transport.close()


def _accept_one(board: Board) -> tuple:
    """Seconds from a client's connect to worker 0's protocol, and its deferrals."""

    async def run() -> tuple:
        sock = listen("127.0.0.1", 0)
        times: list = []
        acceptor = Acceptor(sock, lambda: _Opened(times), board, 0)
        acceptor.start()
        client = socket.create_connection(sock.getsockname())
        start = time.monotonic()
        try:
            for _ in range(200):
                if times:
                    break
                await asyncio.sleep(0.002)
        finally:
            acceptor.close()
            client.close()
        assert times, "the connection was never accepted"
        return times[0] - start, acceptor.deferred

    return asyncio.run(run())


def _board(mine: int, other: int, other_accepting: bool, other_alive: bool = True) -> Board:
    board = Board(2, COUNTERS)
    board.publish(0, {"alive": 1})  # its acceptor marks it accepting
    board.publish(1, {"alive": int(other_alive), "accepting": int(other_accepting)})
    for worker, n in ((0, mine), (1, other)):
        for _ in range(n):
            board.count(worker, "10.0.0.1", 1)
    return board


def test_a_more_loaded_worker_leaves_the_connection_then_takes_it() -> None:
    waited, deferred = _accept_one(_board(mine=3, other=1, other_accepting=True))
    assert deferred > 0 and waited >= 0.9 * PATIENCE_S  # left to the other, which never took it


def test_a_worker_as_loaded_as_the_others_takes_the_connection_at_once() -> None:
    down = _board(mine=3, other=0, other_accepting=False, other_alive=False)
    for board in (_board(mine=2, other=2, other_accepting=True),  # as loaded
                  _board(mine=1, other=3, other_accepting=True),  # less loaded
                  _board(mine=3, other=0, other_accepting=False),  # warming up or stopping
                  down):  # fmt: skip
        waited, deferred = _accept_one(board)
        assert deferred == 0 and waited < PATIENCE_S, board.health(0, False)["workers"]


def test_least_open_counts_accepting_workers_only() -> None:
    board = _board(mine=2, other=1, other_accepting=True)
    board.publish(0, {"accepting": 1})
    assert board.least_open(besides=0) == 1 and board.least_open(besides=1) == 2
    board.free(1)  # worker 1 died
    assert board.least_open(besides=0) is None
    row = board.health(0, False)["workers"][0]
    assert row["open_connections"] == 2 and row["accepting"]


def test_an_acceptor_marks_its_worker_accepting_from_start_to_close() -> None:
    async def run() -> list:
        board, seen = Board(2, COUNTERS), []
        sock = listen("127.0.0.1", 0)
        acceptor = Acceptor(sock, asyncio.Protocol, board, 1)
        seen.append(board.rows()[1]["accepting"])
        acceptor.start()
        seen.append(board.rows()[1]["accepting"])
        acceptor.close()
        seen.append(board.rows()[1]["accepting"])
        return seen

    assert asyncio.run(run()) == [0.0, 1.0, 0.0]
