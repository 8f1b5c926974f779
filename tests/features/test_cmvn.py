"""Global CMVN statistics: exact mean/variance, float64 accumulation, JSON round trip."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from wenet_lite.features.cmvn import VAR_FLOOR, CMVNStats, load_cmvn, save_cmvn


def _utterances(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 3.0, 6)
    return [
        (rng.standard_normal((int(n), 6)) * scale + 10.0).astype(np.float32)
        for n in rng.integers(1, 60, 9)
    ]


def test_stats_equal_numpy_over_concatenated_frames() -> None:
    utts = _utterances()
    stats = CMVNStats(6)
    for u in utts[:4]:
        stats.add(torch.from_numpy(u))  # tensors and arrays both accepted
    for u in utts[4:]:
        stats.add(u)
    allf = np.concatenate(utts).astype(np.float64)
    mean, var = stats.mean_var()
    assert stats.count == len(allf)
    np.testing.assert_allclose(mean, allf.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, allf.var(0), rtol=1e-9)
    _, istd = stats.mean_istd()
    np.testing.assert_allclose(istd, 1 / allf.std(0), rtol=1e-9)


def test_merge_equals_single_pass() -> None:
    utts = _utterances(1)
    whole, a, b = CMVNStats(6), CMVNStats(6), CMVNStats(6)
    for i, u in enumerate(utts):
        whole.add(u)
        (a if i % 2 else b).add(u)
    a.merge(b)
    assert a.count == whole.count
    np.testing.assert_allclose(a.mean_var()[1], whole.mean_var()[1], rtol=1e-12)


def test_accumulates_in_float64() -> None:
    """A float32 running sum of 2e6 frames near 1000 would lose the 1e-2 variance entirely."""
    stats = CMVNStats(1)
    block = (1000.0 + 0.1 * np.tile([-1.0, 1.0], 1000)).astype(np.float32)[:, None]
    for _ in range(1000):
        stats.add(block)
    ref = block.astype(np.float64)
    mean, var = stats.mean_var()
    assert mean[0] == pytest.approx(ref.mean(), rel=1e-12)
    assert var[0] == pytest.approx(ref.var(), rel=1e-6)


def test_constant_bin_is_floored() -> None:
    stats = CMVNStats(2)
    stats.add(np.stack([np.full(50, 3.0), np.arange(50.0)], axis=1))
    _, istd = stats.mean_istd()
    assert istd[0] == pytest.approx(1 / np.sqrt(VAR_FLOOR))
    assert istd[1] == pytest.approx(1 / np.arange(50.0).std())


def test_save_load_round_trip(tmp_path: Path) -> None:
    stats = CMVNStats(6)
    for u in _utterances(2):
        stats.add(u)
    path = tmp_path / "cmvn.json"
    stats.save(path)
    mean, istd = load_cmvn(path)
    ref_mean, ref_istd = stats.mean_istd()
    assert mean.dtype == torch.float32 and mean.shape == (6,) and istd.shape == (6,)
    torch.testing.assert_close(mean, torch.from_numpy(ref_mean).float(), rtol=0, atol=0)
    torch.testing.assert_close(istd, torch.from_numpy(ref_istd).float(), rtol=0, atol=0)
    assert json.loads(path.read_text())["count"] == stats.count


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no frames"):
        CMVNStats(3).mean_var()
    with pytest.raises(ValueError, match=r"shape \(T_in, 3\)"):
        CMVNStats(3).add(np.zeros((4, 5)))
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_cmvn(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_cmvn(bad)
    bad.write_text(json.dumps({"mean": [0.0, 1.0], "istd": [1.0]}))
    with pytest.raises(ValueError, match="bad.json.*shapes"):
        load_cmvn(bad)
    with pytest.raises(ValueError, match="positive"):
        save_cmvn(tmp_path / "x.json", [0.0], [0.0], 1)
