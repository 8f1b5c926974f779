"""compute-cmvn: statistics of unaugmented fbank, bad audio skipped, workers change nothing."""

import numpy as np
import torch
from lhotse import CutSet

from wenet_lite.config import load_config
from wenet_lite.data.compute_cmvn import compute_cmvn
from wenet_lite.data.dataset import load_features
from wenet_lite.data.manifest import load_cuts

FEATURES = load_config("conf/tiny_test.yaml").features


def test_stats_match_the_features_and_skip_bad_audio(synthetic_corpus, salted_cuts) -> None:
    bad, _ = salted_cuts
    good = list(load_cuts(synthetic_corpus.data / "dev-clean").subset(first=4))
    stats, skipped = compute_cmvn(CutSet.from_cuts(good + list(bad)), FEATURES, progress=False)
    # Only unusable audio is skipped: transcripts and durations do not matter for CMVN.
    assert skipped == {"missing_audio": 1, "unreadable_audio": 2, "empty_audio": 2,
                       "silent_audio": 1}  # fmt: skip
    usable = [c for c in bad if c.id in ("bad-5-frames", "bad-below-min", "bad-long-text",
                                         "bad-too-long", "bad-no-text", "bad-blank-text",
                                         "bad-unknown-chars")]  # fmt: skip
    feats = torch.cat([load_features(c, FEATURES) for c in good + usable]).double()  # (T, F)
    assert stats.count == feats.size(0)
    mean, var = stats.mean_var()
    np.testing.assert_allclose(mean, feats.mean(0).numpy(), rtol=1e-9)
    np.testing.assert_allclose(var, feats.var(0, unbiased=False).numpy(), rtol=1e-6)
    workers, _ = compute_cmvn(CutSet.from_cuts(good + list(bad)), FEATURES, 2, progress=False)
    assert workers.count == stats.count
    np.testing.assert_allclose(workers.sum, stats.sum, rtol=1e-12)
