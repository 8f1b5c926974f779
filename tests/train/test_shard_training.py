"""Training from shards: the same utterances as the local part each epoch, an interrupted run
resumes exactly (with DataLoader workers reading shards), and parts mix by weight whether
local or sharded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wenet_lite.config import load_config
from wenet_lite.data.prepare_shards import prepare_shards
from wenet_lite.train.trainer import TrainOptions, TrainResult, train

TINY = Path("conf/tiny_test.yaml")
RANDOM = (
    "encoder.dropout=0.1",
    "specaug.enabled=true",
    "data.speed_perturb=[0.9,1.0,1.1]",
    "train.accum_grad=2",
    "train.max_epochs=2",
    "data.max_batch_seconds=12",
    "data.max_duration=12",
    "data.sort_buffer=8",
    "data.shuffle_buffer=4",  # small: a resumed stream opens past its first shards
)


@pytest.fixture(scope="module")
def shards(synthetic_corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train_shards")
    cfg = load_config(TINY)
    prepare_shards(synthetic_corpus.data, "train-clean-100", out, 6, None, cfg.features,
                   cfg.train.seed, False)  # fmt: skip
    return out


def _train(data, exp: Path, tok: Path, *overrides: str, **kwargs) -> TrainResult:
    kwargs.setdefault("train_parts", ("train-clean-100",))
    return train(TrainOptions(TINY, data, exp, overrides, dev_parts=(), tokenizer=tok,
                              progress_bar=False, device="cpu", **kwargs))  # fmt: skip


def test_training_from_shards_resumes_exactly(synthetic_corpus, shards, tmp_path) -> None:
    tok = synthetic_corpus.tokenizer
    workers = "data.num_workers=2"  # two read streams, one per worker
    full = _train(shards, tmp_path / "full", tok, *RANDOM, workers)
    assert full.epoch == 3 and len(full.losses) >= 6
    exp = tmp_path / "cut"
    a = _train(shards, exp, tok, *RANDOM, workers, "train.max_steps=2")
    b = _train(shards, exp, tok, *RANDOM, workers, "train.max_steps=5", resume=True)
    c = _train(shards, exp, tok, *RANDOM, workers, resume=True)
    assert {**a.losses, **b.losses, **c.losses} == full.losses  # exactly, step by step
    assert full.model is not None and c.model is not None
    for key, value in full.model.state_dict().items():
        assert torch.equal(value, c.model.state_dict()[key]), key
    # Resumed with another number of read streams, the epoch is planned anew: a warning, and
    # not the uninterrupted run's losses (the plan is what makes the resume exact).
    other = tmp_path / "other"
    _train(shards, other, tok, *RANDOM, workers, "train.max_steps=2")
    d = _train(shards, other, tok, *RANDOM, "data.num_workers=1", "train.max_steps=5", resume=True)
    assert d.losses != b.losses
    assert "planned anew (not the uninterrupted run's order)" in (other / "train.log").read_text()


def test_a_local_part_and_a_sharded_part_mix_by_weight(synthetic_corpus, shards, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(shards, data)
    shutil.copytree(synthetic_corpus.data / "dev-clean", data / "dev-clean")  # a local part
    parts = ("train-clean-100", "dev-clean")
    result = _train(data, tmp_path / "exp", synthetic_corpus.tokenizer, "train.max_epochs=1",
                    train_parts=parts, train_weights=(1.0, 1.0))  # fmt: skip
    log = (tmp_path / "exp" / "train.log").read_text()
    assert "dev-clean: 1 shard(s), 10 utterances (local)" in log
    # 65 utterances an epoch, half from each part: the local part's 10 repeat
    assert "utterances per epoch: train-clean-100 33 (weight 1), dev-clean 32 (weight 1)" in log
    assert result.step > 0
