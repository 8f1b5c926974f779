"""The trainer's DataLoaders fork their workers once, while the trainer is small: a fork makes
the parent copy every page it writes afterwards, which slowed steps 1.6-2x when the loaders
forked anew every epoch (and the dev loader's after the first epoch)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import torch

from wenet_lite.config import load_config
from wenet_lite.data.manifest import load_cuts
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model.subsampling import subsampling_layers
from wenet_lite.train.dist import DistInfo
from wenet_lite.train.sources import build_loaders

TINY = Path("conf/tiny_test.yaml")


def _loaders(data: Path, tokenizer: Path, workers: int):
    cfg = load_config(TINY, (f"data.num_workers={workers}",))
    layers = subsampling_layers(cfg.encoder.subsampling_rate)
    return build_loaders(cfg, Tokenizer.load(tokenizer), layers,
                         load_cuts(data / "train-clean-100"), load_cuts(data / "dev-clean"),
                         DistInfo(0, 1, 0, torch.device("cpu")))  # fmt: skip


def _pids(loader) -> List[int]:
    return [w.pid for w in loader._iterator._workers]  # the live workers of a persistent loader


def _ids(loader) -> List[List[str]]:
    return [list(batch.ids) for batch in loader]


def test_workers_fork_once_and_the_batches_stay_the_same(synthetic_corpus) -> None:
    data, tokenizer = synthetic_corpus.data, synthetic_corpus.tokenizer
    forked = _loaders(data, tokenizer, 1)
    plain = _loaders(data, tokenizer, 0)
    # The dev loader's workers run before anything is read from it.
    dev_workers = _pids(forked["dev_loader"])
    assert len(dev_workers) == 1 and forked["dev_loader"]._iterator._workers[0].is_alive()
    # Reading it later drops what they began loading: the same batches as without workers.
    assert _ids(forked["dev_loader"]) == _ids(plain["dev_loader"])
    assert _ids(forked["dev_loader"]) == _ids(plain["dev_loader"])
    train_batches = []
    for epoch in (1, 2):
        for loaders in (forked, plain):
            loaders["sampler"].set_epoch(epoch)
        train_batches.append(_ids(forked["train_loader"]))
        assert train_batches[-1] == _ids(plain["train_loader"])
        if epoch == 1:
            train_workers = _pids(forked["train_loader"])
    assert train_batches[0] != train_batches[1]  # epoch 2 is shuffled anew
    # The same processes serve every epoch and every dev pass.
    assert _pids(forked["train_loader"]) == train_workers
    assert _pids(forked["dev_loader"]) == dev_workers
