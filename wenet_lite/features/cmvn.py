"""Global CMVN statistics: per-bin mean and inverse standard deviation over a training set.

The model holds ``mean`` and ``istd`` as buffers and applies ``(x - mean) * istd`` (so they are
exported with it, as sherpa-onnx expects of WeNet models); this module only produces them.
Sums are kept in float64: a LibriSpeech-sized set has ~10^8 frames, where float32 sums lose
the variance to rounding.

File format (JSON): ``{"dim": F, "count": frames, "mean": [F floats], "istd": [F floats]}``.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Tuple, Union

import numpy as np
import torch

from wenet_lite.fileio import read_json, write_text_atomic

__all__ = ["VAR_FLOOR", "CMVNStats", "save_cmvn", "load_cmvn"]

PathLike = Union[str, Path]
ArrayLike = Union[np.ndarray, torch.Tensor, Sequence[float]]

VAR_FLOOR = 1e-4
"""Variance floor for istd. A log-mel bin that never varies in training (e.g. above the band of
upsampled narrowband audio) would otherwise get an enormous istd that blows up any deviation at
test time. Real bins vary far more (variance >= ~0.2 even where only dither noise is left), so
the floor only caps istd at 100 for degenerate bins."""


class CMVNStats:
    """Running sum, sum of squares and frame count of (T_in, F) features, in float64."""

    def __init__(self, dim: int) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim = dim
        self.sum = np.zeros(dim, dtype=np.float64)
        self.sum_sq = np.zeros(dim, dtype=np.float64)
        self.count = 0

    def add(self, feats: ArrayLike) -> None:
        """Accumulate the frames of one utterance, (T_in, F)."""
        x = _as_float64(feats)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected features of shape (T_in, {self.dim}), got {x.shape}")
        self.sum += x.sum(axis=0)
        self.sum_sq += np.square(x).sum(axis=0)
        self.count += x.shape[0]

    def merge(self, other: CMVNStats) -> None:
        """Add another accumulator's statistics (e.g. from a parallel worker)."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge CMVN stats of dim {other.dim} into dim {self.dim}")
        self.sum += other.sum
        self.sum_sq += other.sum_sq
        self.count += other.count

    def mean_var(self) -> Tuple[np.ndarray, np.ndarray]:
        """Per-bin mean and (population) variance, (F,) float64 each."""
        if self.count == 0:
            raise ValueError("no frames accumulated: cannot compute CMVN statistics")
        mean = self.sum / self.count
        var = np.maximum(self.sum_sq / self.count - np.square(mean), 0.0)  # rounding can dip < 0
        return mean, var

    def mean_istd(self, var_floor: float = VAR_FLOOR) -> Tuple[np.ndarray, np.ndarray]:
        """Per-bin mean and 1 / sqrt(max(var, var_floor)), (F,) float64 each."""
        if var_floor <= 0:
            raise ValueError(f"var_floor must be positive, got {var_floor}")
        mean, var = self.mean_var()
        return mean, 1.0 / np.sqrt(np.maximum(var, var_floor))

    def save(self, path: PathLike, var_floor: float = VAR_FLOOR) -> None:
        """Write mean and istd with :func:`save_cmvn`."""
        mean, istd = self.mean_istd(var_floor)
        save_cmvn(path, mean, istd, self.count)


def _as_float64(x: ArrayLike) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def save_cmvn(path: PathLike, mean: ArrayLike, istd: ArrayLike, count: int) -> None:
    """Write CMVN statistics as JSON (full float64 precision)."""
    m, s = _as_float64(mean), _as_float64(istd)
    _check(m, s, str(path))
    data = {"dim": int(m.shape[0]), "count": int(count), "mean": m.tolist(), "istd": s.tolist()}
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def load_cmvn(path: PathLike) -> Tuple[torch.Tensor, torch.Tensor]:
    """Read CMVN statistics written by :func:`save_cmvn`.

    Returns:
        mean: (F,) float32; istd: (F,) float32.

    Raises:
        FileNotFoundError, ValueError: naming ``path`` if it is missing or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CMVN file not found: {path}")
    try:
        data = read_json(path)
        mean = np.asarray(data["mean"], dtype=np.float64)
        istd = np.asarray(data["istd"], dtype=np.float64)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a CMVN JSON file with 'mean' and 'istd' ({e})") from None
    _check(mean, istd, str(path))
    return torch.from_numpy(mean).float(), torch.from_numpy(istd).float()


def _check(mean: np.ndarray, istd: np.ndarray, where: str) -> None:
    if mean.ndim != 1 or mean.shape != istd.shape or mean.shape[0] == 0:
        raise ValueError(
            f"{where}: mean and istd must be non-empty vectors of one length, "
            f"got shapes {mean.shape} and {istd.shape}"
        )
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(istd)) and np.all(istd > 0)):
        raise ValueError(f"{where}: mean must be finite and istd finite and positive")
