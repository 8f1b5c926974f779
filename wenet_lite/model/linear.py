"""A linear layer whose weight is stored (in_features, out_features).

Streaming multiplies 16-row chunks by the weights, and MKL's GEMM is faster there when the
weight is not transposed (x @ W rather than nn.Linear's x @ W^T); at a few hundred rows both
layouts run the same (measured with MKL on the CPU, one thread). Math, initialisation and ONNX
export (MatMul + Add) are those of nn.Linear.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["Linear"]


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default initialisation
        self.weight = nn.Parameter(torch.empty(in_features, out_features).uniform_(-bound, bound))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (..., in_features). Returns: (..., out_features)."""
        bias = self.bias
        if bias is None:
            return torch.matmul(x, self.weight)
        flat = x.reshape(-1, self.in_features)  # addmm fuses the bias into the GEMM
        return torch.addmm(bias, flat, self.weight).view(x.shape[:-1] + (self.out_features,))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"
