"""Global CMVN statistics of a training set: `wenet-lite compute-cmvn`.

Features are computed exactly as in training but without augmentation (no speed perturbation,
no dither): the statistics describe the signal, and dither noise would inflate the variance of
quiet bins. Unusable utterances are skipped and counted by reason, as in training.
DataLoader workers each accumulate a slice of utterances into float64 sums (``CMVNStats``) that
the main process merges, so only small arrays cross process boundaries.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

import torch
from lhotse import CutSet
from tqdm import tqdm

from wenet_lite.config import FeatureConfig
from wenet_lite.data.commands import worker_opt_in
from wenet_lite.data.dataset import SkipUtterance, as_is, load_features
from wenet_lite.features.cmvn import CMVNStats

__all__ = ["compute_cmvn", "compute_cmvn_file"]

_log = logging.getLogger(__name__)
_CUTS_PER_ITEM = 16


class _StatsDataset(torch.utils.data.Dataset):
    def __init__(self, cuts: List, features: FeatureConfig) -> None:
        self.cuts = cuts
        self.features = features

    def __len__(self) -> int:
        return (len(self.cuts) + _CUTS_PER_ITEM - 1) // _CUTS_PER_ITEM

    def __getitem__(self, index: int) -> Tuple[CMVNStats, Dict[str, int], int]:
        stats, skipped = CMVNStats(self.features.num_mel_bins), Counter()
        piece = self.cuts[index * _CUTS_PER_ITEM : (index + 1) * _CUTS_PER_ITEM]
        for cut in piece:
            try:
                stats.add(load_features(cut, self.features))  # (T_in, F), no dither, speed 1.0
            except SkipUtterance as e:
                skipped[e.reason] += 1
        return stats, dict(skipped), len(piece)


def compute_cmvn(
    cuts: CutSet, features: FeatureConfig, num_workers: int = 0, progress: bool = True
) -> Tuple[CMVNStats, Dict[str, int]]:
    """Accumulate fbank statistics over ``cuts``; returns (stats, skipped counts by reason)."""
    dataset = _StatsDataset(list(cuts), features)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=num_workers, collate_fn=as_is,
        worker_init_fn=worker_opt_in(),
    )  # fmt: skip
    total, skipped = CMVNStats(features.num_mel_bins), Counter()
    with tqdm(total=len(dataset.cuts), unit="utt", disable=not progress, desc="cmvn") as bar:
        for stats, skips, n in loader:
            total.merge(stats)
            skipped.update(skips)
            bar.update(n)
    return total, dict(skipped)


def compute_cmvn_file(
    cut_sources: Sequence[Union[str, Path]],
    features: FeatureConfig,
    out: Union[str, Path],
    num_workers: int = 0,
    progress: bool = True,
    max_utterances: int = 0,
) -> Tuple[CMVNStats, Dict[str, int]]:
    """Read the cuts of every source (a part dir or a cuts file), compute and write ``out``.

    ``max_utterances`` > 0 uses that many utterances spread evenly over the list (every k-th),
    enough for a global mean and variance at a fraction of the time on a large corpus.
    """
    from wenet_lite.data.manifest import load_cuts

    cuts = [cut for source in cut_sources for cut in load_cuts(source)]
    if 0 < max_utterances < len(cuts):
        cuts = [cuts[i * len(cuts) // max_utterances] for i in range(max_utterances)]
    stats, skipped = compute_cmvn(CutSet.from_cuts(cuts), features, num_workers, progress)
    if stats.count == 0:
        raise ValueError(
            f"no usable utterance in {', '.join(map(str, cut_sources))} ({skipped} skipped): "
            "cannot compute CMVN"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    stats.save(out)
    if skipped:
        _log.warning("compute-cmvn: skipped %s", ", ".join(f"{n} {r}" for r, n in skipped.items()))
    used = len(cuts) - sum(skipped.values())
    _log.info("wrote %s: %d utterances, %d frames", out, used, stats.count)
    return stats, skipped
