"""Where training utterances come from: prepared local parts, or shards anywhere.

``--data`` is a local folder, an ``http(s)://`` base URL or a ``pipe:`` command prefix (see
``data/shards.py``). Each train part is a local prepared part (``cuts.jsonl.gz``), Lhotse Shar
shards (``cuts.shards.json``) or WeNet shard tars (``data.list``). With no sharded part, training
runs as it always has (:class:`~wenet_lite.data.sampler.BucketingSampler`); with one, every
part is read as shards (a local part's files stand in as shards of 1000 utterances) and
batches are planned by :class:`~wenet_lite.data.shard_sampler.ShardSampler`.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from lhotse import CutSet

from wenet_lite.config import ExperimentConfig
from wenet_lite.data.dataset import ASRDataset, merge_counts
from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.shard_sampler import ShardDataset, ShardPart, ShardSampler, filter_index
from wenet_lite.data.shards import (
    Shard,
    ShardIndex,
    fbank_features_of,
    find_shards,
    index_wenet_shards,
    local_shards,
    read_index,
    read_shard,
)
from wenet_lite.data.storage import ShardError, Storage, open_location
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.train.dist import DistInfo

__all__ = [
    "TrainData",
    "load_parts",
    "load_train_data",
    "make_loader",
    "read_cmvn_bytes",
    "shard_loader",
]

_log = logging.getLogger("wenet_lite.train")
_WENET_REASONS = {"missing audio": "missing_audio", "unreadable audio": "unreadable_audio",
                  "no transcript": "empty_text"}  # fmt: skip


@dataclass
class TrainData:
    """The train parts: joined local cuts, or shards with their indexes."""

    cuts: Optional[CutSet] = None
    part_of: Dict[str, str] = field(default_factory=dict)
    shards: Optional[List[ShardPart]] = None
    skipped: Dict[str, int] = field(default_factory=dict)
    """utterances the shards' indexing left out, by reason (WeNet tars)"""
    fbank_features: List[Optional[Dict[str, Any]]] = field(default_factory=list)
    """per sharded part: the features its stored fbank was made with (None: none stored)"""

    def texts(self) -> Iterator[str]:
        if self.cuts is not None:
            yield from (cut_text(c) for c in self.cuts)
            return
        assert self.shards is not None
        for part in self.shards:
            for index in part.indexes:
                yield from index.texts


def load_parts(
    data: Union[str, Path], parts: Sequence[str], part_of: Optional[Dict[str, str]] = None
) -> CutSet:
    """Local parts' cuts joined; ``part_of`` (if given) gets each cut id's part, and a cut id
    that two parts share is a ValueError (its part would be ambiguous). A sharded part is read
    whole into memory (its audio too: for dev sets)."""
    cuts: List = []
    storage = Storage(str(data))
    for part in parts:
        found = _part_cuts(storage, part)
        if part_of is not None:
            for cut in found:
                if part_of.setdefault(cut.id, part) != part:
                    raise ValueError(
                        f"utterance {cut.id} is in both {part_of[cut.id]} and {part}: parts "
                        "mixed by weight must not share utterances"
                    )
        cuts.extend(found)
    return CutSet.from_cuts(cuts)


def _part_cuts(storage: Storage, part: str) -> List:
    sharded = find_shards(storage, part)
    if sharded is not None:
        return [cut for shard in sharded[1] for cut in read_shard(shard)]
    folder = Path(storage.base) / part
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder}: no prepared part '{part}' (run `wenet-lite prepare` first, or "
            "choose parts with --train-part/--dev-part)"
        )
    return list(load_cuts(folder))


def load_train_data(
    data: Union[str, Path], parts: Sequence[str], exp: Path, info: DistInfo, mixed: bool
) -> TrainData:
    """The train parts as local cuts, or (when any part is sharded) as shards with indexes."""
    storage = Storage(str(data))
    found = {part: find_shards(storage, part) for part in parts}
    if all(v is None for v in found.values()):
        part_of: Dict[str, str] = {}
        cuts = load_parts(data, parts, part_of if mixed else None)
        return TrainData(cuts=cuts, part_of=part_of)
    out = TrainData(shards=[])
    seen: Dict[str, str] = {}
    for part, sharded in found.items():
        if sharded is None:
            cuts = list(load_parts(data, [part]))
            shards = local_shards(part, cuts)
            indexes = [read_index(s) for s in shards]
            out.fbank_features.append(None)
        elif sharded[0] == "wenet":
            shards = sharded[1]
            indexes, skipped = _wenet_indexes(shards, exp / "shard_index", info)
            merge_counts(out.skipped, {_WENET_REASONS[r]: n for r, n in skipped.items()})
            out.fbank_features.append(None)
        else:
            shards = sharded[1]
            indexes = _read_indexes(shards)
            out.fbank_features.append(fbank_features_of(storage, part))
        for index in indexes:
            for cut_id in index.ids:
                if seen.setdefault(cut_id, part) != part:
                    raise ValueError(
                        f"utterance {cut_id} is in both {seen[cut_id]} and {part}: parts must "
                        "not share utterances"
                    )
        out.shards.append(ShardPart(part, tuple(shards), tuple(indexes)))
        n = sum(len(i.ids) for i in indexes)
        _log.info("%s: %d shard(s), %d utterances (%s)", part, len(shards), n,
                  sharded[0] if sharded else "local")  # fmt: skip
    return out


def _read_indexes(shards: List[Shard]) -> List[ShardIndex]:
    """Every Shar shard's index (its cuts file), 16 at a time: reading them is waiting (an
    http request or a ``pipe:`` command each)."""
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(read_index, shards))


def _wenet_indexes(
    shards: List[Shard], cache: Path, info: DistInfo
) -> Tuple[List[ShardIndex], Dict[str, int]]:
    """Rank 0 reads the tars once (cached in the experiment folder); the others wait."""
    result: List[Any] = [None]
    if info.is_main:
        result[0] = index_wenet_shards(shards, cache)
    if dist.is_initialized():
        dist.broadcast_object_list(result, src=0)
    return result[0]


def read_cmvn_bytes(data: Union[str, Path], exp: Path) -> Path:
    """``DATA/cmvn.json`` as a local file: a remote one is copied into ``exp`` first."""
    storage = Storage(str(data))
    if not storage.remote:
        return Path(storage.base) / "cmvn.json"
    local = exp / "cmvn.json"
    with open_location(storage.locate("cmvn.json")) as f:
        local.write_bytes(f.read())
    return local


def shard_loader(
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    layers: List[Tuple[int, int]],
    data: TrainData,
    info: DistInfo,
    weights: Optional[Dict[str, float]],
    on_device: bool,
) -> Dict[str, Any]:
    """The train sampler, loader and filter counts of sharded training data."""
    assert data.shards is not None
    filtered: Dict[str, int] = dict(data.skipped)
    parts = []
    for part in data.shards:
        kept = []
        for index in part.indexes:
            index, counts = filter_index(index, tokenizer, cfg.data)
            merge_counts(filtered, counts)
            kept.append(index)
        parts.append(dataclasses.replace(part, indexes=tuple(kept)))
    total = sum(p.num_cuts for p in data.shards) + sum(data.skipped.values())
    kept_n = sum(p.num_cuts for p in parts)
    if kept_n == 0:
        raise ValueError(f"no usable train utterance: all {total} filtered out ({filtered})")
    _log.info("train: %d utterances in shards, %d kept; filtered before batching: %s", total,
              kept_n, ", ".join(f"{n} {r}" for r, n in filtered.items()) or "none")  # fmt: skip
    sampler = ShardSampler(
        parts,
        max_batch_seconds=cfg.data.max_batch_seconds,
        shuffle=cfg.data.shuffle,
        seed=cfg.train.seed,
        world_size=info.world_size,
        rank=info.rank,
        streams=cfg.data.num_workers,
        shuffle_buffer=cfg.data.shuffle_buffer,
        sort_buffer=cfg.data.sort_buffer,
        weights=weights,
    )
    if weights is not None:
        drawn = [f"{p} {sampler.shares[p]} (weight {w:g})" for p, w in weights.items()]
        _log.info("parts mixed by weight, utterances per epoch: %s", ", ".join(drawn))
    wanted = dataclasses.asdict(cfg.features)
    stored = not on_device and all(f == wanted for f in data.fbank_features)
    if any(f is not None and f != wanted for f in data.fbank_features):
        _log.warning("fbank stored in the shards was made with other features: not used")
    dataset = ASRDataset(cfg.features, cfg.data, tokenizer, layers, cfg.train.seed, True,
                         stored, on_device)  # fmt: skip
    shard_data = ShardDataset(sampler, dataset, cfg.data.skip_bad_shards)
    loader = make_loader(shard_data, sampler, cfg, info)
    return {"sampler": sampler, "train_loader": _NamedErrors(loader), "train_filtered": filtered}


class _NamedErrors:
    """A DataLoader whose workers' ShardErrors arrive as their one-line message (PyTorch
    re-raises them with the worker's whole traceback as the message)."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader = loader
        self.num_workers = loader.num_workers

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self.loader
        except ShardError as e:
            lines = str(e).strip().splitlines()
            if len(lines) > 1 and "Traceback" in str(e):
                raise ShardError(lines[-1].split("ShardError: ", 1)[-1]) from None
            raise


def make_loader(
    dataset: torch.utils.data.Dataset, sampler: Any, cfg: ExperimentConfig, info: DistInfo
) -> torch.utils.data.DataLoader:
    """The DataLoader of a dataset that returns whole batches for ``sampler``'s requests."""
    return torch.utils.data.DataLoader(
        dataset,
        sampler=sampler,
        batch_size=None,
        collate_fn=_identity,
        num_workers=cfg.data.num_workers,
        persistent_workers=cfg.data.num_workers > 0,  # forked once: see trainer._start_workers
        pin_memory=info.device.type == "cuda",
        # Its own generator: creating an iterator must not draw from the global RNG, whose
        # state (dropout) a resumed run restores exactly.
        generator=torch.Generator().manual_seed(cfg.train.seed),
    )


def _identity(item: Any) -> Any:
    return item  # the dataset already returns whole padded batches
