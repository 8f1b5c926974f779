"""Reading back what training wrote to TensorBoard (``EXP/tensorboard``), for plots and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, NamedTuple, Union

__all__ = ["Scalar", "read_scalars"]


class Scalar(NamedTuple):
    step: int
    wall_time: float
    """seconds since the epoch, when the value was written"""
    value: float


def read_scalars(tb_dir: Union[str, Path]) -> Dict[str, List[Scalar]]:
    """{tag: [Scalar, ...]} of every scalar in the event files, by step. A resumed run repeats
    the steps after its checkpoint: the newest value of a step wins."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: Dict[str, Dict[int, Scalar]] = {}
    for events in sorted(Path(tb_dir).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            points = series.setdefault(tag, {})
            for e in acc.Scalars(tag):
                if e.step not in points or e.wall_time >= points[e.step].wall_time:
                    points[e.step] = Scalar(e.step, e.wall_time, e.value)
    return {tag: [points[s] for s in sorted(points)] for tag, points in series.items()}
