"""Attention masks: padding, chunked streaming visibility and dynamic-chunk sampling.

Shapes: the legend in ``wenet_lite``. Masks are bool with True = may attend.
"""

from __future__ import annotations

from typing import Tuple

import torch

from wenet_lite.config import ChunkConfig

__all__ = ["valid_mask", "chunk_visibility", "attention_mask", "sample_chunk"]


def valid_mask(lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """True for real frames, False for padding: (B,) lengths -> (B, T)."""
    frames = torch.arange(max_len, device=lens.device)
    return frames.unsqueeze(0) < lens.unsqueeze(1)  # (B, T)


def chunk_visibility(
    num_frames: int, chunk_size: int, num_left_chunks: int, device: torch.device
) -> torch.Tensor:
    """(T, T) mask: query i sees keys of its own chunk and of ``num_left_chunks`` earlier chunks.

    ``chunk_size <= 0`` means full context; ``num_left_chunks < 0`` means all history.
    """
    if chunk_size <= 0:
        return torch.ones(num_frames, num_frames, dtype=torch.bool, device=device)
    chunk = torch.arange(num_frames, device=device) // chunk_size  # (T,)
    diff = chunk.unsqueeze(1) - chunk.unsqueeze(0)  # (T, T): query chunk - key chunk
    visible = diff >= 0
    if num_left_chunks >= 0:
        visible = visible & (diff <= num_left_chunks)
    return visible


def attention_mask(
    lens: torch.Tensor, num_frames: int, chunk_size: int, num_left_chunks: int
) -> torch.Tensor:
    """(B, T, T) mask combining chunk visibility and key padding.

    Every query also sees itself, so a padded query never has an empty row (an all -inf softmax
    row gives NaN, which would leak into valid frames through 0 * NaN in the value product).
    """
    visible = chunk_visibility(num_frames, chunk_size, num_left_chunks, lens.device)
    keys = valid_mask(lens, num_frames).unsqueeze(1)  # (B, 1, T)
    eye = torch.eye(num_frames, dtype=torch.bool, device=lens.device)
    return (visible.unsqueeze(0) & keys) | eye  # (B, T, T)


def sample_chunk(cfg: ChunkConfig, generator: torch.Generator) -> Tuple[int, int]:
    """Draw (chunk_size, num_left_chunks) for one training batch according to ``cfg.mode``.

    dynamic: full context with probability ``full_prob``, else a chunk size uniform in
    1..max_size, so one model serves every chunk size at decode time (U2, Zhang et al. 2020).
    """
    if cfg.mode == "full":
        return 0, -1
    if cfg.mode == "static":
        return cfg.size, cfg.left_chunks
    if torch.rand(1, generator=generator).item() < cfg.full_prob:
        return 0, -1
    size = int(torch.randint(1, cfg.max_size + 1, (1,), generator=generator).item())
    left = cfg.left_chunks
    if cfg.random_left_chunks:
        left = int(torch.randint(0, cfg.max_left_chunks + 1, (1,), generator=generator).item())
    return size, left
