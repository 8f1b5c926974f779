"""bf16 layers for streaming inference on CPUs that multiply bf16 natively (AMX, AVX-512 bf16;
``wenet_lite.host.cpu``).

What computes in bf16: the encoder's linear layers (the feed-forward modules, the attention
projections and the convolution module's pointwise layers: 72 % of a chunk's multiply-adds for
the conformer_u2 size at C = 16 with 4 left chunks, counted with forward hooks) and the
subsampling convolutions (26 %). Their weights are stored in bf16 and their inputs rounded to
it; the products accumulate in fp32 inside the kernel and the output is rounded to bf16 and
widened back as the bias is added (one pass). Inside a feed-forward module the first layer's
output, its bias and the activation stay bf16 and go to the second layer as they are: those 4 x
D-wide tensors are two thirds of the values a block would otherwise convert (conversions and
copies were 21 % of a 16-stream conformer_u2 step in an AMX Xeon's profile). The subsampling's
convolutions hand their bf16 output to its bf16 output layer as it is (the same numbers).
Everything else stays fp32: the features and CMVN, the attention scores and softmax over the
cache (3 % of the multiply-adds; rounding there would compound over the cache), the depthwise
convolution (memory-bound: bf16 saves nothing), layer norms, the CTC head and its log-softmax,
and the search. Measured on an AMX Xeon (``benchmarks/bench_engines.py``): the subsampling in
bf16 takes a conformer_u2 step of 16 streams from 203 to 145 ms; the linears alone in bf16 from
273 (fp32) to 203.

Batched == alone, and streamed == simulated. A GEMM kernel picks its blocking, and so its
order of additions and its roundings, by the number of rows: on an AMX Xeon (torch 2.13, one
thread) the rows of a 2048 x 256 bf16 product of 32 rows came out other than the same rows in
a product of 16, for a model's real activations (random rows agreed). So every product here has
exactly :func:`row_group` rows: streams' chunks or utterance frames are cut into groups of that
many, and the last group is filled up with zero rows. One kernel, one blocking, whatever the
batch. That size is chosen when a layer is made, per weight shape, as the largest of
:data:`ROW_GROUPS` for which a row of such a product comes out the same wherever it sits in it
and whatever the other rows hold (:func:`rows_independent`: random and activation-like rows,
moved, mixed with others and with the zero rows of a last group, compared bit for bit). Down
to one row a product, which holds by construction. The subsampling convolutions get their own
check (:func:`conv_independent`: a batch of windows against each window alone, and each window
against the same frames cut from a long input); where it fails they run fp32, one sample at a
time (``int8.PerSample``), as the int8 engine's do. So a stream's numbers never depend on which
streams share its call or on how its audio was cut, on any CPU.

Shapes: the legend in ``wenet_lite.model``; N rows (B*C frames or B*T), I in and O out
features.
"""

from __future__ import annotations

import copy
import functools
import logging
from typing import Callable, Sequence

import torch
from torch import nn

from wenet_lite.model.conformer import FeedForward
from wenet_lite.model.int8 import PerSample, replace_linears
from wenet_lite.model.linear import Linear
from wenet_lite.model.subsampling import Conv2dSubsampling

__all__ = ["ROW_GROUPS", "Bf16Conv", "Bf16Linear", "conv_independent", "grouped_product",
           "row_group", "rows_independent", "to_bf16"]  # fmt: skip

_log = logging.getLogger(__name__)

ROW_GROUPS = (128, 64, 32, 16, 1)
"""Candidate row counts per product, largest first (128 rows: 8 streams of C = 16; products of
128 rows run at 3x fp32's speed on AMX, as many as 256 do)."""

Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _bf16_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


def grouped_product(x: torch.Tensor, w: torch.Tensor, rows: int) -> torch.Tensor:
    """``x @ w`` in products of exactly ``rows`` rows, each written in place into the result
    (no concatenation); the last group is filled up with zero rows, so that every row goes
    through the same kernel however many rows there are. Args: x (N, I), w (I, O).
    Returns: (N, O)."""
    rows = max(rows, 1)
    n = x.size(0)
    out = x.new_empty(n, w.size(1))
    full = n - n % rows
    for start in range(0, full, rows):
        torch.mm(x[start : start + rows], w, out=out[start : start + rows])
    if full < n:
        last = x.new_zeros(rows, x.size(1))
        last[: n - full] = x[full:]
        out[full:] = torch.mm(last, w)[: n - full]
    return out


def rows_independent(
    size_in: int, size_out: int, rows: int, product: Product = _bf16_product
) -> bool:
    """Whether, for an (I, O) bf16 weight, each row of a product of exactly ``rows`` rows comes
    out the same bit for bit wherever it sits in the product and whatever the other rows hold:
    random rows and activation-like rows (SiLU of random rows, against weights scaled as a
    layer's), moved by a few positions, half of them replaced by others, and all but three
    replaced by the zero rows that fill a last group; then :func:`grouped_product` of more rows
    than a product holds against the products of its groups."""
    if rows <= 1:
        return True  # one row a product: nothing shares it
    gen = torch.Generator().manual_seed(size_in * 131 + size_out)
    w = (torch.randn(size_in, size_out, generator=gen) / size_in**0.5).to(torch.bfloat16)
    plain = torch.randn(rows, size_in, generator=gen)
    for x in (plain, nn.functional.silu(plain * 3)):
        x = x.to(torch.bfloat16)
        whole = product(x, w)
        for shift in sorted({1, 3, 16, rows // 2} - {rows}):
            if not torch.equal(product(torch.roll(x, shift, 0), w), torch.roll(whole, shift, 0)):
                return False
        mixed = x.clone()
        mixed[rows // 2 :] = torch.randn(rows - rows // 2, size_in, generator=gen)
        if not torch.equal(product(mixed, w)[: rows // 2], whole[: rows // 2]):
            return False
        last = torch.zeros_like(x)
        last[:3] = x[:3]
        if not torch.equal(product(last, w)[:3], whole[:3]):
            return False
        # the layers' own grouping (torch's product), with its zero-filled last group
        more = torch.cat([x, x, x[:5]])
        if product is _bf16_product and not torch.equal(
            grouped_product(more, w, rows), torch.cat([whole, whole, whole[:5]])
        ):
            return False
    return True


def row_group(size_in: int, size_out: int) -> int:
    """Rows per product for an (I, O) bf16 weight on this CPU: the largest of
    :data:`ROW_GROUPS` for which :func:`rows_independent` holds (checked once per process,
    shape and intra-op thread count, since a kernel may split its work by threads: a few
    milliseconds where bf16 is native)."""
    return _row_group(size_in, size_out, torch.get_num_threads())


@functools.cache
def _row_group(size_in: int, size_out: int, threads: int) -> int:
    for rows in ROW_GROUPS:
        if rows_independent(size_in, size_out, rows):
            if rows != ROW_GROUPS[0]:
                _log.info("bf16 %d x %d products: %d rows at a time (batch-invariant here)",
                          size_in, size_out, rows)  # fmt: skip
            return rows
    return 1


class Bf16Linear(nn.Module):
    """A :class:`Linear` whose weights and product are bf16. Input fp32 or bf16; output fp32,
    or bf16 when ``bf16_output`` is set (the inner layer of a feed-forward module, whose
    activation then runs in bf16 and whose next layer takes bf16 as it comes). ``rows``: rows
    per product (None: :func:`row_group` of its shape)."""

    def __init__(self, linear: Linear, rows: int | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.rows = row_group(self.in_features, self.out_features) if rows is None else rows
        if self.rows < 1:
            raise ValueError(f"rows per product must be >= 1, got {self.rows}")
        self.bf16_output = False
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16).contiguous())
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self.register_buffer("bias", bias)
        self.register_buffer("bias_bf16", None if bias is None else bias.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (..., I). Returns: (..., O) float32 (bf16 with ``bf16_output``); each row
        computed as if alone."""
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (N, I)
        y = grouped_product(flat, self.weight, self.rows)  # (N, O) bf16
        if self.bf16_output:
            if self.bias_bf16 is not None:
                y.add_(self.bias_bf16)
        elif self.bias is not None:
            y = torch.add(y, self.bias)  # widened to fp32 as it is added: one pass
        else:
            y = y.float()
        return y.view(x.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        out = ", bf16 output" if self.bf16_output else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bf16, "
            f"{self.rows} rows a product{out}"
        )


class Bf16Conv(nn.Module):
    """Convolutions (the subsampling's ``nn.Sequential``) with bf16 weights and inputs; output
    fp32, or bf16 when ``bf16_output`` is set (the subsampling's output layer is a
    :class:`Bf16Linear` that takes it as it is: the widening and narrowing again of the largest
    activation of the subsampling are saved, with the same numbers)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = copy.deepcopy(module).to(torch.bfloat16)
        self.bf16_output = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (B, 1, T, F). Returns: (B, channels, T', F') float32 (bf16 with
        ``bf16_output``)."""
        y = self.module(x.to(torch.bfloat16))
        return y if self.bf16_output else y.float()


def conv_independent(
    conv: nn.Module, rate: int, freq: int, windows: Sequence[int] = (67, 31)
) -> bool:
    """Whether the subsampling's convolutions ``conv`` (a :class:`Bf16Conv`; overall stride
    ``rate`` in time, on ``freq`` input bins) give each window the same numbers bit for bit
    alone, in a batch of four, and cut from a longer input (what streaming and simulated
    streaming feed them): checked on random features of ``windows`` input frames and an input
    128 output frames longer (a few milliseconds where bf16 is native; seconds for conformer_u2
    where it is emulated)."""
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        for size in windows:
            x = torch.randn(4, 1, size, freq, generator=gen)
            batch = conv(x)
            for i in range(4):
                if not torch.equal(conv(x[i : i + 1]), batch[i : i + 1]):
                    return False
            # A window from input frame k * 16 * rate gives the outputs from frame k * 16 on
            # (5 s of audio more, as simulated streaming feeds whole utterances).
            long = torch.randn(1, 1, size + 8 * 16 * rate, freq, generator=gen)
            whole = conv(long)
            for k in (0, 1, 5, 8):
                part = conv(long[:, :, k * 16 * rate : k * 16 * rate + size])
                if not torch.equal(part, whole[:, :, k * 16 : k * 16 + part.size(2)]):
                    return False
    return True


ConvCheck = Callable[[Bf16Conv, int, int], bool]


def to_bf16(module: nn.Module, conv_check: ConvCheck = conv_independent) -> nn.Module:
    """A copy of ``module`` (an ASRModel or an encoder) whose encoder linears are
    :class:`Bf16Linear` (the position projection and the CTC head stay fp32; a feed-forward
    module's inner activations stay bf16) and whose subsampling convolutions run in bf16 where
    ``conv_check`` passes (else fp32, one sample at a time)."""
    out = replace_linears(module, Bf16Linear)
    for child in out.modules():
        if isinstance(child, FeedForward) and isinstance(child[0], Bf16Linear):
            child[0].bf16_output = isinstance(child[-1], Bf16Linear)  # activation on bf16
        elif isinstance(child, Conv2dSubsampling) and isinstance(child.conv, PerSample):
            conv = Bf16Conv(child.conv.module)
            if conv_check(conv, child.rate, child.input_dim):
                conv.bf16_output = isinstance(child.out, Bf16Linear)
                child.conv = conv
            else:
                _log.info("bf16 subsampling: fp32 convolutions, one sample at a time (bf16 ones "
                          "are not batch-invariant here)")  # fmt: skip
    return out
