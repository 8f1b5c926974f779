"""Batching streams for one ``forward_chunk`` call: their encoder states and position tables.

Shapes: B streams, L layers, H heads, M cached frames, C chunk frames, d_k head dim, D model
dim, K conv kernel.

States of streams with different histories are concatenated along the batch; growing attention
caches (``left_chunks = -1``) of different lengths are left-padded with zeros, which the mask
ignores because ``cache_len`` marks the valid, right-aligned frames. Splitting hands each
stream a view of the batched result. A server decoding the same streams step after step would
so copy every cache once per step only to concatenate the same slices again; :class:`StateBatcher`
skips that when a call has the very states it handed out last time, in the same order.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from wenet_lite.model.conformer import ConformerEncoder

__all__ = ["State", "StateBatcher", "PositionTables"]

State = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class StateBatcher:
    def __init__(self) -> None:
        self._last: Optional[Tuple[List[State], State]] = None  # (parts handed out, batch)

    def stack(self, states: Sequence[State]) -> State:
        """One batched state for ``states`` (the last batch itself when it is theirs)."""
        last = self._last
        if last is not None and len(last[0]) == len(states):
            if all(a is b for a, b in zip(last[0], states)):
                return last[1]
        if len(states) == 1:
            return states[0]
        m = max(s[0].size(3) for s in states)
        att = torch.cat([F.pad(s[0], (0, 0, m - s[0].size(3), 0)) for s in states], 1)
        conv = torch.cat([s[1] for s in states], dim=1)  # (L, B, D, K-1)
        cache_len = torch.cat([s[2] for s in states])  # (B,)
        return att, conv, cache_len, states[0][3]  # att (L, B, H, M, 2*d_k); shared limit

    def unstack(self, state: State) -> List[State]:
        """Each stream's part of a batched state; a growing cache keeps only its valid frames."""
        att, conv, cache_len, limit = state
        batch = att.size(1)
        if batch == 1:
            parts = [state]
        else:
            growing = int(limit.item()) < 0
            lens = cache_len.tolist()
            parts = []
            for i in range(batch):
                own = att[:, i : i + 1]  # (L, 1, H, M, 2*d_k)
                if growing:
                    own = own[:, :, :, own.size(3) - lens[i] :]
                parts.append((own, conv[:, i : i + 1], cache_len[i : i + 1], limit))
        self._last = (parts, state)
        return parts


class PositionTables:
    """Position tables of C queries over M+C keys for any M, sliced from one table per block
    computed for the largest window so far: a smaller window's distances are a contiguous
    slice of a larger one's (see ``ConformerEncoder.forward_chunk_by_chunk``)."""

    def __init__(self, encoder: ConformerEncoder, chunk_size: int) -> None:
        self._encoder = encoder
        self._chunk = chunk_size
        self._keys = 0  # keys covered by the tables
        self._tables: List[torch.Tensor] = []

    def get(self, cached: int) -> List[torch.Tensor]:
        """[(H, M+2C-1, d_k)] * L for M = ``cached`` frames."""
        c = self._chunk
        keys = cached + c
        if keys > self._keys:
            self._keys = max(keys, 2 * self._keys)  # growing caches: amortised recomputation
            with torch.inference_mode():
                self._tables = self._encoder.position_tables(c, self._keys)
        top = self._keys
        return [p[:, top - keys : top + c - 1] for p in self._tables]
