"""Training features computed once and stored: `wenet-lite compute-fbank`.

On a small CPU machine, computing fbank in a DataLoader worker competes with the training
threads for the cores (docs/training.md has the measured gain,
``benchmarks/bench_train.py``). :func:`store_fbank` computes each
utterance's training fbank once (speed 1.0; dither as in training, one draw per utterance, the
one epoch 0 would draw), stores it with lhotse's ``NumpyFilesWriter`` as float16 in
``PART/fbank/`` and rewrites ``PART/cuts.jsonl.gz`` with each cut's array as the custom field
``fbank`` (icefall's precomputed-feature cuts, with our fbank). ``PART/fbank/features.json``
holds the features config the arrays were made with.

The trainer (:func:`stored_fbank_usable`) uses the stored arrays only when that config equals
its own; the dataset then loads a cut's array when the epoch's speed factor is 1.0 and computes
everything else from audio as before (other speed factors, cuts without an array, a file
removed since). Stored features lose one thing: the dither noise no longer changes per epoch.
float16 keeps log-mel values to ~3 significant digits (<= 0.008 absolute at |x| < 16), far
below the dither's own effect on quiet bins.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections import Counter
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
from lhotse import CutSet, NumpyFilesWriter
from lhotse.array import TemporalArray
from lhotse.cut import Cut
from lhotse.utils import fastcopy
from tqdm import tqdm

from wenet_lite.config import FeatureConfig
from wenet_lite.data.commands import worker_opt_in
from wenet_lite.data.dataset import (
    FBANK_FIELD,
    SkipUtterance,
    as_is,
    load_features,
    utterance_seed,
)
from wenet_lite.data.manifest import CUTS_FILENAME, load_cuts, save_cuts
from wenet_lite.fileio import write_text_atomic

__all__ = [
    "FBANK_FIELD",
    "FBANK_DIR",
    "StoreResult",
    "store_fbank",
    "stored_fbank_usable",
]

_log = logging.getLogger(__name__)

FBANK_DIR = "fbank"
"""Folder of the arrays inside the prepared part."""
_META = "features.json"
_CUTS_PER_ITEM = 16


class StoreResult(NamedTuple):
    stored: int  # utterances with a stored array
    total: int  # utterances in the manifest (all kept in it, stored or not)
    skipped: Dict[str, int]  # unusable audio by reason (see dataset.SKIP_REASONS)


class _Arrays(torch.utils.data.Dataset):
    """Computes and writes the arrays of 16 cuts per item; returns their manifests."""

    def __init__(self, cuts: List[Cut], features: FeatureConfig, seed: int, out: Path) -> None:
        self.cuts, self.features, self.seed, self.out = cuts, features, seed, out

    def __len__(self) -> int:
        return (len(self.cuts) + _CUTS_PER_ITEM - 1) // _CUTS_PER_ITEM

    def __getitem__(self, index: int) -> Tuple[Dict[str, TemporalArray], Dict[str, int], int]:
        arrays, skipped = {}, Counter()
        piece = self.cuts[index * _CUTS_PER_ITEM : (index + 1) * _CUTS_PER_ITEM]
        with NumpyFilesWriter(self.out) as writer:
            for cut in piece:
                seed = utterance_seed(self.seed, 0, cut.id, "audio")
                try:
                    feats = load_features(cut, self.features, (1.0,), self.features.dither, seed)
                except SkipUtterance as e:
                    skipped[e.reason] += 1
                    continue
                arrays[cut.id] = writer.store_array(
                    cut.id,
                    feats.numpy().astype(np.float16),  # (T_in, F)
                    frame_shift=self.features.frame_shift_ms / 1000,
                    temporal_dim=0,
                )
        return arrays, dict(skipped), len(piece)


def store_fbank(
    part: Union[str, Path],
    features: FeatureConfig,
    seed: int,
    num_workers: int = 0,
    progress: bool = True,
) -> StoreResult:
    """Compute and store the training fbank of every cut of the prepared ``part`` directory.

    The arrays are written to a new folder that replaces ``part/fbank`` only when complete, then
    the manifest is rewritten (atomically) with the ``fbank`` field; a run that stops half-way
    leaves the previous arrays and manifest as they were. Unusable audio is counted, and its
    cut kept in the manifest without an array (training will skip and count it again).
    """
    part = Path(part)
    if not part.is_dir():
        raise FileNotFoundError(f"{part}: not a prepared part directory (run `wenet-lite prepare`)")
    cuts = list(load_cuts(part))
    final = (part / FBANK_DIR).resolve()
    tmp = part / f".tmp-{FBANK_DIR}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        arrays, skipped = _compute(cuts, features, seed, tmp, num_workers, progress)
        write_text_atomic(tmp / _META, json.dumps(dataclasses.asdict(features), indent=1) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stored = [_with_array(c, arrays[c.id], final) if c.id in arrays else _without_array(c)
              for c in cuts]  # fmt: skip
    save_cuts(CutSet.from_cuts(stored), part / CUTS_FILENAME)
    if skipped:
        detail = ", ".join(f"{n} {r}" for r, n in skipped.items())
        _log.warning("compute-fbank %s: no features for %s", part, detail)
    return StoreResult(len(arrays), len(cuts), skipped)


def _compute(
    cuts: List[Cut], features: FeatureConfig, seed: int, out: Path, workers: int, progress: bool
) -> Tuple[Dict[str, TemporalArray], Dict[str, int]]:
    dataset = _Arrays(cuts, features, seed, out)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=workers, collate_fn=as_is,
        worker_init_fn=worker_opt_in(),
    )  # fmt: skip
    arrays, skipped = {}, Counter()
    with tqdm(total=len(cuts), unit="utt", disable=not progress, desc="fbank") as bar:
        for piece, skips, n in loader:
            arrays.update(piece)
            skipped.update(skips)
            bar.update(n)
    return arrays, dict(skipped)


def _with_array(cut: Cut, array: TemporalArray, storage: Path) -> Cut:
    """The cut with its array, pointing at the final folder (it was written to a temporary)."""
    moved = dataclasses.replace(array.array, storage_path=str(storage))
    return cut.with_custom(FBANK_FIELD, dataclasses.replace(array, array=moved))


def _without_array(cut: Cut) -> Cut:
    """The cut without a stale array of an earlier run (its audio is unusable now)."""
    custom = {k: v for k, v in (cut.custom or {}).items() if k != FBANK_FIELD}
    return fastcopy(cut, custom=custom or None)


def _storage(cut: Cut) -> Optional[Path]:
    if not cut.has_custom(FBANK_FIELD):
        return None
    return Path(cut.custom[FBANK_FIELD].array.storage_path)


def stored_fbank_usable(cuts: CutSet, features: FeatureConfig) -> bool:
    """Whether the training dataset may load the stored arrays of ``cuts``; logs why not.

    True when at least one cut has an array and every folder the arrays live in was made with
    exactly ``features`` (the experiment's features config).
    """
    counts = Counter(_storage(cut) for cut in cuts)
    with_array = sum(n for folder, n in counts.items() if folder is not None)
    if with_array == 0:
        return False
    wanted = dataclasses.asdict(features)
    for folder in (f for f in counts if f is not None):
        meta = folder / _META
        try:
            made_with = json.loads(meta.read_text())
        except (OSError, ValueError):
            _log.warning("stored fbank: cannot read %s; computing features from audio", meta)
            return False
        keys = sorted(wanted.keys() | made_with.keys())
        differ = [f"features.{k} {made_with.get(k)} != {wanted.get(k)}" for k in keys
                  if wanted.get(k) != made_with.get(k)]  # fmt: skip
        if differ:
            detail = ", ".join(differ)
            _log.warning(
                "stored fbank in %s was made with other features (%s); computing features from "
                "audio (run `wenet-lite compute-fbank` again to store these)",
                folder,
                detail,
            )
            return False
    _log.info(
        "stored fbank for %d of %d training utterances (used at speed 1.0)", with_array, len(cuts)
    )
    return True
