"""Batches from shards: an epoch planned from the shards' indexes, read sequentially.

Every epoch is planned in advance from metadata alone (ids and durations: no audio), the same
way on every rank and worker, so batch counts are known, resume is exact and no rank waits:

1. the epoch's shards (all of them, or each part's share of a mix by weight, drawn shard by
   shard from reshuffled passes through the part) are shuffled from ``(seed, epoch)``;
2. each shard goes, in that order, to the read stream with the least audio so far: there are
   ``world_size x streams`` streams, ``streams`` per rank (one per DataLoader worker);
3. a stream reads its shards one after another; its utterances pass through a shuffle buffer
   (``shuffle_buffer`` utterances) and are batched a pool (``sort_buffer``) at a time: the pool
   sorted by duration, packed up to ``max_batch_seconds``, its batches shuffled;
4. a rank takes its streams' batches in turn; ranks with fewer batches than the most loaded
   rank end the epoch with empty batches (the loop runs them as zero-loss dummies), so every
   utterance is trained on exactly once an epoch and every rank takes the same steps.

A DataLoader worker gets the batches of one stream in order (requests go round-robin to the
workers, as the streams are interleaved) and reads its shards front to back, holding only the
utterances read but not yet batched (bounded by the two buffers). Resume replays the plan and
opens each stream at the first shard it still needs.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch
from lhotse import CutSet
from lhotse.cut import Cut

from wenet_lite.config import DataConfig
from wenet_lite.data.dataset import ASRDataset, Batch, manifest_reason, merge_counts
from wenet_lite.data.sampler import Mix
from wenet_lite.data.shards import Shard, ShardIndex, read_shard
from wenet_lite.data.storage import ShardError
from wenet_lite.data.tokenizer import Tokenizer

__all__ = [
    "ShardDataset",
    "ShardPart",
    "ShardRequest",
    "ShardSampler",
    "StreamPlan",
    "filter_index",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardPart:
    """One training part as shards, each with the index of its usable utterances."""

    name: str
    shards: Tuple[Shard, ...]
    indexes: Tuple[ShardIndex, ...]

    @property
    def num_cuts(self) -> int:
        return sum(len(i.ids) for i in self.indexes)


def filter_index(
    index: ShardIndex, tokenizer: Tokenizer, data: DataConfig
) -> Tuple[ShardIndex, Dict[str, int]]:
    """A shard's index without the utterances unusable by their entry alone (the reasons of
    ``filter_cuts``), and those counted by reason."""
    kept, counts = [], Counter()
    for entry in zip(index.ids, index.seconds, index.texts):
        reason = manifest_reason(entry[1], entry[2], tokenizer, data)
        if reason is None:
            kept.append(entry)
        else:
            counts[reason] += 1
    ids, seconds, texts = (tuple(x) for x in zip(*kept)) if kept else ((), (), ())
    return ShardIndex(ids, seconds, texts), dict(counts)


class ShardRequest(NamedTuple):
    """Batch ``batch`` of this rank's read stream ``stream`` (-1: an empty batch)."""

    epoch: int
    stream: int
    batch: int


@dataclass(frozen=True)
class StreamPlan:
    """One read stream's epoch: the shards it reads, in order, and the batches it makes."""

    shards: Tuple[int, ...]
    """shard numbers (into :attr:`ShardSampler.shards`), in reading order"""
    batches: Tuple[Tuple[str, ...], ...]
    first_shard: Tuple[int, ...]
    """per batch k: the position in ``shards`` of the first shard holding a cut of batch k or
    a later one (where a reader opened at batch k starts)"""
    batch_of: Dict[str, int]


class ShardSampler:
    """Yields :class:`ShardRequest` for :class:`ShardDataset`; the interface of
    :class:`~wenet_lite.data.sampler.BucketingSampler` (epochs, counts, resume state)."""

    def __init__(
        self,
        parts: List[ShardPart],
        max_batch_seconds: float,
        shuffle: bool,
        seed: int,
        world_size: int = 1,
        rank: int = 0,
        streams: int = 1,
        shuffle_buffer: int = 500,
        sort_buffer: int = 200,
        weights: Optional[Dict[str, float]] = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
        self.shards: List[Tuple[Shard, ShardIndex, str]] = [
            (s, i, p.name) for p in parts for s, i in zip(p.shards, p.indexes)
        ]
        self.num_cuts = sum(len(i.ids) for _, i, _ in self.shards)
        if self.num_cuts == 0:
            raise ValueError("cannot sample batches from shards without usable utterances")
        self.max_batch_seconds = max_batch_seconds
        self.shuffle = shuffle
        self.seed = seed
        self.world_size = world_size
        self.rank = rank
        self.streams = max(1, streams)
        self.shuffle_buffer = max(1, shuffle_buffer)
        self.sort_buffer = max(1, sort_buffer)
        self.weights = weights
        self.shares: Dict[str, int] = {}
        if weights is not None:
            counts = Counter()
            for _, index, part in self.shards:
                counts[part] += len(index.ids)
            self.shares = Mix(weights, {}).shares(dict(counts), self.num_cuts)
        slots = world_size * self.streams
        if len(self.shards) < slots:
            _log.warning(
                "%d shard(s) for %d rank(s) x %d read stream(s): some streams read nothing and "
                "their ranks wait; write more, smaller shards (`wenet-lite prepare shards`)",
                len(self.shards), world_size, self.streams,
            )  # fmt: skip
        self.epoch = 1
        self._skip = 0
        self._plans: Dict[int, List[StreamPlan]] = {}

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._skip = 0
        self.epoch = epoch

    # ------------------------------------------------------------------ the plan

    def epoch_shards(self, epoch: int) -> List[int]:
        """The shard numbers an epoch reads, before shuffling."""
        if self.weights is None:
            return list(range(len(self.shards)))
        chosen: List[int] = []
        for part in sorted(self.shares):
            mine = [n for n, (_, _, p) in enumerate(self.shards) if p == part]
            size = sum(len(self.shards[n][1].ids) for n in mine)
            share = self.shares[part]
            begin, end = (epoch - 1) * share, epoch * share  # this epoch's utterances
            at = (begin // size) * size  # utterances before the pass `begin` falls in
            index = begin // size
            while at < end:
                for n in self._pass(part, mine, index):
                    if begin <= at < end:
                        chosen.append(n)
                    at += len(self.shards[n][1].ids)
                index += 1
        return chosen

    def _pass(self, part: str, shards: List[int], index: int) -> List[int]:
        order = list(shards)
        if self.shuffle:
            random.Random(f"{self.seed}/{part}/{index}").shuffle(order)
        return order

    def plan(self, epoch: int) -> List[StreamPlan]:
        """Every stream's plan of ``epoch``, all ranks (slot ``rank * streams + stream``)."""
        if epoch not in self._plans:
            self._plans = {epoch: self._make_plan(epoch)}  # the latest epoch only
        return self._plans[epoch]

    def _make_plan(self, epoch: int) -> List[StreamPlan]:
        order = self.epoch_shards(epoch)
        if self.shuffle:
            random.Random(f"{self.seed}/shards/{epoch}").shuffle(order)
        slots = self.world_size * self.streams
        loads, assigned = [0.0] * slots, [[] for _ in range(slots)]
        for n in order:
            slot = min(range(slots), key=lambda s: (loads[s], s))
            assigned[slot].append(n)
            loads[slot] += sum(self.shards[n][1].seconds)
        return [self._stream_plan(epoch, s, shards) for s, shards in enumerate(assigned)]

    def _stream_plan(self, epoch: int, slot: int, shards: List[int]) -> StreamPlan:
        rng = random.Random(f"{self.seed}/{epoch}/{slot}")
        items = [
            (cut_id, seconds, pos)
            for pos, n in enumerate(shards)
            for cut_id, seconds in zip(self.shards[n][1].ids, self.shards[n][1].seconds)
        ]
        if self.shuffle:
            items = _buffer_shuffle(items, self.shuffle_buffer, rng)
        batches: List[List[Tuple[str, float, int]]] = []
        for start in range(0, len(items), self.sort_buffer):
            pool = sorted(items[start : start + self.sort_buffer], key=lambda x: (x[1], x[0]))
            packed: List[List[Tuple[str, float, int]]] = [[]]
            total = 0.0
            for item in pool:
                if packed[-1] and total + item[1] > self.max_batch_seconds:
                    packed.append([])
                    total = 0.0
                packed[-1].append(item)
                total += item[1]
            if self.shuffle:
                rng.shuffle(packed)
            batches.extend(b for b in packed if b)
        first = [min(pos for _, _, pos in b) for b in batches]
        for k in range(len(first) - 2, -1, -1):
            first[k] = min(first[k], first[k + 1])
        batch_of = {cut_id: k for k, b in enumerate(batches) for cut_id, _, _ in b}
        return StreamPlan(
            tuple(shards), tuple(tuple(c for c, _, _ in b) for b in batches), tuple(first), batch_of
        )

    def _rank_requests(self, epoch: int, rank: int) -> List[Tuple[int, int]]:
        """(stream, batch) of a rank's epoch: its streams' batches in turn."""
        plans = self.plan(epoch)[rank * self.streams : (rank + 1) * self.streams]
        out: List[Tuple[int, int]] = []
        for k in range(max((len(p.batches) for p in plans), default=0)):
            out.extend((s, k) for s, p in enumerate(plans) if k < len(p.batches))
        return out

    # ------------------------------------------------------------------ the sampler interface

    def num_batches(self) -> int:
        """Batches every rank takes in the current epoch (the most any rank has)."""
        return max(len(self._rank_requests(self.epoch, r)) for r in range(self.world_size))

    def __iter__(self) -> Iterator[ShardRequest]:
        skip, self._skip = self._skip, 0
        requests = self._rank_requests(self.epoch, self.rank)
        total = self.num_batches()
        for i in range(skip, total):
            stream, k = requests[i] if i < len(requests) else (-1, -1)
            yield ShardRequest(self.epoch, stream, k)

    def state_dict(self, batches_done: int) -> Dict[str, Any]:
        return {
            "epoch": self.epoch,
            "batches_done": batches_done,
            "num_cuts": self.num_cuts,
            "world_size": self.world_size,
            "streams": self.streams,
            "shards": len(self.shards),
            "num_batches": self.num_batches(),
            "mix": dict(sorted(self.weights.items())) if self.weights is not None else None,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> int:
        """Continue the saved epoch after its ``batches_done``; returns the batches done."""
        mix = dict(sorted(self.weights.items())) if self.weights is not None else None
        if state.get("mix") != mix:
            raise ValueError(
                f"cannot resume the sampler: the checkpoint mixed parts {state.get('mix')}, this "
                f"run {mix}; the batches would differ"
            )
        now = {"num_cuts": self.num_cuts, "shards": len(self.shards)}
        for key, value in now.items():
            if int(state.get(key, -1)) != value:
                raise ValueError(
                    f"cannot resume the sampler: the checkpoint was written with {key} "
                    f"{state.get(key)}, this run has {value}; the batches would differ"
                )
        self.epoch = int(state["epoch"])
        self._skip = int(state["batches_done"])
        if int(state.get("streams", -1)) != self.streams:
            self.load_resized(state)
            _log.warning(
                "the checkpoint read shards in %s stream(s) a rank (data.num_workers), this run "
                "in %d: epoch %d resumes past the same share of its batches, planned anew (not "
                "the uninterrupted run's order)", state.get("streams"), self.streams, self.epoch,
            )  # fmt: skip
        return self._skip

    def load_resized(self, state: Dict[str, Any]) -> int:
        """Continue a checkpoint of another number of ranks past the same share of its epoch
        (not exact; see BucketingSampler.load_resized). Returns the batches counted as done."""
        self.epoch = int(state["epoch"])
        theirs = max(1, int(state.get("num_batches", 0)) or self.num_batches())
        share = int(state["batches_done"]) / theirs
        self._skip = min(int(share * self.num_batches()), self.num_batches())
        return self._skip


def _buffer_shuffle(items: List, size: int, rng: random.Random) -> List:
    """The order a shuffle buffer of ``size`` gives: each new item takes the place of a random
    held one, which is emitted; what is held at the end is emitted shuffled."""
    held: List = []
    out: List = []
    for item in items:
        if len(held) < size:
            held.append(item)
            continue
        j = rng.randrange(size)
        out.append(held[j])
        held[j] = item
    rng.shuffle(held)
    out.extend(held)
    return out


class _StreamReader:
    """Reads one stream's shards front to back and hands out its batches in order."""

    def __init__(self, sampler: ShardSampler, plan: StreamPlan, epoch: int, batch: int,
                 skip_bad: bool) -> None:  # fmt: skip
        self.sampler, self.plan, self.epoch, self.next = sampler, plan, epoch, batch
        self.skip_bad = skip_bad
        self.audio = True
        self.position = plan.first_shard[batch] if batch < len(plan.batches) else len(plan.shards)
        self.cuts: Optional[Iterator[Cut]] = None
        self.held: Dict[str, Cut] = {}
        self.lost: Dict[str, str] = {}  # cut id -> skip reason (its shard failed)

    def batch(self, k: int) -> Tuple[List[Cut], Dict[str, int]]:
        """Batch ``k``'s cuts (with their audio) and the ones lost with a bad shard."""
        wanted = self.plan.batches[k]
        while any(c not in self.held and c not in self.lost for c in wanted):
            if not self._read_one(k):
                missing = [c for c in wanted if c not in self.held and c not in self.lost]
                raise ShardError(
                    f"utterance(s) {', '.join(missing[:3])} are not in the shards that index "
                    "them (shards changed since they were listed?)"
                )
        self.next = k + 1
        lost = Counter(self.lost.pop(c) for c in wanted if c in self.lost)
        return [self.held.pop(c) for c in wanted if c in self.held], dict(lost)

    def _read_one(self, k: int) -> bool:
        """Read the next cut into ``held`` (if a batch >= k needs it); False at the end."""
        while True:
            if self.cuts is None:
                if self.position >= len(self.plan.shards):
                    return False
                self.cuts = read_shard(self._shard(), self.audio)
            try:
                cut = next(self.cuts, None)
            except ShardError as e:
                self._bad_shard(e)
                return True  # its unread cuts are lost now: the batch may be complete
            if cut is None:
                self.cuts = None
                self.position += 1
                continue
            if self.plan.batch_of.get(cut.id, -1) >= k:
                self.held[cut.id] = cut
            return True

    def _shard(self) -> Shard:
        return self.sampler.shards[self.plan.shards[self.position]][0]

    def _bad_shard(self, error: ShardError) -> None:
        """A shard failed: stop (naming it), or with ``skip_bad`` count its unread cuts."""
        if not self.skip_bad:
            raise ShardError(f"{error} (data.skip_bad_shards: true skips such a shard)") from None
        _log.warning("skipping the rest of a bad shard: %s", error)
        index = self.sampler.shards[self.plan.shards[self.position]][1]
        for cut_id in index.ids:
            if cut_id not in self.held and self.plan.batch_of.get(cut_id, -1) >= self.next:
                self.lost[cut_id] = "unreadable_audio"
        self.cuts = None
        self.position += 1


class ShardDataset(torch.utils.data.Dataset):
    """Map-style dataset of :class:`ShardRequest`: loads a planned batch from its stream's
    shards (each worker keeps a reader per stream it serves) and returns a Batch."""

    def __init__(self, sampler: ShardSampler, dataset: ASRDataset, skip_bad: bool) -> None:
        self.sampler = sampler
        self.dataset = dataset
        self.skip_bad = skip_bad
        self._readers: Dict[int, _StreamReader] = {}

    def __getitem__(self, request: ShardRequest) -> Batch:
        epoch, stream, k = request
        if stream < 0:
            return self.dataset[(epoch, CutSet.from_cuts([]))]
        reader = self._readers.get(stream)
        if reader is None or reader.epoch != epoch or reader.next != k:
            plan = self.sampler.plan(epoch)[self.sampler.rank * self.sampler.streams + stream]
            reader = _StreamReader(self.sampler, plan, epoch, k, self.skip_bad)
            # Stored fbank and no speed perturbation: the audio would never be decoded.
            data = self.dataset
            reader.audio = not (data.stored_fbank and set(data.speed_factors) == {1.0})
            self._readers[stream] = reader
        cuts, lost = reader.batch(k)
        batch = self.dataset[(epoch, CutSet.from_cuts(cuts))]
        merge_counts(batch.skipped, lost)
        return batch
