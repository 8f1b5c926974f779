"""Distributed setup for torchrun: one process per device, gloo on CPU, nccl on GPU; and what a
worker that torchrun may restart (``--max-restarts``) needs to know."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from wenet_lite.config.fields import FieldError, Setting

__all__ = [
    "DeviceError",
    "DistInfo",
    "choose_device",
    "init_distributed",
    "cleanup_distributed",
    "all_reduce_sum",
    "check_restart_store",
    "may_restart",
    "elastic_restart",
]

_log = logging.getLogger("wenet_lite.train")


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


class DeviceError(FieldError):
    """The asked-for device does not fit this machine or job; the message is one line."""


def choose_device(name: Optional[str], world: int, local: int) -> torch.device:
    """The device of this process: ``name`` cpu, cuda (each torchrun rank its
    ``cuda:LOCAL_RANK``), cuda:N (one process only), or None: cuda when available, else cpu.
    DeviceError for CUDA where there is none, more ranks on a node than GPUs, cuda:N under
    torchrun, or a name that is no device."""
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise DeviceError(
            "{d} is not a device (cpu, cuda, cuda:N)", d=Setting("device", name)
        ) from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise DeviceError("{d}: training runs on cpu or cuda", d=Setting("device", name))
    if not torch.cuda.is_available():
        raise DeviceError(
            "{d}: CUDA is not available here (a CPU build of torch, or no GPU visible); use "
            "{cpu}", d=Setting("device", name), cpu=Setting("device", "cpu"),
        )  # fmt: skip
    gpus = torch.cuda.device_count()
    if device.index is not None:
        if world > 1:
            raise DeviceError(
                f"{{d}} under torchrun ({world} ranks): give {{cuda}}, each rank then takes "
                "cuda:LOCAL_RANK", d=Setting("device", name), cuda=Setting("device", "cuda"),
            )  # fmt: skip
        if device.index >= gpus:
            raise DeviceError(f"{{d}}: this machine has {gpus} GPU(s)", d=Setting("device", name))
        return device
    if local >= gpus:
        raise DeviceError(
            f"rank with LOCAL_RANK {local} has no GPU: this node has {gpus} GPU(s) for at least "
            f"{local + 1} ranks; start at most {gpus} a node (torchrun's nproc_per_node), or "
            "train the ranks on CPU with {cpu} (gloo)", cpu=Setting("device", "cpu"),
        )  # fmt: skip
    return torch.device("cuda", local)


def init_distributed(device_name: Optional[str] = None) -> DistInfo:
    """Read torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK); single process otherwise.
    ``device_name``: see :func:`choose_device`; gloo on CPU, nccl on CUDA."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = choose_device(device_name, world, local)
    use_cuda = device.type == "cuda"
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


def elastic_restart() -> int:
    """How often torchrun has restarted this worker (``--max-restarts``): 0 for a first start
    (and for a node whose workers restart because another node's failed)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def may_restart() -> bool:
    """Under torchrun with ``--max-restarts`` > 0: workers may be restarted, and a restarted
    worker can only go on from the newest checkpoint, so every start resumes by itself."""
    return int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0 or elastic_restart() > 0


def check_restart_store() -> None:
    """Restarted workers that meet in the store torchrun's agent keeps across restarts can read
    the keys of the workers before them and wait in ``init_process_group`` until its timeout
    (30 min): torchrun then needs ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (a fresh store on
    rank 0 each start). Said once a start, where it matters."""
    if may_restart() and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        _log.warning(
            "torchrun with restarts (max_restarts) shares its rendezvous store with workers: a "
            "restart after a lost node can hang in init_process_group. Start torchrun with "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its environment"
        )
