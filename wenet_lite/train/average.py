"""`wenet-lite average`: the mean of several checkpoints' weights, as one model file.

``last``: the newest N ``step_N.pt`` of the experiment. ``best``: the N with the lowest dev
loss among the kept checkpoints that have one (epoch-end checkpoints record ``dev_loss``;
pruning keeps only the newest ``train.keep_checkpoints``, so "best" chooses among those).
The output holds ``model``, ``config`` and ``tokenizer`` (what ``load_model`` reads) plus
``averaged_from`` (file names) and ``step`` (of the newest one); no optimizer state.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional, Tuple, Union

from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.files.checkpoint import (
    average_state_dicts,
    check_same_model,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)

__all__ = ["average_checkpoints", "choose_checkpoints"]

_log = logging.getLogger(__name__)
Pathlike = Union[str, Path]


def choose_checkpoints(exp_dir: Pathlike, num: int, best: bool = False) -> List[Path]:
    """The checkpoints to average, oldest first; ValueError when fewer than ``num`` qualify."""
    if num < 1:
        raise FieldError(f"{{num}} must be >= 1, got {num}", num=Setting("num"))
    found = list_checkpoints(exp_dir)
    if not found:
        raise FileNotFoundError(f"{exp_dir}: no step_N.pt checkpoints to average")
    if best:
        scored: List[Tuple[float, Path]] = []
        for path in found:
            payload = load_checkpoint(path)
            if "dev_loss" in payload:
                scored.append((float(payload["dev_loss"]), path))
        chosen = [p for _, p in sorted(scored, key=lambda x: x[0])[:num]]
        kind = f"with a dev loss (found {len(scored)})"
    else:
        chosen = found[-num:]
        kind = f"(found {len(found)})"
    if len(chosen) < num:
        raise ValueError(f"{exp_dir}: asked to average {num} checkpoints {kind}")
    return sorted(chosen, key=found.index)


def average_checkpoints(
    exp_dir: Pathlike, num: int, out: Optional[Pathlike] = None, best: bool = False
) -> Path:
    """Average ``num`` checkpoints of ``exp_dir`` into ``out`` (default ``avg_<num>.pt`` or
    ``avg_best_<num>.pt`` in ``exp_dir``); returns the output path."""
    exp_dir = Path(exp_dir)
    chosen = choose_checkpoints(exp_dir, num, best)
    states, newest = [], None
    for path in chosen:
        payload = load_checkpoint(path)
        if newest is not None:
            check_same_model(newest["config"], payload["config"], str(path))
        states.append(payload["model"])
        newest = {k: payload[k] for k in ("config", "tokenizer", "step") if k in payload}
    assert newest is not None
    out = Path(out) if out else exp_dir / (f"avg_best_{num}.pt" if best else f"avg_{num}.pt")
    model = average_state_dicts(states)
    save_checkpoint(dict(newest, model=model, averaged_from=[p.name for p in chosen]), out)
    _log.info("averaged %s into %s", ", ".join(p.name for p in chosen), out)
    return out
