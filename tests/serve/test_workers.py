"""The workers' shared board (serve/workers.py): admission counts every worker's connections,
a dead worker's slots are freed, and /health turns failing for a silent, stuck or failing
decode thread. The rows are written as the workers write them; time is the wall clock."""

from __future__ import annotations

import time

from wenet_lite.serve.connection import COUNTERS
from wenet_lite.serve.workers import FAILING_S, STALE_S, STUCK_S, Board


def _alive(board: Board) -> None:
    for w in range(board.workers):
        board.publish(w, {"pid": 100 + w, "alive": 1, "heartbeat": time.time()})


def test_admission_counts_every_worker_and_a_dead_workers_slots_are_freed() -> None:
    board = Board(2, COUNTERS)
    board.count(0, "10.0.0.1", 1)
    board.count(1, "10.0.0.1", 1)
    board.count(1, "10.0.0.2", 1)
    assert board.open_connections() == 3
    assert board.peer_connections("10.0.0.1") == 2 and board.peer_connections("10.0.0.3") == 0
    board.free(1)  # worker 1 died with two connections open
    assert board.open_connections() == 1 and board.peer_connections("10.0.0.1") == 1
    board.count(0, "10.0.0.1", -1)
    assert board.open_connections() == 0


def test_health_sums_the_workers_and_names_each_problem() -> None:
    board = Board(2, COUNTERS)
    _alive(board)
    board.publish(0, {"connections": 3, "open_streams": 2, "decode_s": 0.5})
    board.publish(1, {"connections": 4, "open_streams": 1, "decode_s": 0.25})
    h = board.health(answering=1, stopping=False)
    assert h["status"] == "ok" and h["problems"] == [] and h["worker"] == 1
    assert h["connections"] == 7 and h["open_streams"] == 3 and h["decode_s"] == 0.75
    assert [w["pid"] for w in h["workers"]] == [100, 101]
    assert board.health(0, stopping=True)["status"] == "stopping"

    now = time.time()
    cases = [
        ({"busy_since": now - STUCK_S - 1}, "decode step has run"),
        ({"failed_at": now - 1}, "decode step failed"),
        ({"heartbeat": now - STALE_S - 1}, "has not answered"),
        ({"alive": 0}, "is not running"),
    ]
    for values, problem in cases:
        _alive(board)
        board.publish(1, {"busy_since": 0, "failed_at": 0})
        board.publish(1, values)
        h = board.health(0, stopping=False)
        assert h["status"] == "failing" and len(h["problems"]) == 1, (values, h["problems"])
        assert h["problems"][0].startswith("worker 1") and problem in h["problems"][0]
    _alive(board)
    board.publish(1, {"failed_at": time.time() - FAILING_S - 1})  # long ago: ok again
    assert board.health(0, stopping=False)["status"] == "ok"
