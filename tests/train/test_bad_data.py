"""Bad data never stops training: every bad kind is skipped and counted exactly, per epoch."""

import json
from pathlib import Path

from lhotse import CutSet

from wenet_lite.data.dataset import SKIP_REASONS
from wenet_lite.data.manifest import load_cuts
from wenet_lite.train.trainer import TrainOptions, train


def test_salted_manifest_trains_and_counts_every_skip(
    synthetic_corpus, salted_cuts, make_data, tmp_path: Path
) -> None:
    bad, expected = salted_cuts
    good = load_cuts(synthetic_corpus.data / "train-clean-100")
    dev = load_cuts(synthetic_corpus.data / "dev-clean")
    dev_bad = [c for c in bad if c.id in ("bad-missing", "bad-no-text", "bad-silent")]
    data = make_data(
        {
            "salted": CutSet.from_cuts(list(bad) + list(good)),
            "dev": CutSet.from_cuts(list(dev) + dev_bad),
        }
    )
    exp = tmp_path / "exp"
    # Two DataLoader workers: their counts must add up in the main process.
    overrides = ("train.max_epochs=2", "data.num_workers=2")
    opts = TrainOptions(
        Path("conf/tiny_test.yaml"), data, exp, overrides, ("salted",), ("dev",),
        tokenizer=synthetic_corpus.tokenizer, progress_bar=False, device="cpu",
    )  # fmt: skip
    result = train(opts)
    assert result.epoch == 3 and result.step > 0
    losses = [v for v in result.losses.values() if v == v]  # all-skipped batches give NaN
    assert losses and all(v < float("inf") for v in losses)
    assert result.nonfinite_steps == 0

    zeros = dict.fromkeys(SKIP_REASONS, 0)
    dev_expected = {**zeros, "missing_audio": 1, "empty_text": 1, "silent_audio": 1}
    want = {"train": {"1": expected, "2": expected}, "dev": {"1": dev_expected, "2": dev_expected}}
    assert json.loads((exp / "skipped.json").read_text()) == want
    assert result.skipped == want
    log = (exp / "train.log").read_text()
    assert "epoch 1 train: skipped 1 missing_audio, 2 unreadable_audio" in log
    assert "filtered before batching" in log
