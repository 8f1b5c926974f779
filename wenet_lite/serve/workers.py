"""What the processes of one server share, and the parent that keeps its workers alive.

:class:`Board` is memory the parent makes before it forks the workers, so all of them see it:
per worker, its open connections, its connections per peer address (hashed into buckets) and a
row of counters, published a few times a second. Each row has one writer (its worker; the
parent only zeroes a dead worker's rows before it starts the next), so nothing takes a lock: a
worker killed at any moment cannot leave one held. Any worker reads every row, so ``/health``
answers for the whole server and admission counts every worker's connections.

:func:`supervise` is the parent: it notices a worker's death at once (``waitpid``), logs it with
its exit status, frees its slots and starts it again, at most ``_MAX_RESTARTS`` times a minute
per worker; SIGTERM or SIGINT is passed to every worker and waited for.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import signal
import time
import zlib
from typing import Callable, Deque, Dict, List, Optional, Sequence

__all__ = ["Board", "supervise"]

_log = logging.getLogger("wenet_lite.serve")
_BUCKETS = 4096
"""peer addresses hash into this many counters per worker (a collision only makes the
per-address limit count two addresses together)"""
_STATE = ("pid", "alive", "accepting", "heartbeat", "busy_since", "failed_at", "open_streams")
"""a row's fields before the counters: accepting (1 while the worker takes connections: not
while it warms up or shuts down) written by its acceptor; heartbeat (wall clock) written by
the event loop a few times a second; busy_since (wall clock, 0: idle) and failed_at by the
decode thread"""
STALE_S = 5.0
"""a worker whose heartbeat is older is reported as not answering"""
STUCK_S = 30.0
"""a decode step running longer is reported as stuck"""
FAILING_S = 60.0
"""a decode step that failed this recently makes the server 'failing'"""
_MAX_RESTARTS = 5
"""restarts of one worker within a minute before the server gives up and stops"""


class Board:
    """Shared counters of ``workers`` processes; ``counters`` names the per-worker counters."""

    def __init__(self, workers: int, counters: Sequence[str]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.workers = workers
        self.fields = (*_STATE, *counters)
        self._open = ctx.Array("i", workers, lock=False)
        self._peers = ctx.Array("i", workers * _BUCKETS, lock=False)
        self._rows = ctx.Array("d", workers * len(self.fields), lock=False)

    # --- admission: each worker writes its own slots ---------------------------------------

    def open_connections(self) -> int:
        return sum(self._open)

    def peer_connections(self, peer: str) -> int:
        b = _bucket(peer)
        return sum(self._peers[w * _BUCKETS + b] for w in range(self.workers))

    def open_of(self, worker: int) -> int:
        return self._open[worker]

    def least_open(self, besides: int) -> Optional[int]:
        """The fewest connections any worker but ``besides`` that takes connections holds
        (None: no other worker takes them now: none runs, or it warms up or shuts down)."""
        n, accepting = len(self.fields), _STATE.index("accepting")
        counts = [self._open[w] for w in range(self.workers)
                  if w != besides and self._rows[w * n + accepting]]  # fmt: skip
        return min(counts, default=None)

    def count(self, worker: int, peer: str, step: int) -> None:
        """A connection of ``worker`` from ``peer`` opened (+1) or closed (-1)."""
        self._open[worker] += step
        self._peers[worker * _BUCKETS + _bucket(peer)] += step

    # --- counters ---------------------------------------------------------------------------

    def publish(self, worker: int, values: Dict[str, float]) -> None:
        base = worker * len(self.fields)
        for i, name in enumerate(self.fields):
            if name in values:
                self._rows[base + i] = float(values[name])

    def rows(self) -> List[Dict[str, float]]:
        n = len(self.fields)
        return [
            dict(zip(self.fields, self._rows[w * n : (w + 1) * n])) for w in range(self.workers)
        ]

    def free(self, worker: int) -> None:
        """(The parent, once ``worker`` died) its connections are gone: free their slots."""
        self._open[worker] = 0
        for b in range(worker * _BUCKETS, (worker + 1) * _BUCKETS):
            self._peers[b] = 0
        self.publish(worker, {"alive": 0, "accepting": 0, "open_streams": 0, "busy_since": 0})

    def health(self, answering: int, stopping: bool) -> Dict[str, object]:
        """The whole server's health: ``status`` ok, stopping or failing (with ``problems``),
        counters summed over the workers, and each worker's row."""
        now = time.time()
        rows, problems = self.rows(), []
        for w, row in enumerate(rows):
            silent, busy, failed = (now - row[k] for k in ("heartbeat", "busy_since", "failed_at"))
            if not row["alive"]:
                problems.append(f"worker {w} is not running (being restarted)")
            elif silent > STALE_S:
                problems.append(f"worker {w} has not answered for {silent:.0f} s")
            if row["alive"] and row["busy_since"] and busy > STUCK_S:
                problems.append(f"worker {w}'s decode step has run {busy:.0f} s")
            if row["failed_at"] and failed < FAILING_S:
                problems.append(f"worker {w}'s decode step failed {failed:.0f} s ago")
        status = "stopping" if stopping else "failing" if problems else "ok"
        totals = {k: sum(r[k] for r in rows) for k in self.fields[len(_STATE) - 1 :]}
        ints = {k: int(v) if float(v).is_integer() else v for k, v in totals.items()}
        workers = [
            {"worker": w, "pid": int(r["pid"]), "alive": bool(r["alive"]),
             "accepting": bool(r["accepting"]), "open_connections": self._open[w],
             "open_streams": int(r["open_streams"]),
             **{k: r[k] for k in self.fields[len(_STATE) :]}}
            for w, r in enumerate(rows)
        ]  # fmt: skip
        return {"status": status, "problems": problems, "worker": answering,
                "workers": workers, **ints}  # fmt: skip


def _bucket(peer: str) -> int:
    return zlib.crc32(peer.encode("utf-8", "replace")) % _BUCKETS


def supervise(start: Callable[[int], int], board: Board) -> int:
    """Fork ``board.workers`` workers with ``start(index) -> pid`` and keep them running until
    SIGTERM/SIGINT, which is passed on to each; returns 0 when every worker stopped cleanly."""
    children: Dict[int, int] = {}  # pid -> worker index
    restarts: Dict[int, Deque[float]] = collections.defaultdict(collections.deque)
    stopping = False
    worst = 0

    def stop(sig: int, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            _kill(pid, sig)

    for i in range(board.workers):
        children[start(i)] = i
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while children:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        i = children.pop(pid, None)
        if i is None:
            continue
        board.free(i)
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            if code:
                _log.error("worker %d (pid %d) %s while stopping", i, pid, _how(code))
                worst = 1
            continue
        _log.error("worker %d (pid %d) %s; its connections are lost", i, pid, _how(code))
        recent = restarts[i]
        now = time.monotonic()
        while recent and now - recent[0] > 60:
            recent.popleft()
        if len(recent) >= _MAX_RESTARTS:
            _log.error(
                "worker %d died %d times within a minute: stopping the server", i, len(recent) + 1
            )
            worst = 1
            stop(signal.SIGTERM)
            continue
        recent.append(now)
        new = start(i)
        children[new] = i
        _log.info("worker %d restarted (pid %d)", i, new)
    return worst


def _how(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def peer_host(address: Optional[object]) -> str:
    """The host part of a socket's peer address ('?' when unknown)."""
    if isinstance(address, (tuple, list)) and address:
        return str(address[0])
    return "?"
