"""A connection's outbox: messages leave in order, a partial result waiting is replaced by the
stream's next result, and the characters waiting are counted (what ``--max-unsent`` limits)."""

from __future__ import annotations

import asyncio
from typing import List, Optional

from wenet_lite.serve.connection import Outbox as _Outbox
from wenet_lite.serve.protocols import Partial


def _drain(box: _Outbox) -> List[Optional[str]]:
    async def run() -> List[Optional[str]]:
        out: List[Optional[str]] = []
        while True:
            message = await asyncio.wait_for(box.get(), 1)
            out.append(message)
            if message is None:
                return out

    return asyncio.run(run())


def test_a_waiting_partial_is_replaced_by_the_next_result() -> None:
    box = _Outbox()
    box.put("ready")  # a reply: not a result
    box.put(Partial("p1"), result=True)
    box.put(Partial("p12"), result=True)  # replaces p1
    assert box.chars == len("ready") + len("p12")
    box.put("final 1", result=True)  # replaces p12: the final says more
    box.put(Partial("p3"), result=True)
    box.put("done", result=True)
    box.put(Partial("p4"), result=True)  # nothing to replace: "done" waits last
    box.put(None)  # the close never replaces what waits
    assert box.chars == sum(map(len, ["ready", "final 1", "done", "p4"]))
    assert _drain(box) == ["ready", "final 1", "done", "p4", None]
    assert box.chars == 0


def test_what_waits_grows_with_finals_only() -> None:
    """A client that reads nothing while 1000 steps are decoded: one partial waits, not 1000."""
    box = _Outbox()
    for step in range(1000):
        box.put(Partial(f"partial of segment {step // 100} at step {step}"), result=True)
        if step % 100 == 99:
            box.put(f"final of segment {step // 100}", result=True)
    finals = [f"final of segment {k}" for k in range(10)]
    assert box.chars == sum(map(len, finals))
    box.put(None)
    assert _drain(box) == [*finals, None]


def test_other_messages_are_never_dropped() -> None:
    box = _Outbox()
    box.put(Partial("p"), result=True)
    box.put("an error for the client")  # not a result: the partial stays before it
    box.put(None)
    assert _drain(box) == ["p", "an error for the client", None]
