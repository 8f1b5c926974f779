"""`wenet-lite prepare shards`: a prepared part rewritten as Lhotse Shar shards."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Optional

import numpy as np

from wenet_lite.config import FeatureConfig
from wenet_lite.data.dataset import SkipUtterance, load_features, utterance_seed
from wenet_lite.data.manifest import load_cuts
from wenet_lite.data.shar_writer import WriteResult, write_shards
from wenet_lite.features.audio import AudioError

__all__ = ["prepare_shards"]


class _StoredFbank:
    """The training fbank `compute-fbank` stores (speed 1.0, dither drawn once from the
    seed), for a cut being written to a shard."""

    def __init__(self, features: FeatureConfig, seed: int) -> None:
        self.cfg, self.seed = features, seed
        self.features = dataclasses.asdict(features)
        self.frame_shift = features.frame_shift_ms / 1000

    def __call__(self, cut, samples: np.ndarray) -> np.ndarray:
        seed = utterance_seed(self.seed, 0, cut.id, "audio")
        try:
            return load_features(cut, self.cfg, (1.0,), self.cfg.dither, seed).numpy()
        except SkipUtterance as e:
            raise AudioError(cut.id, "empty", f"no fbank ({e.reason})") from None


def prepare_shards(
    data: Path,
    part: str,
    out: Path,
    shard_size: int = 1000,
    shard_mb: Optional[float] = None,
    features: Optional[FeatureConfig] = None,
    seed: int = 0,
    progress: bool = True,
) -> WriteResult:
    """Write ``DATA/PART`` as shards in ``OUT/PART`` (with the training fbank when
    ``features`` is given) and copy ``DATA/cmvn.json`` beside them."""
    folder = Path(data) / part
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no prepared part '{part}' (run `wenet-lite prepare`)")
    cuts = list(load_cuts(folder))
    fbank = _StoredFbank(features, seed) if features is not None else None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = write_shards(cuts, out / part, shard_size, shard_mb, fbank, progress)
    cmvn = Path(data) / "cmvn.json"
    if cmvn.is_file():
        shutil.copyfile(cmvn, out / "cmvn.json")
    return result
