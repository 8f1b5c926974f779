"""SpecAugment: mask counts and widths, mean fill, padding, determinism, no in-place writes."""

from typing import List, Tuple

import pytest
import torch

from wenet_lite.features.specaug import spec_augment


def _runs(flags: torch.Tensor) -> List[Tuple[int, int]]:
    """(start, width) of each run of True in a 1-D bool tensor."""
    runs, start = [], None
    for i, f in enumerate(flags.tolist() + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


def _feats(t: int = 300, f: int = 40, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, f, generator=g) * 3 + torch.linspace(-5, 15, f)  # distinct bin means


def _masked(x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Which bins are masked over all frames, and which frames over all bins."""
    changed = x != y  # (T, F)
    return changed.all(dim=0), changed.all(dim=1)


def test_freq_masks_count_width_and_fill() -> None:
    x = _feats()
    for seed in range(30):
        g = torch.Generator().manual_seed(seed)
        y = spec_augment(
            x, g, num_freq_masks=1, max_freq_width=7, num_time_masks=0, max_time_width=0
        )
        bins, frames = _masked(x, y)
        runs = _runs(bins)
        assert len(runs) == 1 and 1 <= runs[0][1] <= 7
        assert not frames.any()
        start, width = runs[0]
        expected = x[:, start : start + width].mean(dim=0)  # per-bin utterance mean
        torch.testing.assert_close(y[:, start : start + width], expected.expand(300, width))
        assert torch.equal(y[:, bins.logical_not()], x[:, bins.logical_not()])


def test_two_masks_of_each_kind() -> None:
    x = _feats(t=1000)
    seen_two = 0
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        y = spec_augment(
            x, g, num_freq_masks=2, max_freq_width=5, num_time_masks=2, max_time_width=30
        )
        bins, frames = _masked(x, y)
        f_runs, t_runs = _runs(bins), _runs(frames)
        assert 1 <= len(f_runs) <= 2 and 1 <= len(t_runs) <= 2  # overlapping masks may merge
        assert all(w <= (5 if len(f_runs) == 2 else 10) for _, w in f_runs)
        assert all(w <= (30 if len(t_runs) == 2 else 60) for _, w in t_runs)
        seen_two += len(f_runs) == 2 and len(t_runs) == 2
        # Every changed value lies in a masked band or span.
        changed = x != y
        assert torch.equal(changed, bins.unsqueeze(0) | frames.unsqueeze(1))
    assert seen_two >= 10


def test_time_mask_clamped_for_short_utterances() -> None:
    x = _feats(t=50)
    widths = set()
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        y = spec_augment(
            x, g, num_freq_masks=0, max_freq_width=10, num_time_masks=1, max_time_width=40
        )
        ((_, width),) = _runs(_masked(x, y)[1])
        widths.add(width)
    assert max(widths) <= 10 and min(widths) >= 1  # 20% of 50 frames, not 40
    tiny = _feats(t=4)  # 20% of 4 frames rounds to 0: no time mask at all
    y = spec_augment(tiny, torch.Generator().manual_seed(0), 0, 0, 2, 40)
    assert torch.equal(y, tiny)


def test_deterministic_and_input_untouched() -> None:
    x = _feats()
    before = x.clone()
    args = dict(num_freq_masks=2, max_freq_width=10, num_time_masks=2, max_time_width=40)
    a = spec_augment(x, torch.Generator().manual_seed(7), **args)
    b = spec_augment(x, torch.Generator().manual_seed(7), **args)
    c = spec_augment(x, torch.Generator().manual_seed(8), **args)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(x, before)
    assert a.data_ptr() != x.data_ptr()


def test_batch_respects_lengths() -> None:
    batch = torch.stack([_feats(t=200, seed=s) for s in range(3)])  # (3, 200, 40)
    lens = torch.tensor([200, 120, 60])
    g = torch.Generator().manual_seed(3)
    y = spec_augment(
        batch,
        g,
        num_freq_masks=2,
        max_freq_width=8,
        num_time_masks=2,
        max_time_width=40,
        lengths=lens,
    )
    assert y.shape == batch.shape
    for b, n in enumerate(lens.tolist()):
        assert torch.equal(y[b, n:], batch[b, n:])  # padding untouched
        changed = y[b, :n] != batch[b, :n]
        assert changed.any()
        valid_mean = batch[b, :n].mean(dim=0)
        torch.testing.assert_close(y[b, :n][changed], valid_mean.expand(n, 40)[changed])
        masked_frames = int(changed.all(dim=1).sum())
        assert 1 <= masked_frames <= 2 * min(40, n // 5)  # two spans, each <= 20% of n


def test_zero_masks_is_identity_and_bad_args_fail() -> None:
    x = _feats()
    assert torch.equal(spec_augment(x, torch.Generator(), 0, 10, 0, 40), x)
    with pytest.raises(ValueError, match="num_time_masks must be >= 0"):
        spec_augment(x, torch.Generator(), 1, 10, -1, 40)
    with pytest.raises(ValueError, match="lengths"):
        spec_augment(x.unsqueeze(0), torch.Generator(), 1, 10, 1, 40, lengths=torch.tensor([301]))
    with pytest.raises(ValueError, match=r"\(T_in, F\) or \(B, T_in, F\)"):
        spec_augment(torch.zeros(5), torch.Generator(), 1, 1, 1, 1)
