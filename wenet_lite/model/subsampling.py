"""Conv2d front-end that shortens the frame rate by 4, 6 or 8.

Shapes: the legend in ``wenet_lite``.
Convolutions have no padding, so encoder frame t sees input frames
[t * rate, t * rate + right_context]: a streaming chunk of C frames needs a window of
(C - 1) * rate + right_context + 1 input frames, and consecutive windows overlap.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import nn

from wenet_lite.model.attention import is_eager
from wenet_lite.model.linear import Linear

__all__ = ["Conv2dSubsampling", "subsampling_layers", "output_length", "min_input_frames"]

Layers = Sequence[Tuple[int, int]]
"""(kernel, stride) along time of each conv layer"""

_LAYERS = {4: ((3, 2), (3, 2)), 6: ((3, 2), (5, 3)), 8: ((3, 2), (3, 2), (3, 2))}


def subsampling_layers(rate: int) -> Layers:
    """The (kernel, stride) of each conv layer for a subsampling rate of 4, 6 or 8."""
    if rate not in _LAYERS:
        raise ValueError(f"subsampling rate must be 4, 6 or 8, got {rate}")
    return _LAYERS[rate]


def output_length(num_frames: int, layers: Layers) -> int:
    """Encoder frames made of ``num_frames`` input frames (0 when too short): each unpadded
    conv of kernel k and stride s maps n frames to (n - k) // s + 1.
    ``Conv2dSubsampling.output_lengths`` is the same for a tensor of lengths (tested equal)."""
    for kernel, stride in layers:
        num_frames = (num_frames - kernel) // stride + 1
    return max(num_frames, 0)


def min_input_frames(layers: Layers) -> int:
    """Fewest input frames that give one encoder frame: the right context + 1."""
    context, step = 0, 1
    for kernel, stride in layers:
        context += (kernel - 1) * step
        step *= stride
    return context + 1


def window_size(chunk_size: int, layers: Layers) -> int:
    """Input frames needed to produce ``chunk_size`` encoder frames (windows of successive
    chunks start ``chunk_size`` times the rate apart)."""
    rate = 1
    for _, stride in layers:
        rate *= stride
    return (chunk_size - 1) * rate + min_input_frames(layers)


class Conv2dSubsampling(nn.Module):
    """Stacked stride-s 2-D convolutions over (time, frequency) followed by a projection."""

    def __init__(self, input_dim: int, d_model: int, rate: int, channels: int = 0) -> None:
        """``channels``: output channels of each conv layer (0: d_model). Fewer than d_model
        makes the front-end much cheaper; its second conv dominates a small model's step."""
        super().__init__()
        if channels < 0:
            raise ValueError(f"subsampling channels must be >= 0, got {channels}")
        self.layers: List[Tuple[int, int]] = list(subsampling_layers(rate))
        width = channels if channels > 0 else d_model
        convs: List[nn.Module] = []
        channels, freq = 1, input_dim
        for kernel, stride in self.layers:
            convs += [nn.Conv2d(channels, width, kernel, stride), nn.ReLU()]
            channels = width
            freq = (freq - kernel) // stride + 1  # the frequency axis shrinks as time does
        if freq < 1:
            raise ValueError(f"input_dim ({input_dim}) is too small for subsampling rate {rate}")
        self.conv = nn.Sequential(*convs)
        self.out = Linear(width * freq, d_model)
        self.input_dim, self.rate = input_dim, rate
        self.right_context = min_input_frames(self.layers) - 1

    def output_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        """:func:`output_length` of each of ``lens`` input frame counts, as a tensor (B,)."""
        for kernel, stride in self.layers:
            lens = torch.div(lens - kernel, stride, rounding_mode="floor") + 1
        return lens.clamp(min=0)

    def window_size(self, chunk_size: int) -> int:
        """Input frames needed to produce ``chunk_size`` encoder frames (:func:`window_size`,
        spelled out for TorchScript; tested equal)."""
        return (chunk_size - 1) * self.rate + self.right_context + 1

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: x (B, T_in, F), lens (B,). Returns: (B, T, D), lens (B,)."""
        if x.size(1) <= self.right_context:
            raise ValueError(
                f"input has {x.size(1)} frames; subsampling by {self.rate} needs at least "
                f"{self.right_context + 1}"
            )
        x = self._convolve(x.unsqueeze(1))  # (B, channels, T, F')
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))  # (B, T, D)
        return x, self.output_lengths(lens)

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        """The convolutions of (B, 1, T, F): in eager inference on the CPU one sample at a time.

        oneDNN picks a convolution's kernel, and so its roundings, by the batch size: on an AMD
        EPYC with AVX2 the demo model's windows came out up to 3e-7 apart batched and alone,
        which then made a stream's log-probs depend on the streams beside it. One sample at a
        time every window gets the same numbers in any batch, at a batched step's speed (the
        products are large enough alone). Training and exported graphs convolve the batch; a
        replaced ``conv`` (the int8 and bf16 engines') keeps its own rule.
        """
        if (
            self.training
            or x.size(0) == 1
            or x.device.type != "cpu"
            or not isinstance(self.conv, nn.Sequential)
            or not is_eager()
        ):
            return self.conv(x)
        return torch.cat([self.conv(x[i : i + 1]) for i in range(x.size(0))], dim=0)
