"""bf16 linear layers for streaming inference on CPUs that multiply bf16 natively (AMX,
AVX-512 bf16; ``wenet_lite.cpu``).

Only the encoder's linear layers (the feed-forward modules, the attention projections and the
convolution module's pointwise layers) compute in bf16: 72 % of a chunk's multiply-adds for the
conformer_u2 size at C = 16 with 4 left chunks (counted with forward hooks). Their weights are
stored in bf16 and their inputs rounded to it; the products accumulate in fp32 inside the
kernel and the output is rounded to bf16 and widened back. Everything else stays fp32, as does
everything around the encoder: the features and CMVN; the subsampling convolutions (26 % of
the multiply-adds, but they see the raw features, and one sample at a time they are exact
across batches; a bf16 version is a candidate once measured on an AMX machine); the attention
scores and softmax over the cache (3 %; rounding there would compound over the cache); the
depthwise convolution (memory-bound: bf16 saves nothing); layer norms, the CTC head and its
log-softmax, and the search.

Batched == alone: a layer's input (..., C, I) is multiplied as one (C, I) x (I, O) product per
leading index (one stream's chunk, or one utterance): ``torch.bmm`` of one shape whatever the
batch, so a stream's rows never depend on which streams share the call (a GEMM over all rows
at once picks its kernel, and so its rounding, by the row count). The subsampling runs one
sample at a time (``int8.PerSample``) for the same reason. Tested: batched equals alone and
streamed equals simulated, token for token.

Shapes: the legend in ``wenet_lite.model``; I in and O out features.
"""

from __future__ import annotations

import torch
from torch import nn

from wenet_lite.model.int8 import replace_linears
from wenet_lite.model.linear import Linear

__all__ = ["Bf16Linear", "to_bf16"]


class Bf16Linear(nn.Module):
    """A :class:`Linear` whose weights and product are bf16; input and output fp32."""

    def __init__(self, linear: Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16).contiguous())
        bias = linear.bias.detach().float() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (B, ..., I). Returns: (B, ..., O) float32, each of the B computed alone."""
        rows = x.reshape(x.size(0), -1, self.in_features).to(torch.bfloat16)  # (B, N, I)
        weight = self.weight.expand(rows.size(0), -1, -1)  # (B, I, O), no copy
        y = torch.bmm(rows, weight).float()  # (B, N, O)
        if self.bias is not None:
            y = y + self.bias
        return y.view(x.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bf16"


def to_bf16(module: nn.Module) -> nn.Module:
    """A copy of ``module`` (an ASRModel or an encoder) whose encoder linears are
    :class:`Bf16Linear` (the position projection and the CTC head stay fp32)."""
    return replace_linears(module, Bf16Linear)
