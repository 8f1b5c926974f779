"""What ``train.precision`` trains in: fp32, or bf16 / fp16 autocast, decided per device and
encoder width (on the CPU bf16 only where it is native and pays, ``wenet_lite.host.cpu``).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager, Optional, Tuple

import torch

from wenet_lite.host.cpu import BF16_MIN_WIDTH, auto_precision, cpu_model, native_bf16

__all__ = ["autocast_for", "precision_note", "training_dtype", "training_precision"]


def training_dtype(
    precision: str, device: torch.device, width: Optional[int] = None
) -> Optional[torch.dtype]:
    """The autocast dtype of ``train.precision`` on ``device`` for an encoder ``width`` wide
    (``encoder.d_model``; None: any), None for fp32.

    CUDA: bf16 or fp16 as asked (``auto``: bf16 where the GPU supports it). CPU: ``bf16`` only
    where the CPU multiplies it natively (``wenet_lite.host.cpu``: AMX or AVX-512 bf16; elsewhere it
    is emulated, several times slower than fp32); ``auto`` as the inference engines' ``auto``
    (``cpu.auto_precision``): bf16 there for encoders at least ``cpu.BF16_MIN_WIDTH`` wide, else
    fp32 (on an AMX Xeon the 144-wide demo model's trainer ran slower in bf16 than in fp32;
    ``benchmarks/bench_train.py``); fp16 never. The
    CTC loss, the attention decoder's log-softmax and the optimizer's state stay fp32.
    """
    if precision == "fp32":
        return None
    if device.type == "cuda":
        if precision == "auto":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        return torch.bfloat16 if precision == "bf16" else torch.float16
    if precision == "bf16" and native_bf16():
        return torch.bfloat16
    if precision == "auto" and auto_precision(width=width) == "bf16":
        return torch.bfloat16
    return None


def training_precision(precision: str, device: torch.device, width: Optional[int] = None) -> str:
    """fp32, bf16 or fp16: what ``train.precision`` trains in on ``device``
    (:func:`training_dtype`)."""
    dtype = training_dtype(precision, device, width)
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def precision_note(
    precision: str, device: torch.device, width: Optional[int] = None
) -> Tuple[str, Optional[str]]:
    """What trains, for the log (``training precision: bf16 (autocast on the CPU)``), and a
    one-line warning when ``train.precision`` asked for what this device cannot do fast."""
    name = training_precision(precision, device, width)
    where = "the CPU" if device.type == "cpu" else str(device)
    line = f"training precision: {name}" + (f" (autocast on {where})" if name != "fp32" else "")
    if name == "fp32" and precision == "auto" and device.type == "cpu" and native_bf16():
        line += f" (auto: bf16 only for encoders {BF16_MIN_WIDTH} wide or more; this one: {width})"
    warning = None
    if name == "fp32" and precision in ("bf16", "fp16"):
        why = (
            f"{cpu_model()} has no native bf16 (emulated it is several times slower)"
            if precision == "bf16" and device.type == "cpu"
            else f"{precision} autocast runs on CUDA"
        )
        warning = f"train.precision {precision}: {why}: training in fp32"
    return line, warning


def autocast_for(
    precision: str, device: torch.device, width: Optional[int] = None
) -> ContextManager:
    """The autocast of ``train.precision`` on ``device`` (:func:`training_dtype`)."""
    dtype = training_dtype(precision, device, width)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
