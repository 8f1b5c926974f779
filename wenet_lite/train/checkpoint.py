"""Checkpoints: written atomically, read with ``weights_only=True``, pruned and averaged.

A checkpoint is a plain dict of tensors and builtins (safe to load without executing code):
``model`` state dict, ``config`` (resolved, as nested dicts), ``tokenizer`` (sentencepiece
model bytes), ``step``, ``epoch`` and, for training checkpoints, ``optimizer``,
``scheduler``, ``sampler`` and ``rng`` states. An averaged model holds only the first group.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import torch

from wenet_lite.config import ConfigError
from wenet_lite.fileio import atomic_open

__all__ = [
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "list_checkpoints",
    "prune_checkpoints",
    "average_state_dicts",
    "check_same_model",
    "MODEL_SECTIONS",
]

MODEL_SECTIONS = ("features", "encoder", "tokenizer")
"""Config sections that define the model: a resumed or averaged checkpoint must agree on them."""

_NAME = re.compile(r"^step_(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint file is missing pieces, truncated or not a checkpoint at all."""


def save_checkpoint(payload: Dict[str, Any], path: str | Path) -> None:
    """Write to a temporary file in the same directory, flush to disk, then rename: a crash
    mid-write leaves the previous file intact, never a truncated one under the final name."""
    with atomic_open(path, "wb") as f:
        torch.save(payload, f)


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> Dict[str, Any]:
    """Load a checkpoint safely (no pickled code); clear errors for missing or broken files."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ...
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise CheckpointError(f"{path} is not a wenet_lite checkpoint (no model/config inside)")
    return payload


def list_checkpoints(exp_dir: str | Path) -> List[Path]:
    """Training checkpoints ``step_N.pt`` in ``exp_dir``, oldest first."""
    found = []
    for p in Path(exp_dir).glob("step_*.pt"):
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def prune_checkpoints(exp_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` training checkpoints."""
    for p in list_checkpoints(exp_dir)[:-keep]:
        p.unlink()


def average_state_dicts(states: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Element-wise mean of model state dicts (integer buffers are taken from the last)."""
    if not states:
        raise ValueError("no checkpoints to average")
    avg: Dict[str, torch.Tensor] = {}
    for key, last in states[-1].items():
        if last.is_floating_point():
            avg[key] = sum(s[key].double() for s in states).div(len(states)).to(last.dtype)
        else:
            avg[key] = last.clone()
    return avg


def check_same_model(saved: Dict[str, Any], now: Dict[str, Any], where: str) -> None:
    """ConfigError naming the first model-defining key that differs from a checkpoint's."""
    for section in MODEL_SECTIONS:
        for key, value in _flatten(now.get(section, {}), section).items():
            old = _flatten(saved.get(section, {}), section).get(key)
            if old != value:
                raise ConfigError(key, f"is {value!r} but {where} was trained with {old!r}")


def _flatten(d: Dict[str, Any], prefix: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}.{k}"))
        else:
            out[f"{prefix}.{k}"] = list(v) if isinstance(v, tuple) else v
    return out
