"""Relative position embeddings p(r) for signed distances r = i - j (query minus key), and
the per-window tables of them that streaming reuses.

No absolute-position table exists: embeddings are computed for whatever distances a window
needs, so a stream has no length limit and its outputs do not depend on its offset. A window
of C queries over M+C keys needs P = M+2C-1 distances, and a smaller window's distances are a
contiguous slice of a larger one's: tables are computed once for the largest window and sliced
(the torch engine's cache of them: ``wenet_lite.runtime.positions``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, List

import torch
from torch import nn

from wenet_lite.model.linear import Linear

if TYPE_CHECKING:
    pass

__all__ = [
    "WENET_MAX_POSITIONS",
    "window_distances",
    "rel_sinusoid",
    "slice_tables",
    "XLRelPosition",
    "ShawRelPosition",
]


WENET_MAX_POSITIONS = 5000
"""WeNet's position table ends here: its models never saw a key at a later position, and its
runtimes stop (an assertion) when a segment reaches it; ours end the segment there."""


def window_distances(num_queries: int, num_keys: int, device: torch.device) -> torch.Tensor:
    """Distances for C queries that are the last C of M+C keys: M+C-1 down to -(C-1), (P,).

    Query i (stream position M+i) against key j gives r = M+i-j; listing the P = M+2C-1
    distinct values in descending order makes row i of the score matrix a left shift by C-1-i
    of one shared row (see attention._rel_shift).
    """
    return torch.arange(num_keys - 1, -num_queries, -1, device=device)  # (P,)


def slice_tables(
    tables: List[torch.Tensor], max_keys: int, num_queries: int, num_keys: int
) -> List[torch.Tensor]:
    """Tables of C queries over M+C keys cut from tables of C' >= C queries over ``max_keys``
    >= M+C keys: [(H, max_keys+C'-1, d_k)] * L -> [(H, M+2C-1, d_k)] * L.

    Column k of a table holds distance max_keys-1-k, so M+C-1 .. -(C-1) are the columns
    max_keys-(M+C) .. max_keys+C-2.
    """
    return [p[:, max_keys - num_keys : max_keys + num_queries - 1] for p in tables]


def rel_sinusoid(distances: torch.Tensor, dim: int) -> torch.Tensor:
    """R(r)[2m] = sin(r / 10000^(2m/D)), R(r)[2m+1] = cos(r / 10000^(2m/D)): (P,) -> (P, D)."""
    freqs = torch.exp(
        torch.arange(0, dim, 2, device=distances.device, dtype=torch.float32)
        * (-math.log(10000.0) / dim)
    )  # (D/2,)
    angles = distances.to(torch.float32).unsqueeze(1) * freqs  # (P, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (P, D)


class XLRelPosition(nn.Module):
    """p(r) = W_R R(clip(r, -Z, Z)): sinusoid of the signed distance, projected without bias
    (Transformer-XL). Z = 0 disables clipping."""

    def __init__(self, d_model: int, num_heads: int, max_rel_dist: int = 0) -> None:
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.max_rel_dist = max_rel_dist
        self.proj = Linear(d_model, d_model, bias=False)

    def forward(self, distances: torch.Tensor) -> torch.Tensor:
        """Args: distances (P,). Returns: p (H, P, d_k)."""
        if self.max_rel_dist > 0:
            distances = distances.clamp(-self.max_rel_dist, self.max_rel_dist)
        p = self.proj(rel_sinusoid(distances, self.d_model).to(self.proj.weight.dtype))  # (P, D)
        return p.view(p.size(0), self.num_heads, -1).transpose(0, 1)  # (H, P, d_k)


class ShawRelPosition(nn.Module):
    """p(r) = E[clip(r, -Z, Z) + Z]: one learned vector per clipped distance (Shaw et al. 2018)."""

    def __init__(self, d_model: int, num_heads: int, max_rel_dist: int) -> None:
        super().__init__()
        if max_rel_dist <= 0:
            raise ValueError(f"Shaw positions need max_rel_dist > 0, got {max_rel_dist}")
        self.num_heads = num_heads
        self.max_rel_dist = max_rel_dist
        self.table = nn.Embedding(2 * max_rel_dist + 1, d_model)

    def forward(self, distances: torch.Tensor) -> torch.Tensor:
        """Args: distances (P,). Returns: p (H, P, d_k)."""
        index = distances.clamp(-self.max_rel_dist, self.max_rel_dist) + self.max_rel_dist
        p = self.table(index)  # (P, D)
        return p.view(p.size(0), self.num_heads, -1).transpose(0, 1)  # (H, P, d_k)
