"""The position tables the torch engine keeps between streaming steps.

A window of C queries over M+C keys needs P = M+2C-1 relative distances, and a smaller window's
are a contiguous slice of a larger one's, so each block's p(r) is computed once for the largest
window so far and sliced for each step (``wenet_lite.model.posenc`` holds the maths).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import torch

from wenet_lite.model.posenc import slice_tables

if TYPE_CHECKING:
    from wenet_lite.model.conformer import ConformerEncoder

__all__ = ["PositionTables"]


class PositionTables:
    """Each block's p(r) for a chunk of C queries over M cached frames, for any M: computed
    once for the largest window so far and sliced (for batched streams whose caches grow)."""

    def __init__(self, encoder: ConformerEncoder, chunk_size: int) -> None:
        self._encoder = encoder
        self._chunk = chunk_size
        self._keys = 0  # keys covered by the tables
        self._tables: List[torch.Tensor] = []

    def get(self, cached: int, state_offset: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
        """[(H, M+2C-1, d_k)] * L for M = ``cached`` frames. An encoder with WeNet's key
        positions gets tables over the positions 0 .. max(``state_offset``) + C - 1 instead
        (each stream picks its rows in ``forward_chunk``)."""
        if self._encoder.key_positions:
            assert state_offset is not None, "key positions need the streams' offsets"
            keys = int(state_offset.max()) + self._chunk if state_offset.numel() else self._chunk
            if keys > self._keys:
                self._keys = max(keys, 2 * self._keys)
                with torch.inference_mode():
                    self._tables = self._encoder.position_tables(self._chunk, self._keys)
            return self._tables
        keys = cached + self._chunk
        if keys > self._keys:
            self._keys = max(keys, 2 * self._keys)  # growing caches: amortised recomputation
            with torch.inference_mode():
                self._tables = self._encoder.position_tables(self._chunk, self._keys)
        return slice_tables(self._tables, self._keys, self._chunk, keys)
