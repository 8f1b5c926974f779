"""The model-file format: written atomically, read with ``weights_only=True``, versioned.

Every model file (a training checkpoint ``step_N.pt`` or an averaged model) is a plain dict of
tensors and builtins, safe to load without executing code: ``format_version``, ``model`` (the
state dict), ``config`` (resolved, as nested dicts), ``tokenizer`` (sentencepiece model bytes),
``step``, ``epoch`` and, in training checkpoints, the training state (``train/resume.py``).

This module is a leaf below ``model/``, ``train/``, ``runtime/`` and ``export/``: it knows the
container, not the model (``wenet_lite.files.model_file`` rebuilds an ``ASRModel`` from it). Every
problem with a file is a :class:`CheckpointError` (a ``ValueError``) whose message starts with
the file's name; the CLI prints it as one line.
"""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import torch

from wenet_lite.config import ConfigError, config_from_dict, config_to_dict
from wenet_lite.fileio import atomic_open

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "save_checkpoint",
    "load_checkpoint",
    "list_checkpoints",
    "prune_checkpoints",
    "average_state_dicts",
    "check_same_model",
    "MODEL_SECTIONS",
]

PathLike = Union[str, Path]

FORMAT_VERSION = 1
"""Bumped when a reader of this version could misread a newer file. Files written before the
field existed are version 1."""

MODEL_SECTIONS = ("features", "encoder", "decoder", "tokenizer")
"""Config sections that define the model: a resumed or averaged checkpoint must agree on them."""

_NAME = re.compile(r"^step_(\d+)\.pt$")


class CheckpointError(ValueError):
    """A model file is truncated, corrupt, foreign, too new, or lacks what the caller needs.

    The message names the file: ``CheckpointError(path, "what is wrong")``."""

    def __init__(self, path: PathLike, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)


def save_checkpoint(payload: Dict[str, Any], path: PathLike) -> None:
    """Write to a temporary file in the same directory, flush to disk, then rename: a crash
    mid-write leaves the previous file intact, never a truncated one under the final name.

    A failed write (a full disk: torch reports it as ``RuntimeError: ... unexpected pos``) is a
    CheckpointError naming the file and saying that the files written before are intact."""
    try:
        with atomic_open(path, "wb") as f:
            torch.save({**payload, "format_version": FORMAT_VERSION}, f)
    except (OSError, RuntimeError) as e:
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
        free = shutil.disk_usage(Path(path).parent).free if Path(path).parent.is_dir() else -1
        disk = f"; {free / 2**20:.0f} MiB free on its disk" if free >= 0 else ""
        raise CheckpointError(
            path,
            f"could not be written ({reason}{disk}); the files written before it are "
            "intact (training resumes from them)",
        ) from None


def load_checkpoint(path: PathLike, map_location: str = "cpu") -> Dict[str, Any]:
    """Load a model file safely (no pickled code) and check its format.

    Raises FileNotFoundError for a missing file and CheckpointError for anything else wrong.
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(path, "is a directory, not a model file")
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # zip archive / pickle
        raise CheckpointError(path, f"not a model file (not a PyTorch save; it starts {head!r})")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" not in str(e):
            raise CheckpointError(path, f"not a readable model file (corrupt?): {e}") from None
        raise CheckpointError(
            path,
            "not a readable model file: it holds Python objects, not only tensors and "
            "builtins (refused: loading them could run code)",
        ) from None
    except Exception as e:  # torch raises RuntimeError, EOFError, ...
        first = str(e).splitlines()[0] if str(e) else ""
        raise CheckpointError(
            path, f"not a readable model file (truncated or corrupt?): {type(e).__name__}: {first}"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        wenet = isinstance(payload, dict) and any(
            isinstance(k, str) and k.startswith(("encoder.encoders.", "module.encoder."))
            for k in payload
        )
        hint = ": it is WeNet's; import its directory first (`wenet-lite import-wenet`)" if wenet \
            else ""  # fmt: skip
        raise CheckpointError(path, f"not a wenet_lite model file (no model/config inside){hint}")
    version = payload.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            path,
            f"written in model-file format {version!r}, this wenet_lite reads up to "
            f"{FORMAT_VERSION}: upgrade wenet_lite",
        )
    return payload


def list_checkpoints(exp_dir: PathLike) -> List[Path]:
    """Training checkpoints ``step_N.pt`` in ``exp_dir``, oldest first."""
    found = []
    for p in Path(exp_dir).glob("step_*.pt"):
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def prune_checkpoints(exp_dir: PathLike, keep: int) -> None:
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


def check_same_model(
    saved: Dict[str, Any],
    now: Dict[str, Any],
    where: str,
    sections: Sequence[str] = MODEL_SECTIONS,
    complete: bool = True,
) -> None:
    """ConfigError naming the first model-defining key (of ``sections``) that differs from a
    checkpoint's. Both are completed with defaults first (a file older than a section has its
    defaults); with ``complete=False`` only the keys ``now`` gives are compared (the keys a
    config sets explicitly)."""
    saved = _completed(saved)
    if complete:
        now = _completed(now)
    for section in sections:
        for key, value in _flatten(now.get(section, {}), section).items():
            old = _flatten(saved.get(section, {}), section).get(key)
            if old != value:
                raise ConfigError(key, f"is {value!r} but {where} was trained with {old!r}")


def _completed(config: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return config_to_dict(config_from_dict(config))
    except ConfigError:
        return config  # compared as it is: the differing key is still named


def _flatten(d: Dict[str, Any], prefix: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}.{k}"))
        else:
            out[f"{prefix}.{k}"] = list(v) if isinstance(v, tuple) else v
    return out
