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
from wenet_lite.config.fields import Setting, literal, raised
from wenet_lite.data.commands import worker_opt_in
from wenet_lite.data.dataset import ASRDataset, as_is, filter_cuts, merge_counts
from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.sampler import BucketingSampler, Mix
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
from wenet_lite.data.store_fbank import stored_fbank_usable
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.train.dist import DistInfo
from wenet_lite.train.precision import precision_note

__all__ = [
    "TrainData",
    "build_loaders",
    "fbank_on_device",
    "load_parts",
    "load_train_data",
    "train_and_dev_loaders",
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
        raise raised(
            FileNotFoundError,
            f"{literal(folder)}: no prepared part '{literal(part)}' (run `wenet-lite prepare` "
            "first, or choose parts with {train}/{dev})",
            train=Setting("train_parts"), dev=Setting("dev_parts"),
        )  # fmt: skip
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
        collate_fn=as_is,
        num_workers=cfg.data.num_workers,
        persistent_workers=cfg.data.num_workers > 0,  # forked once: see _start_workers
        pin_memory=info.device.type == "cuda",
        # Its own generator: creating an iterator must not draw from the global RNG, whose
        # state (dropout) a resumed run restores exactly.
        generator=torch.Generator().manual_seed(cfg.train.seed),
        worker_init_fn=worker_opt_in(),  # the data-commands choice, spawned workers too
    )


def train_and_dev_loaders(
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    layers: List[Tuple[int, int]],
    train: TrainData,
    dev_cuts: Optional[CutSet],
    info: DistInfo,
    weights: Optional[Dict[str, float]],
) -> Dict[str, Any]:
    """Local parts: :func:`build_loaders`; sharded ones: the shard loader, then the dev loader."""
    if train.cuts is not None:
        mix = Mix(weights, train.part_of) if weights is not None else None
        return build_loaders(cfg, tokenizer, layers, train.cuts, dev_cuts, info, mix)
    out = shard_loader(cfg, tokenizer, layers, train, info, weights,
                       fbank_on_device(cfg, info.device))  # fmt: skip
    dev = build_loaders(cfg, tokenizer, layers, None, dev_cuts, info)
    return {**dev, **out}


def build_loaders(
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    layers: List[Tuple[int, int]],
    train_cuts: Optional[CutSet],
    dev_cuts: Optional[CutSet],
    info: DistInfo,
    mix: Optional[Mix] = None,
) -> Dict[str, Any]:
    """The train loader of local cuts (None: only the dev loader) and the dev loader."""
    out: Dict[str, Any] = {"train_filtered": {}, "dev_filtered": {}, "dev_loader": None}
    if train_cuts is not None:
        out.update(_local_train_loader(cfg, tokenizer, layers, train_cuts, info, mix))
    line, warning = precision_note(cfg.train.precision, info.device, cfg.encoder.d_model)
    _log.info("%s", line)
    if warning and info.is_main:
        _log.warning("%s", warning)
    if dev_cuts is not None:
        dev_kept, out["dev_filtered"] = filter_cuts(dev_cuts, tokenizer, cfg.data)
        _log_filtered("dev", len(dev_cuts), out["dev_filtered"])
        dev_sampler = _sampler(cfg, dev_kept, False, info)
        out["dev_loader"] = _loader(cfg, tokenizer, layers, dev_sampler, False, info)
        _start_workers(out["dev_loader"])
    return out


def _local_train_loader(
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    layers: List[Tuple[int, int]],
    train_cuts: CutSet,
    info: DistInfo,
    mix: Optional[Mix],
) -> Dict[str, Any]:
    kept, filtered = filter_cuts(train_cuts, tokenizer, cfg.data)
    _log_filtered("train", len(train_cuts), filtered)
    out: Dict[str, Any] = {"train_filtered": filtered}
    out["sampler"] = _sampler(cfg, kept, True, info, mix)
    if mix is not None:
        sampler = out["sampler"]
        drawn = [f"{p} {sampler.shares[p]} of {len(sampler.parts[p])} (weight {w:g})"
                 for p, w in mix.weights.items()]  # fmt: skip
        _log.info("parts mixed by weight, utterances per epoch: %s", ", ".join(drawn))
    on_device = fbank_on_device(cfg, info.device)
    stored = not on_device and stored_fbank_usable(kept, cfg.features)
    out["train_loader"] = _loader(
        cfg, tokenizer, layers, out["sampler"], True, info, stored, on_device
    )
    _log.info("training fbank computed %s", f"on {info.device}" if on_device else "in workers")
    return out


def _start_workers(loader: torch.utils.data.DataLoader) -> None:
    """Fork a loader's (persistent) workers now, before training grows this process. A fork
    write-protects every page of the parent's heap, and the trainer's first write to each
    page afterwards costs a copy: with workers forked anew every epoch, and the dev loader's
    after the first epoch, a bf16 demo run on the CPU took 1.6-2x as long a step from its
    second epoch on (``wenet-lite train`` of the demo config over three epochs). The train loader's
    workers start with the first epoch, before the growth; the dev loader's would start after
    it, so they start here (the batches they begin loading are dropped when the dev set is
    first read)."""
    if loader.num_workers > 0:
        iter(loader)


def _log_filtered(split: str, total: int, filtered: Dict[str, int]) -> None:
    kept = total - sum(filtered.values())
    if kept == 0:
        raise ValueError(f"no usable {split} utterance: all {total} filtered out ({filtered})")
    detail = ", ".join(f"{n} {r}" for r, n in filtered.items()) or "none"
    _log.info("%s: %d utterances, %d kept; filtered before batching: %s", split, total, kept,
              detail)  # fmt: skip


def _sampler(
    cfg: ExperimentConfig, cuts: CutSet, train: bool, info: DistInfo, mix: Optional[Mix] = None
) -> BucketingSampler:
    return BucketingSampler(
        cuts,
        max_batch_seconds=cfg.data.max_batch_seconds,
        num_buckets=cfg.data.num_buckets,
        shuffle=train and cfg.data.shuffle,
        seed=cfg.train.seed,
        sort_first_epoch=train and cfg.data.sort_first_epoch,
        world_size=info.world_size,
        rank=info.rank,
        mix=mix,
    )


def _loader(
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    layers: List[Tuple[int, int]],
    sampler: BucketingSampler,
    train: bool,
    info: DistInfo,
    stored_fbank: bool = False,
    on_device: bool = False,
) -> torch.utils.data.DataLoader:
    dataset = ASRDataset(
        cfg.features, cfg.data, tokenizer, layers, cfg.train.seed, train, stored_fbank, on_device
    )
    return make_loader(dataset, sampler, cfg, info)


def fbank_on_device(cfg: ExperimentConfig, device: torch.device) -> bool:
    """Whether training batches carry samples whose fbank the trainer computes on ``device``."""
    return cfg.data.fbank == "device" or (cfg.data.fbank == "auto" and device.type == "cuda")
