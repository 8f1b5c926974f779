"""SpecAugment (Park et al., 2019): frequency and time masking of fbank features for training.

Masked values are set to the utterance's own per-bin mean over its frames, not to 0. Global CMVN
runs inside the model, after this, on raw log-mel features; there 0 is a real and very loud or
very quiet value depending on the bin (log-mel means range over ~10 nats across bins), so a
zero mask would inject a strong artificial pattern. The per-utterance mean is what the model's
CMVN maps to about 0, which is what "masked out" means in the paper's normalised features.

Widths are drawn uniformly from 1..max (a requested mask is always applied), starts uniformly
where the band fits. A time mask is also capped at ``max_time_ratio`` of the utterance's frames
so that short utterances keep most of their content (the paper's upper bound p).

Shapes: the legend in ``wenet_lite``; n masks.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["apply_masks", "draw_masks", "spec_augment"]


def spec_augment(
    feats: torch.Tensor,
    generator: torch.Generator,
    num_freq_masks: int,
    max_freq_width: int,
    num_time_masks: int,
    max_time_width: int,
    lengths: Optional[torch.Tensor] = None,
    max_time_ratio: float = 0.2,
) -> torch.Tensor:
    """Return a masked copy of ``feats``; the input is never modified.

    Args:
        feats: (T_in, F) or (B, T_in, F) raw log-mel features.
        generator: the only source of randomness (seed it for reproducible masks).
        num_freq_masks: frequency bands masked per utterance.
        max_freq_width: widest frequency band, in mel bins.
        num_time_masks: time spans masked per utterance.
        max_time_width: longest time span, in frames; also capped at ``max_time_ratio`` * T_b.
        lengths: (B,) valid frames per utterance of a padded batch (default: all T). Padding
            frames are neither masked nor counted in the mean.
        max_time_ratio: largest fraction of an utterance one time mask may cover.

    Returns:
        Tensor of the shape and dtype of ``feats``.
    """
    for name, value in (
        ("num_freq_masks", num_freq_masks),
        ("max_freq_width", max_freq_width),
        ("num_time_masks", num_time_masks),
        ("max_time_width", max_time_width),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if not 0.0 <= max_time_ratio <= 1.0:
        raise ValueError(f"max_time_ratio must be in [0, 1], got {max_time_ratio}")
    if feats.dim() not in (2, 3):
        raise ValueError(
            f"expected features (T_in, F) or (B, T_in, F), got shape {tuple(feats.shape)}"
        )
    x = feats if feats.dim() == 3 else feats.unsqueeze(0)  # (B, T_in, F)
    batch, frames, bins = x.shape
    lens = _check_lengths(lengths, batch, frames)  # (B,) on CPU
    masked = draw_masks(
        lens, frames, bins, generator, num_freq_masks, max_freq_width, num_time_masks,
        max_time_width, max_time_ratio,
    )  # fmt: skip
    out = apply_masks(x, masked, lens)
    return out if feats.dim() == 3 else out.squeeze(0)


def draw_masks(
    lens: torch.Tensor,
    frames: int,
    bins: int,
    generator: torch.Generator,
    num_freq_masks: int,
    max_freq_width: int,
    num_time_masks: int,
    max_time_width: int,
    max_time_ratio: float = 0.2,
) -> torch.Tensor:
    """(B, T_in, F) bool on the CPU: which values of a padded batch with (B,) valid frames
    ``lens`` to mask; padding frames never are. The draws depend on the lengths and the
    generator only, not on ``frames`` (the padded length)."""
    batch = lens.shape[0]
    freq_cap = torch.full((batch,), min(max_freq_width, bins), dtype=torch.long)
    freq_mask = _band_mask(num_freq_masks, freq_cap, torch.full_like(lens, bins), bins, generator)
    time_cap = torch.minimum((lens * max_time_ratio).floor().long(), torch.tensor(max_time_width))
    time_mask = _band_mask(num_time_masks, time_cap, lens, frames, generator)
    valid = torch.arange(frames).unsqueeze(0) < lens.unsqueeze(1)  # (B, T_in)
    return (time_mask.unsqueeze(2) | freq_mask.unsqueeze(1)) & valid.unsqueeze(2)


def apply_masks(x: torch.Tensor, masked: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """A new (B, T_in, F) tensor: ``x`` with its ``masked`` values (from :func:`draw_masks`)
    set to their utterance's per-bin mean over its (B,) ``lens`` valid frames, on x's device."""
    lens = lens.cpu()
    valid = torch.arange(x.size(1)).unsqueeze(0) < lens.unsqueeze(1)  # (B, T_in)
    count = lens.clamp(min=1)  # (B,)
    if x.device.type == "cuda":  # copies from pinned memory do not wait for the GPU's queue
        masked, valid, count = masked.pin_memory(), valid.pin_memory(), count.pin_memory()
    masked = masked.to(x.device, non_blocking=True)
    return torch.where(masked, _utterance_mean(x, valid, count), x)


def _utterance_mean(x: torch.Tensor, valid: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per-bin mean over each utterance's valid frames: (B, T_in, F) -> (B, 1, F); (B,)
    ``count`` valid frames (at least 1)."""
    keep = valid.to(x.device, non_blocking=True).to(x.dtype).unsqueeze(2)  # (B, T_in, 1)
    count = count.to(x.device, non_blocking=True).to(x.dtype).view(-1, 1, 1)  # (B, 1, 1)
    return (x * keep).sum(dim=1, keepdim=True) / count  # (B, 1, F)


def _check_lengths(lengths: Optional[torch.Tensor], batch: int, frames: int) -> torch.Tensor:
    if lengths is None:
        return torch.full((batch,), frames, dtype=torch.long)
    lens = lengths.detach().cpu().long()
    if lens.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if bool((lens < 0).any()) or bool((lens > frames).any()):
        raise ValueError(f"lengths must lie in [0, {frames}], got {lens.tolist()}")
    return lens


def _band_mask(
    num_masks: int,
    max_width: torch.Tensor,
    extent: torch.Tensor,
    size: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """(B, size) bool: ``num_masks`` bands per row, widths in 1..max_width[b] within extent[b].

    A row with max_width 0 gets no band. Draws happen on the generator's device, then move to
    CPU, so a CPU generator gives the same masks whatever device the features live on.
    """
    batch = extent.shape[0]
    if num_masks == 0:
        return torch.zeros(batch, size, dtype=torch.bool)
    dev = generator.device
    u = torch.rand(batch, num_masks, generator=generator, device=dev).cpu()  # (B, n)
    v = torch.rand(batch, num_masks, generator=generator, device=dev).cpu()  # (B, n)
    cap = max_width.unsqueeze(1)  # (B, 1)
    width = torch.where(cap > 0, (u * cap).floor().long() + 1, 0)  # (B, n), 1..cap or 0
    start = (v * (extent.unsqueeze(1) - width + 1)).floor().long()  # (B, n), 0..extent-width
    pos = torch.arange(size).view(1, 1, size)
    inside = (pos >= start.unsqueeze(2)) & (pos < (start + width).unsqueeze(2))  # (B, n, size)
    return inside.any(dim=1)  # (B, size)
