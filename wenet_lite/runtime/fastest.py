"""``engine="auto"``: the engine that runs a batched chunk step fastest on this CPU, chosen once.

A stream's numbers must not depend on the streams beside it, so the choice is made once, when
the recogniser is built, and every step of every stream runs on it: switching engines by batch
size would give a stream another engine's roundings whenever its company changed.

The candidates for a model file on the CPU: the torch engine in the resolved precision and,
for fp32 with a fixed cache where onnxruntime is installed, the onnxruntime engine over the
model exported at start, each built as when named (``recognizer.make_engine``). Each runs a
chunk step of :data:`TIMED_STREAMS` streams whose caches are full, as a server's streams are
after their first seconds; the best of a few timed steps decides. Their ratio follows the CPU:
on an AMD EPYC with AVX2 onnxruntime ran the demo model's 16-stream step in 0.64x the torch
engine's time and one stream in 0.2x; on a Zen 4 EPYC 0.93x and 0.44x
(``benchmarks/bench_roofline.py``).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, List, Optional, Tuple

import torch

from wenet_lite.model.chunking import Chunking
from wenet_lite.runtime.engines import Engine

__all__ = ["TIMED_STREAMS", "candidate_kinds", "fastest", "step_seconds"]

TIMED_STREAMS = 16
"""streams in the timed chunk step: a loaded server's batch"""

_log = logging.getLogger(__name__)

Candidate = Tuple[str, Callable[[], Engine]]
"""an engine's name and how to build it"""


def candidate_kinds(chunking: Chunking, precision: str, device: str) -> List[str]:
    """The engines ``auto`` compares (each then built as if named): torch always; onnxruntime
    for fp32 on the CPU with a fixed cache, where it is installed."""
    if precision != "fp32" or device != "cpu" or chunking.left_chunks < 0:
        return ["torch"]
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        _log.info("engine auto: onnxruntime is not installed; the torch engine runs")
        return ["torch"]
    return ["torch", "onnxruntime"]


def step_seconds(engine: Engine, window: int, feat_dim: int, streams: int = TIMED_STREAMS,
                 repeats: int = 3) -> float:  # fmt: skip
    """The best time of one chunk step of ``streams`` streams with full caches on ``engine``
    (random windows; the state carried from step to step, as a stream's is)."""
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(streams, window, feat_dim, generator=gen)
    lens = torch.full((streams,), window, dtype=torch.long)
    state = engine.init_state(streams)
    for _ in range(max(engine.chunking.left_chunks, 0) + 2):  # the caches full, warmed up
        _, state = engine.run(feats, lens, state)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _, state = engine.run(feats, lens, state)
        best = min(best, time.perf_counter() - start)
    return best


def fastest(
    found: List[Candidate],
    timer: Callable[[Engine], float],
) -> Engine:
    """Build and time each candidate; the fastest engine. One that fails to build or run is
    left out with a warning naming it (the torch engine, first, is the fallback)."""
    best: Optional[Tuple[float, Engine]] = None
    said = []
    for name, build in found:
        _log.info(
            "engine auto: building and timing %s%s",
            name,
            " (exported first unless the graph cache holds it: up to a minute)"
            if name != "torch"
            else "",
        )
        try:
            engine = build()
            seconds = timer(engine)
        except Exception as e:  # noqa: BLE001 - an exporter's or runtime's own errors
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            _log.warning("engine auto: %s left out: %s", name, first)
            continue
        said.append(f"{name} {1000 * seconds:.1f} ms")
        if best is None or seconds < best[0]:
            best = (seconds, engine)
    if best is None:
        raise RuntimeError("engine auto: no engine could run the model: " + ", ".join(
            name for name, _ in found))  # fmt: skip
    _log.info("engine auto: a %d-stream chunk step takes %s: %s runs", TIMED_STREAMS,
              ", ".join(said), best[1].name)  # fmt: skip
    return best[1]
