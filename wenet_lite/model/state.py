"""The encoder's streaming state, and batching the states of streams for one call.

A state is data that ``ConformerEncoder.forward_chunk`` takes and returns new (it never writes
its input): an :class:`EncoderState` of tensors, read by field name. The attention cache holds
the projected keys and values of the last M frames of every layer, right-aligned, with
``cache_len`` counting the valid ones, so a zero-filled fixed-size cache works from the first
chunk; ``cache_limit`` is C*N frames kept, or -1 to keep all history (the cache then grows).

States of streams with different histories are concatenated along the batch; growing attention
caches (``cache_limit`` -1) of different lengths are left-padded with zeros, which the mask
ignores because ``cache_len`` marks the valid frames. Splitting hands each stream a view of the
batched result. A server decoding the same streams step after step would so copy every cache
once per step only to concatenate the same slices again; :class:`StateBatcher` skips that when
a call has the very states it handed out last time, in the same order. :class:`StatePool`
keeps fixed-size states where they are computed instead: one batched tensor per cache with a
slot per stream, a step gathering its streams' slots by index and writing the new states back
(a GPU's streams never pass through the host). In eager PyTorch the attention caches live
in slabs with room after them (:func:`cache_room`): a step writes its new keys and values
after the cache it was given and returns a view further on, so a stream, or a batch that comes
again whole, appends in place instead of copying its cache every step; a slab is only ever
written past the views it has handed out, so no state changes. :class:`StateList` keeps each
stream's state apart behind the same slot interface (join, reset, gather, scatter, leave), so a
recogniser holds either without asking which.

This module has no ``from __future__ import annotations``: TorchScript reads a NamedTuple's
field types from its class annotations, which must be types, not strings.
"""

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

__all__ = [
    "BATCH_DIM",
    "EncoderState",
    "StateBatcher",
    "StateList",
    "StatePool",
    "cache_room",
    "cache_view",
    "stack_states",
    "unstack_state",
]


class EncoderState(NamedTuple):
    """Streaming state of B streams (legend in ``wenet_lite.model``)."""

    att_cache: torch.Tensor
    """(L, B, H, M, 2*d_k): keys then values of the last M frames per layer, right-aligned"""
    conv_cache: torch.Tensor
    """(L, B, D, K-1): the last K-1 inputs of each layer's causal depthwise conv"""
    cache_len: torch.Tensor
    """(B,) int64: valid frames at the right end of the attention cache"""
    cache_limit: torch.Tensor
    """(1,) int64: C*N frames kept, or -1 for all history (a growing cache)"""
    offset: torch.Tensor
    """(B,) int64: encoder frames of the stream before its next chunk (the absolute
    positions of WeNet's position term; other encoders do not read it)"""


BATCH_DIM = {"att_cache": 1, "conv_cache": 1, "cache_len": 0, "cache_limit": -1, "offset": 0}
"""each field's batch dimension; -1: shared by the whole batch (one value). Every function
below goes field by field through this table."""


def _fields(fn: Callable[[str, int], torch.Tensor]) -> EncoderState:
    """An EncoderState whose field ``name`` is ``fn(name, its batch dim)``."""
    return EncoderState(**{name: fn(name, dim) for name, dim in BATCH_DIM.items()})


@torch.jit.unused
def cache_room(att: torch.Tensor, c: int) -> Tuple[torch.Tensor, int]:
    """Where a step writes its C new keys and values after the M cached ones: a slab
    (L, B, H, S, 2*d_k) and the frame ``start`` at which ``att`` (L, B, H, M, 2*d_k) sits in it,
    frames [start+M, start+M+C) free to write.

    ``att``'s own slab when ``att`` is a view :func:`cache_view` made (a state a step returned,
    or a batch reused whole) and nobody has written the slab past it yet and room remains: a
    stream's next step then appends in place, and no state ever changes, since another step
    from the same state finds the slab written past it and takes a new one. Otherwise a new
    slab of 2*(M+C) frames with ``att`` copied to its front: one copy every M/C+1 steps of a
    stream instead of one every step. Eager PyTorch only; never under autograd (a new slab)."""
    m = att.size(3)
    slab: Optional[torch.Tensor] = getattr(att, "cache_slab", None)
    if (
        slab is not None
        and not torch.is_grad_enabled()
        and (torch.is_inference_mode_enabled() or not slab.is_inference())
    ):
        start: int = att.cache_slab_start  # type: ignore[attr-defined]
        if slab.cache_slab_written == start + m and start + m + c <= slab.size(3):  # type: ignore[attr-defined]
            return slab, start
    slab = att.new_empty(att.size(0), att.size(1), att.size(2), 2 * (m + c), att.size(4))
    slab[:, :, :, :m].copy_(att)
    return slab, 0


@torch.jit.unused
def cache_view(slab: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Frames [start, end) of a :func:`cache_room` slab, just written up to ``end``, as the
    cache of a new state (a view that knows its slab)."""
    slab.cache_slab_written = end  # type: ignore[attr-defined]
    view = slab[:, :, :, start:end]
    view.cache_slab, view.cache_slab_start = slab, start  # type: ignore[attr-defined]
    return view


def stack_states(states: Sequence[EncoderState]) -> EncoderState:
    """One batched state of several streams' states (same model, same chunking); attention
    caches of different lengths are left-padded to the longest, and the batch's cache is
    written into a slab with room for the next step's frames (:func:`cache_room`)."""
    if len(states) == 1:
        return states[0]
    m = max(s.att_cache.size(3) for s in states)
    # only the shorter caches are padded (F.pad copies even when it adds nothing)
    padded = [s if s.att_cache.size(3) == m else
              s._replace(att_cache=F.pad(s.att_cache, (0, 0, m - s.att_cache.size(3), 0)))
              for s in states]  # fmt: skip

    def field(name: str, dim: int) -> torch.Tensor:
        parts = [getattr(s, name) for s in padded]
        if name == "att_cache" and m > 0 and not any(p.requires_grad for p in parts):
            # into a slab with room for the step's new frames (cache_room: no second copy)
            a = parts[0]
            batch = sum(p.size(1) for p in parts)
            slab = a.new_empty(a.size(0), batch, a.size(2), 2 * m, a.size(4))
            torch.cat(parts, 1, out=slab[:, :, :, :m])
            return cache_view(slab, 0, m)
        return parts[0] if dim < 0 else torch.cat(parts, dim)

    return _fields(field)


def unstack_state(state: EncoderState) -> List[EncoderState]:
    """Each stream's part of a batched state; a growing cache keeps only its valid frames."""
    batch = state.att_cache.size(1)
    if batch == 1:
        return [state]
    growing = int(state.cache_limit.item()) < 0
    lens = state.cache_len.tolist()
    parts = [_fields(lambda name, dim, i=i: _one(getattr(state, name), dim, i))
             for i in range(batch)]  # fmt: skip
    if growing:  # (L, 1, H, M, 2*d_k): only the valid frames
        parts = [p._replace(att_cache=p.att_cache[:, :, :, p.att_cache.size(3) - n :])
                 for p, n in zip(parts, lens)]  # fmt: skip
    return parts


def _one(value: torch.Tensor, dim: int, i: int) -> torch.Tensor:
    """Stream ``i``'s view of a batched field (a shared field as it is)."""
    return value if dim < 0 else value.narrow(dim, i, 1)


class StateBatcher:
    """:func:`stack_states` / :func:`unstack_state` that reuse the last batch when a call has
    the very states it handed out last time, in the same order (no copy per step)."""

    def __init__(self) -> None:
        self._last: Optional[Tuple[List[EncoderState], EncoderState]] = None

    def stack(self, states: Sequence[EncoderState]) -> EncoderState:
        last = self._last
        if last is not None and len(last[0]) == len(states):
            if all(a is b for a, b in zip(last[0], states)):
                return last[1]
        return stack_states(states)

    def unstack(self, state: EncoderState) -> List[EncoderState]:
        parts = unstack_state(state)
        self._last = (parts, state)
        return parts


class StatePool:
    """The states of many streams with a fixed attention cache (``cache_limit`` >= 0), held in
    one batched :class:`EncoderState` with a slot per stream on the engine's device: a stream
    joins into a free slot (zeroed) and leaves it free; a step :meth:`gather`s the slots of its
    streams by index (one copy per cache, on the device) and :meth:`scatter`s the new states
    back. The slots double when full. ``zero(batch)`` is the engine's zero state."""

    def __init__(self, zero: Callable[[int], EncoderState], capacity: int = 8) -> None:
        self._zero = zero
        self.state = zero(capacity)
        if int(self.state.cache_limit.item()) < 0:
            raise ValueError("a slot pool holds fixed-size caches (left chunks >= 0)")
        self._free = list(range(capacity - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return self.state.att_cache.size(1)

    @property
    def used(self) -> int:
        return self.capacity - len(self._free)

    def join(self) -> int:
        """A free slot, zeroed (the pool doubles when none is free)."""
        if not self._free:
            old, n = self.state, self.capacity
            new = self._zero(2 * n)

            def grown(name: str, dim: int) -> torch.Tensor:
                value = getattr(old, name)
                if dim < 0:
                    return value
                return torch.cat([value, getattr(new, name).narrow(dim, n, n)], dim)

            self.state = _fields(grown)
            self._free = list(range(2 * n - 1, n - 1, -1))
        slot = self._free.pop()
        self.reset(slot)
        return slot

    def reset(self, slot: int) -> None:
        """Zero a slot's state (a new segment starts from nothing)."""
        for name, dim in BATCH_DIM.items():
            if dim >= 0:
                getattr(self.state, name).select(dim, slot).zero_()

    def leave(self, slot: int) -> None:
        if slot in self._free:
            raise ValueError(f"slot {slot} is free already")
        self._free.append(slot)

    def gather(self, slots: Sequence[int]) -> EncoderState:
        """The batched state of ``slots`` (B,), in that order."""
        s = self.state
        index = torch.tensor(list(slots), device=s.att_cache.device)

        def field(name: str, dim: int) -> torch.Tensor:
            value = getattr(s, name)
            return value if dim < 0 else value.index_select(dim, index)

        return _fields(field)

    def scatter(self, slots: Sequence[int], state: EncoderState) -> None:
        """Write a step's new batched state back into ``slots``."""
        index = torch.tensor(list(slots), device=self.state.att_cache.device)
        for name, dim in BATCH_DIM.items():
            if dim >= 0:
                getattr(self.state, name).index_copy_(dim, index, getattr(state, name))


class StateList:
    """The states of many streams, each its own tensors (any cache, growing ones too), behind
    :class:`StatePool`'s slot interface: a step stacks its streams' states
    (:class:`StateBatcher`: no copy when the same streams come in the same order) and splits
    the new one back. ``zero(batch)`` is the engine's zero state."""

    def __init__(self, zero: Callable[[int], EncoderState]) -> None:
        self._zero = zero
        self._states: Dict[int, EncoderState] = {}
        self._next = 0
        self._batcher = StateBatcher()

    @property
    def used(self) -> int:
        return len(self._states)

    def join(self) -> int:
        slot, self._next = self._next, self._next + 1
        self.reset(slot)
        return slot

    def reset(self, slot: int) -> None:
        self._states[slot] = self._zero(1)

    def leave(self, slot: int) -> None:
        if self._states.pop(slot, None) is None:
            raise ValueError(f"slot {slot} is free already")

    def gather(self, slots: Sequence[int]) -> EncoderState:
        return self._batcher.stack([self._states[s] for s in slots])

    def scatter(self, slots: Sequence[int], state: EncoderState) -> None:
        for slot, own in zip(slots, self._batcher.unstack(state)):
            self._states[slot] = own
