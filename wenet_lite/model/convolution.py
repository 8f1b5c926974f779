"""Conformer convolution module with a causal (streamable) or centred depthwise conv.

Shapes: the legend in ``wenet_lite`` (T: the frames of a chunk or an utterance).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.model.linear import Linear

__all__ = ["ConvModule"]


class ConvModule(nn.Module):
    """pointwise -> GLU -> depthwise -> norm -> SiLU -> pointwise (Gulati et al. 2020, fig. 2).

    A causal depthwise conv looks only at the current and K-1 previous frames; in streaming
    those previous frames come from a cache, in a full forward from zero padding, so both agree.
    """

    def __init__(
        self, d_model: int, kernel_size: int, causal: bool, norm: str, norm_eps: float = 1e-5,
        pad: str = "zero",
    ) -> None:  # fmt: skip
        """``pad``: what a causal conv sees before the first frame: ``zero`` depthwise inputs,
        or ``wenet``: the GLU of the first pointwise conv's bias, which is what zero *block*
        inputs give (WeNet pads before that conv)."""
        super().__init__()
        if norm not in ("layer_norm", "batch_norm"):
            raise ValueError(f"conv norm must be 'layer_norm' or 'batch_norm', got {norm!r}")
        if not causal and kernel_size % 2 == 0:
            raise ValueError(f"a centred conv needs an odd kernel_size, got {kernel_size}")
        if pad not in ("zero", "wenet"):
            raise ValueError(f"conv pad must be 'zero' or 'wenet', got {pad!r}")
        self.causal = causal
        self.kernel_size = kernel_size
        self.pad_wenet = pad == "wenet"
        self.d_model = d_model
        self.use_layer_norm = norm == "layer_norm"
        # Pointwise convs are linears on (B, T, D): no transposes around them.
        self.pointwise_in = Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model)
        self.norm = (
            nn.LayerNorm(d_model, eps=norm_eps) if self.use_layer_norm else nn.BatchNorm1d(d_model)
        )
        self.pointwise_out = Linear(d_model, d_model)

    def forward(
        self,
        x: torch.Tensor,
        valid: torch.Tensor,
        cache: torch.Tensor,
        cache_real: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args:
            x: (B, T, D); valid: False at padded frames, (B, T);
            cache: the last K-1 depthwise inputs before x, (B, D, K-1) (causal only);
            cache_real: which cache columns hold real frames, (B, 1, K-1); with ``pad``
                ``wenet`` the others read as the pad frame (None: all real).
        Returns:
            out (B, T, D) and the new cache (B, D, K-1).
        """
        if self.pad_wenet and self.causal and cache_real is not None:
            cache = torch.where(cache_real, cache, self.pad_frame(cache).view(1, -1, 1))
        x = F.glu(self.pointwise_in(x), dim=-1)  # (B, T, D)
        # Zero padded frames so a batch sees the same conv input as each utterance alone.
        x = x.masked_fill(~valid.unsqueeze(-1), 0.0).transpose(1, 2)  # (B, D, T)
        if self.causal:
            x = torch.cat([cache, x], dim=2)  # (B, D, K-1+T)
            new_cache = x[:, :, x.size(2) - (self.kernel_size - 1) :]  # (B, D, K-1)
        else:
            half = (self.kernel_size - 1) // 2
            x = F.pad(x, (half, half))
            new_cache = cache
        x = self.depthwise(x)  # (B, D, T)
        if self.use_layer_norm:
            x = self.norm(x.transpose(1, 2))  # (B, T, D)
        else:
            x = self.norm(x).transpose(1, 2)  # (B, T, D)
        return self.pointwise_out(F.silu(x)), new_cache

    def pad_frame(self, like: torch.Tensor) -> torch.Tensor:
        """The depthwise input of a zero block input (GLU of the pointwise bias), computed by
        the pointwise layer itself, whatever it became (int8, quantized), (D,)."""
        zero = like.new_zeros(1, self.d_model)
        return F.glu(self.pointwise_in(zero), dim=-1)[0]
