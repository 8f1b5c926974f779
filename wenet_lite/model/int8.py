"""Batch-invariant int8 linear layers for streaming inference.

Dynamic int8 as torch.ao and onnxruntime do it scales the activations with one number for the
whole input tensor, so a stream's output depends on which streams share its batch. Here every
row (one frame of one stream) gets its own scale and the weights one scale per output channel:

    y[n, o] = s_x[n] * s_w[o] * sum_i q_x[n, i] * q_w[i, o] + b[o]
    q_x[n, :] = round(x[n, :] / s_x[n]),  s_x[n] = max_i |x[n, i]| / 127
    q_w[:, o] = round(w[:, o] / s_w[o]),  s_w[o] = max_i |w[i, o]| / 127

The integer sum is exact, so a layer's output row is a function of its input row alone: the
quantisation adds no dependence on the batch, and batched == alone holds as in fp32 (where the
other layers' kernels may round differently by batch size, at the 1e-7 level). Two kernels
compute it, bit for bit the same, chosen by :func:`default_kernel`:

- ``int_mm``: ``torch._int_mm``, int8 x int8 with int32 accumulation, where the CPU multiplies
  int8 natively (VNNI, AMX): 2.65-3.26x fp32's product on an AMX Xeon (N x 256 by 256 x 2048,
  one thread).
- ``fp32``: the same integers as fp32 numbers in an fp32 product. Every partial sum of at most
  1024 products of integers in [-127, 127] is an integer below 2^24, which fp32 holds exactly
  whatever the kernel's order of additions, so each block of 1024 input features is summed
  exactly and the blocks are added in float64. On CPUs without VNNI torch's ``_int_mm`` has no
  fast kernel (on an AVX2 AMD EPYC: 16 x 256 by 256 x 1024 in 6.7 ms against fp32's 0.15 ms),
  and this one costs about what the fp32 product does.

Where the flags promise native int8, :func:`default_kernel` still times ``_int_mm`` against
the fp32 product once per process (a few milliseconds) and takes fp32 with a warning if
``_int_mm`` is the slower, as it would be in a torch build without a fast kernel for the CPU;
``$WENET_LITE_INT8_KERNEL`` forces one. The choice changes speed only, never the numbers.

Shapes: the legend in ``wenet_lite.model``; N rows (B*C frames), I in and O out features.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import time
from typing import Callable, Optional

import torch
from torch import nn

from wenet_lite.model.linear import Linear
from wenet_lite.model.subsampling import Conv2dSubsampling

__all__ = ["KERNELS", "KERNEL_ENV", "Int8Linear", "PerSample", "default_kernel",
           "exact_int_product", "quantize_int8", "replace_linears"]  # fmt: skip

_log = logging.getLogger(__name__)

_QMAX = 127.0
KERNELS = ("int_mm", "fp32")
"""The kernels of the integer product (module docstring); their results are identical."""
EXACT_BLOCK = 1024
"""Input features per fp32 block: 1024 * 127 * 127 < 2^24, so a block's sum is exact."""
KERNEL_ENV = "WENET_LITE_INT8_KERNEL"
"""Environment variable that, when set (``int_mm`` or ``fp32``), forces the kernel."""


def default_kernel() -> str:
    """The integer product's kernel here: ``$WENET_LITE_INT8_KERNEL`` if set, else the CPU's
    (``wenet_lite.host.cpu.int8_kernel``: ``int_mm`` with VNNI or AMX), where ``_int_mm`` must also
    win a short timing against the fp32 product (:func:`_int_mm_speed`)."""
    from wenet_lite.host.cpu import int8_kernel

    forced = os.environ.get(KERNEL_ENV)
    if forced:
        if forced not in KERNELS:
            raise ValueError(f"${KERNEL_ENV} must be one of {', '.join(KERNELS)}, not {forced!r}")
        return forced
    if int8_kernel() != "int_mm":
        return "fp32"
    return "int_mm" if _int_mm_pays() else "fp32"


@functools.lru_cache(maxsize=1)
def _int_mm_pays() -> bool:
    """Whether ``_int_mm`` beats the fp32 product here (timed, and said, once per process)."""
    int_mm_s, fp32_s = _int_mm_speed()
    if int_mm_s > fp32_s:
        _log.warning(
            "torch._int_mm is slower than the fp32 product on this CPU (%.0f against %.0f us "
            "for 32 x 512 by 512 x 512): int8 uses exact fp32 products (the same numbers)",
            int_mm_s * 1e6, fp32_s * 1e6,
        )  # fmt: skip
    return int_mm_s <= fp32_s


@functools.lru_cache(maxsize=1)
def _int_mm_speed() -> tuple[float, float]:
    """Seconds of ``torch._int_mm`` and of the fp32 product for 32 x 512 by 512 x 512, best of
    five after a warm-up (measured once per process)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (32, 512), dtype=torch.int8, generator=gen)
    w = torch.randint(-127, 128, (512, 512), dtype=torch.int8, generator=gen)
    qf, wf = q.float(), w.float()

    def best(fn: Callable[[], torch.Tensor]) -> float:
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: torch._int_mm(q, w)), best(lambda: qf @ wf)


def exact_int_product(q: torch.Tensor, w: torch.Tensor, block: int = EXACT_BLOCK) -> torch.Tensor:
    """The exact product of integer-valued fp32 matrices with entries in [-127, 127], as fp32
    (the int32 sum rounded once, as ``torch._int_mm(...).float()`` gives it).

    Args: q (N, I), w (I, O). Returns: (N, O). ``block``: input features summed in fp32 at once
    (exact up to :data:`EXACT_BLOCK`; larger only to show what goes wrong without blocks)."""
    size = q.size(1)
    if size <= block:
        return q @ w  # every partial sum is an integer below 2^24: exact
    acc = None
    for start in range(0, size, block):
        part = (q[:, start : start + block] @ w[start : start + block]).double()  # exact
        acc = part if acc is None else acc + part  # exact: far below 2^53
    return acc.float()


class Int8Linear(nn.Module):
    """A :class:`Linear` with int8 weights (per output channel) and int8 activations (per row)."""

    def __init__(self, linear: Linear, kernel: Optional[str] = None) -> None:
        super().__init__()
        if kernel is None:
            kernel = default_kernel()
        if kernel not in KERNELS:
            raise ValueError(f"int8 kernel must be one of {KERNELS}, not {kernel!r}")
        self.kernel = kernel
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float()  # (I, O)
        scale = w.abs().amax(dim=0).clamp(min=1e-12) / _QMAX  # (O,)
        self.register_buffer("weight_q", torch.round(w / scale).to(torch.int8).contiguous())
        self.register_buffer("weight_scale", scale)
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self.register_buffer("bias", bias)
        # The fp32 kernel's copy of the integer weights (not saved: made from weight_q).
        weight_f = self.weight_q.float() if kernel == "fp32" else None
        self.register_buffer("weight_f", weight_f, persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.weight_f is not None:  # the fp32 kernel's copy follows the loaded weights
            self.weight_f = self.weight_q.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (..., I). Returns: (..., O) float32."""
        flat = x.reshape(-1, self.in_features).float()  # (N, I)
        scale = flat.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(_QMAX)  # (N, 1)
        q = torch.div(flat, scale).round_()  # (N, I), integers in [-127, 127]
        if self.weight_f is not None:
            acc = exact_int_product(q, self.weight_f)  # (N, O)
        else:
            acc = torch._int_mm(q.to(torch.int8), self.weight_q).float()  # (N, O), exact sum
        # Scaled in place, row by row then column by column (no (N, O) table of scales).
        y = acc.mul_(scale).mul_(self.weight_scale)  # (N, O)
        if self.bias is not None:
            y.add_(self.bias)
        return y.view(x.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 "
            f"({self.kernel} kernel)"
        )


class PerSample(nn.Module):
    """``module`` run on each batch element alone. The subsampling's fp32 convolutions pick
    their kernels by batch size (oneDNN; measured on an AMD EPYC: 4e-7 apart between a batch
    of 4 and one stream), and the next int8 layer's rounding would turn that into different
    tokens; one sample at a time they are the same in every batch, at no cost in speed (a
    batch of 16 chunk windows of the 12 x 256 model: 103 ms per sample, 131 ms batched)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (B, ...). Returns: (B, ...)."""
        return torch.cat([self.module(x[i : i + 1]) for i in range(x.size(0))], dim=0)


_KEEP_FP32 = ("rel_pos", "ctc")
"""modules whose linears stay fp32: the position projection (its tables are computed once)
and the CTC head (the log-probabilities the search compares; a small share of the time)"""


def quantize_int8(module: nn.Module, kernel: Optional[str] = None) -> nn.Module:
    """A copy of ``module`` (an ASRModel or an encoder) whose :class:`Linear` layers are
    :class:`Int8Linear`, except under ``_KEEP_FP32``, and whose subsampling convolutions run
    :class:`PerSample` (batch-invariant inputs to the first int8 layer). ``kernel``: one of
    :data:`KERNELS`, or None for :func:`default_kernel`."""
    if kernel is None:
        kernel = default_kernel()
    return replace_linears(module, lambda layer: Int8Linear(layer, kernel))


def replace_linears(module: nn.Module, make: Callable[[Linear], nn.Module]) -> nn.Module:
    """A copy of ``module`` whose :class:`Linear` layers are ``make(layer)``, except under
    ``_KEEP_FP32``, with the subsampling convolutions run :class:`PerSample`."""
    out = copy.deepcopy(module).eval()
    for child in out.modules():
        if isinstance(child, Conv2dSubsampling) and not isinstance(child.conv, PerSample):
            child.conv = PerSample(child.conv)
    for name, child in list(out.named_modules()):
        if any(part in _KEEP_FP32 for part in name.split(".")):
            continue
        for attr, layer in list(child.named_children()):
            if isinstance(layer, Linear):
                setattr(child, attr, make(layer))
    return out
