"""Distributed setup for torchrun: one process per device, gloo on CPU, nccl on GPU."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DistInfo", "init_distributed", "cleanup_distributed", "all_reduce_sum"]


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Only rank 0 writes checkpoints, logs and TensorBoard events."""
        return self.rank == 0


def init_distributed(want_cuda: bool = True) -> DistInfo:
    """Read torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK); single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = want_cuda and torch.cuda.is_available()
    device = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(rank, world, local, device)


def cleanup_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (identity when not distributed); returns a new tensor."""
    out = t.clone()
    if dist.is_initialized():
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
