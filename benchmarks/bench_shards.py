#!/usr/bin/env python3
"""Training data readers on one core, side by side: audio seconds of training batches made
per wall second by one DataLoader worker's work (run here in the main process, one thread).

Usage:
    python benchmarks/bench_shards.py --data data/synthetic --part train-clean-100 \\
        [--config conf/synthetic_small.yaml] [--repeat 10] [--rounds 2]

Readers (each an epoch of the part, repeated ``--repeat`` times under new ids so that the run
is long enough to time; batches as training makes them, speed 1.0 so that stored fbank is
used where there is some):

- ``local audio``: the prepared part, one file opened and decoded per utterance, fbank computed;
- ``local stored fbank``: the same after `wenet-lite compute-fbank` (float16 arrays per file);
- ``shards audio``: Lhotse Shar shards (`prepare shards`), FLAC decoded, fbank computed;
- ``shards stored fbank``: shards written with ``--fbank``: the fbank read from the shard;
- ``shards audio, fbank on the device``: ``data.fbank: device`` (the default on CUDA): the
  worker only decodes (and dithers), the trainer computes the batch's fbank on its GPU;
- ``... (tarfile)``: the two shard readers with Python's ``tarfile`` (streaming mode ``r|*``)
  in place of the toolkit's tar reader (``data/tar_reader.py``), the reason it has its own.

The readers run interleaved, ``--rounds`` times each, and the table gives the best round.
Everything is written under a temporary folder and removed.
"""

from __future__ import annotations

import argparse
import contextlib
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple
from unittest import mock

import torch


def _repeat(cuts: List, times: int) -> List:
    from lhotse.utils import fastcopy

    out = []
    for r in range(times):
        for cut in cuts:
            sup = fastcopy(cut.supervisions[0], id=f"{cut.id}_r{r}")
            out.append(fastcopy(cut, id=f"{cut.id}_r{r}", supervisions=[sup]))
    return out


def _tarfile_members(location: str, stack: contextlib.ExitStack) -> Iterator[Tuple[str, bytes]]:
    """``tar_members`` with Python's tarfile, for the comparison rows."""
    f = stack.enter_context(open(location, "rb"))
    tar = stack.enter_context(tarfile.open(fileobj=f, mode="r|*"))
    for member in tar:
        if member.isfile():
            data = tar.extractfile(member)
            assert data is not None
            yield member.name, data.read()


def _with_tarfile(run: Callable[[], float]) -> Callable[[], float]:
    def patched() -> float:
        with mock.patch("wenet_lite.data.tar_reader.tar_members", _tarfile_members):
            return run()

    return patched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="prepared data dir")
    parser.add_argument("--part", default="train-clean-100")
    parser.add_argument("--config", default="conf/synthetic_small.yaml")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from lhotse import CutSet

    from wenet_lite.config import load_config
    from wenet_lite.data.dataset import ASRDataset
    from wenet_lite.data.manifest import load_cuts, save_cuts
    from wenet_lite.data.prepare_shards import prepare_shards
    from wenet_lite.data.sampler import BucketingSampler
    from wenet_lite.data.shard_sampler import ShardDataset, ShardSampler
    from wenet_lite.data.store_fbank import store_fbank
    from wenet_lite.data.tokenizer import Tokenizer
    from wenet_lite.host.cpu import cpu_model
    from wenet_lite.model.subsampling import subsampling_layers
    from wenet_lite.train.dist import DistInfo
    from wenet_lite.train.sources import load_train_data

    cfg = load_config(args.config, ("data.speed_perturb=[1.0]", "data.num_workers=0"))
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    cuts = _repeat(list(load_cuts(Path(args.data) / args.part)), args.repeat)
    hours = sum(c.duration for c in cuts) / 3600
    cpu = DistInfo(0, 1, 0, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        texts = (c.supervisions[0].text for c in cuts)
        tokenizer = Tokenizer.train(texts, cfg.tokenizer, root / "tokenizer.model")
        save_cuts(CutSet.from_cuts(cuts), root / "local" / "p" / "cuts.jsonl.gz")
        save_cuts(CutSet.from_cuts(cuts), root / "stored" / "p" / "cuts.jsonl.gz")
        store_fbank(root / "stored" / "p", cfg.features, cfg.train.seed, 0, False)
        for name, features in (("shards", None), ("shards_fbank", cfg.features)):
            prepare_shards(root / "local", "p", root / name, args.shard_size, None, features,
                           cfg.train.seed, False)  # fmt: skip

        def local(folder: str, stored: bool) -> Callable[[], float]:
            part = load_cuts(root / folder / "p")
            sampler = BucketingSampler(part, cfg.data.max_batch_seconds, 10, True, 0)
            data = ASRDataset(cfg.features, cfg.data, tokenizer, layers, 0, True, stored)
            return lambda: sum(float(data[r].feats_lens.sum()) for r in sampler)

        def shards(folder: str, stored: bool, on_device: bool = False) -> Callable[[], float]:
            train = load_train_data(str(root / folder), ["p"], root / "exp", cpu, False)
            assert train.shards is not None
            sampler = ShardSampler(train.shards, cfg.data.max_batch_seconds, True, 0)
            data = ASRDataset(cfg.features, cfg.data, tokenizer, layers, 0, True, stored,
                              on_device)  # fmt: skip

            def epoch() -> float:
                dataset = ShardDataset(sampler, data, False)  # a worker's readers, fresh
                return sum(float(dataset[r].feats_lens.sum()) for r in sampler)

            return epoch

        readers: Dict[str, Callable[[], float]] = {
            "local audio": local("local", False),
            "local stored fbank": local("stored", True),
            "shards audio": shards("shards", False),
            "shards stored fbank": shards("shards_fbank", True),
            "shards audio, fbank on the device": shards("shards", False, True),
            "shards audio (tarfile)": _with_tarfile(shards("shards", False)),
            "shards stored fbank (tarfile)": _with_tarfile(shards("shards_fbank", True)),
        }
        best: Dict[str, float] = {}
        for _ in range(args.rounds):
            for name, run in readers.items():
                start = time.perf_counter()
                frames = run()
                speed = frames * cfg.features.frame_shift_ms / 1000 / (time.perf_counter() - start)
                best[name] = max(best.get(name, 0.0), speed)
        size = sum(f.stat().st_size for f in (root / "shards" / "p").iterdir())
    print(
        f"\n{cpu_model()}, one thread; {len(cuts)} utterances, {hours:.2f} h; "
        f"shards of {args.shard_size}: {size / 1e6 / hours:.0f} MB an hour of audio (FLAC)"
    )
    print("\n| reader | audio s/s | vs local stored fbank |\n|---|---:|---:|")
    for name, speed in best.items():
        print(f"| {name} | {speed:,.0f} | {speed / best['local stored fbank']:.2f}x |")


if __name__ == "__main__":
    main()
