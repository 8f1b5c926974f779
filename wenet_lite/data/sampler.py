"""Duration-bucketed batches, reshuffled per epoch, sharded across DDP ranks, resumable.

lhotse's ``DynamicBucketingSampler`` does the bucketing (cuts of similar duration share a batch,
so little of it is padding), the ``max_batch_seconds`` budget (total audio before padding) and
the DDP sharding (each rank takes every world_size-th batch; all ranks get the same number of
batches, so none waits forever in a collective at the end of an epoch). Its shuffling only
mixes within a buffer, so each epoch first shuffles the whole cut list with
``Random(seed, epoch)``; the duration bins are estimated once.

Mixing: with a :class:`Mix`, an epoch is drawn from the parts by weight instead of being
their concatenation: as many utterances as all parts hold, part p's share ``w_p / sum(w)`` of
them (rounded, at least one), taken in turn from a reshuffled pass through that part, so a
part smaller than its share repeats and a larger one is seen across epochs, every utterance
once per pass. The draw is a pure function of (seed, epoch) too.

Resume: an epoch's batches are a pure function of (cuts, seed, epoch, world_size, rank), so the
state is just ``{"epoch", "batches_done"}``, and resuming replays the sampler (manifest only, no
audio) past the batches already trained on. The trainer counts ``batches_done`` itself: the
sampler runs ahead of training by the DataLoader's prefetch, so lhotse's own ``state_dict``
would skip the batches that were prefetched but never trained on.
"""

from __future__ import annotations

import contextlib
import math
import random
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from lhotse import CutSet
from lhotse.dataset.sampling import DynamicBucketingSampler
from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets

__all__ = ["BucketingSampler", "Mix"]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """lhotse warns that an eager CutSet saves no memory (we hold one on purpose, to shuffle
    it whole) and, from a buffer-size heuristic meant for lazy manifests, takes the mean of
    an empty bin list when there is one bucket."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@dataclass(frozen=True)
class Mix:
    """Parts mixed by weight: each part's weight (its share of an epoch is ``w / sum(w)``)
    and the part each utterance (by cut id) comes from."""

    weights: Dict[str, float]
    part_of: Dict[str, str]

    def __post_init__(self) -> None:
        for part, w in self.weights.items():
            if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
                raise ValueError(f"part {part!r}: weight must be a number > 0, got {w!r}")

    def shares(self, counts: Dict[str, int], total: int) -> Dict[str, int]:
        """Utterances of each part in an epoch of ``total``: largest remainders of ``total``
        split by weight, at least one each."""
        empty = sorted(p for p in self.weights if counts.get(p, 0) == 0)
        if empty:
            raise ValueError(f"part(s) {', '.join(empty)} have no usable utterances to mix")
        top = max(self.weights.values())  # scaled first: weights near 1e308 sum to infinity
        weight = sum(w / top for w in self.weights.values())
        exact = {p: total * (w / top) / weight for p, w in self.weights.items()}
        shares = {p: max(1, math.floor(x)) for p, x in exact.items()}
        by_remainder = sorted(self.weights, key=lambda p: (exact[p] - math.floor(exact[p]), p))
        while sum(shares.values()) < total:
            shares[by_remainder.pop()] += 1
        return shares


class BucketingSampler:
    """Yields ``(epoch, CutSet)`` requests for :class:`~wenet_lite.data.dataset.ASRDataset`."""

    def __init__(
        self,
        cuts: CutSet,
        max_batch_seconds: float,
        num_buckets: int,
        shuffle: bool,
        seed: int,
        world_size: int = 1,
        rank: int = 0,
        sort_first_epoch: bool = False,
        mix: Optional[Mix] = None,
    ) -> None:
        if len(cuts) == 0:
            raise ValueError("cannot sample batches from an empty set of utterances")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
        self.cuts: List = list(cuts)
        self.max_batch_seconds = max_batch_seconds
        self.shuffle = shuffle
        self.seed = seed
        self.world_size = world_size
        self.rank = rank
        self.sort_first_epoch = sort_first_epoch
        self.mix = mix
        self.parts: Dict[str, List] = {}
        if mix is not None:
            for cut in self.cuts:
                self.parts.setdefault(mix.part_of[cut.id], []).append(cut)
            self.shares = mix.shares({p: len(c) for p, c in self.parts.items()}, len(self.cuts))
        self.epoch = 1
        self._skip = 0
        buckets = min(num_buckets, len(self.cuts))
        self.duration_bins = (
            estimate_duration_buckets(self.cuts, num_buckets=buckets) if buckets > 1 else []
        )

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (1-based) whose batches the next iteration yields."""
        if epoch != self.epoch:
            self._skip = 0
        self.epoch = epoch

    def epoch_cuts(self) -> List:
        """The current epoch's utterances before shuffling: all cuts, or the mix's draw."""
        if self.mix is None:
            return list(self.cuts)
        drawn: List = []
        for part in sorted(self.parts):
            cuts, n = self.parts[part], self.shares[part]
            k, end = (self.epoch - 1) * n, self.epoch * n  # this epoch's place in the passes
            while k < end:  # each pass shuffled once, its slice taken whole
                index, at = divmod(k, len(cuts))
                taken = self._pass(part, index)[at : at + end - k]
                drawn.extend(taken)
                k += len(taken)
        return drawn

    def _pass(self, part: str, index: int) -> List:
        """The ``index``-th pass through a part: its cuts, reshuffled for each pass."""
        cuts = list(self.parts[part])
        if self.shuffle:
            random.Random(f"{self.seed}/{part}/{index}").shuffle(cuts)
        return cuts

    def _sorted_batches(self) -> Iterator[CutSet]:
        """Batches of consecutive cuts in increasing duration (ties by id), packed up to the
        budget; rank r takes batches r, r + world_size, ... of a count all ranks share."""
        order = sorted(self.epoch_cuts(), key=lambda c: (c.duration, c.id))
        batches: List[List] = [[]]
        total = 0.0
        for cut in order:
            if batches[-1] and total + cut.duration > self.max_batch_seconds:
                batches.append([])
                total = 0.0
            batches[-1].append(cut)
            total += cut.duration
        usable = len(batches) // self.world_size * self.world_size
        for batch in batches[self.rank : usable : self.world_size]:
            yield CutSet.from_cuts(batch)

    def _epoch_batches(self) -> Iterator[CutSet]:
        if self.sort_first_epoch and self.epoch == 1:
            yield from self._sorted_batches()
            return
        order = self.epoch_cuts()
        if self.shuffle:
            random.Random(f"{self.seed}/{self.epoch}").shuffle(order)
        with _quiet():
            sampler = DynamicBucketingSampler(
                CutSet.from_cuts(order),
                max_duration=self.max_batch_seconds,
                duration_bins=self.duration_bins,
                shuffle=self.shuffle,
                drop_last=False,
                world_size=self.world_size,
                rank=self.rank,
                seed=self.seed,
            )
        sampler.set_epoch(self.epoch)
        with _quiet():
            iter(sampler)  # builds the bucketer (which warns too) and returns the sampler
        # next() only: a for loop would call iter() again and rebuild it outside _quiet.
        while True:
            try:
                yield next(sampler)
            except StopIteration:
                return

    def __iter__(self) -> Iterator[Tuple[int, CutSet]]:
        skip, self._skip = self._skip, 0
        for i, batch in enumerate(self._epoch_batches()):
            if i >= skip:
                yield self.epoch, batch

    def num_batches(self) -> int:
        """Batches this rank gets in the current epoch (replays the sampler; no audio read)."""
        return sum(1 for _ in self._epoch_batches())

    def state_dict(self, batches_done: int) -> Dict[str, int]:
        """The resume point after training on ``batches_done`` batches of the current epoch."""
        return {
            "epoch": self.epoch,
            "batches_done": batches_done,
            "num_cuts": len(self.cuts),
            "world_size": self.world_size,
            "mix": dict(sorted(self.mix.weights.items())) if self.mix is not None else None,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> int:
        """Make the next iteration continue the saved epoch after its ``batches_done``;
        returns the batches done."""
        mix = dict(sorted(self.mix.weights.items())) if self.mix is not None else None
        if state.get("mix") != mix:
            raise ValueError(
                f"cannot resume the sampler: the checkpoint mixed parts {state.get('mix')}, this "
                f"run {mix}; the batches would differ"
            )
        for key, now in (("num_cuts", len(self.cuts)), ("world_size", self.world_size)):
            if int(state[key]) != now:
                raise ValueError(
                    f"cannot resume the sampler: the checkpoint was written with {key} "
                    f"{state[key]}, this run has {now}; the batches would differ"
                )
        self.epoch = int(state["epoch"])
        self._skip = int(state["batches_done"])
        return self._skip

    def load_resized(self, state: Dict[str, Any]) -> int:
        """Continue a checkpoint written by another number of ranks (an elastic job that lost
        or gained nodes): the same epoch, past the same share of its utterances, in batches
        drawn for this world size. Not exact: which utterances the rest of the epoch holds
        differs from an uninterrupted run's. Returns the batches this rank counts as done."""
        done = int(state["batches_done"]) * int(state["world_size"])  # batches of all ranks
        self.epoch = int(state["epoch"])
        self._skip = min(-(-done // self.world_size), self.num_batches())
        return self._skip
