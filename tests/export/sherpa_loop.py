"""sherpa-onnx's streaming loop over an exported model, in Python: the reference the ONNX
export tests compare against (the mask, offsets and caches sherpa-onnx feeds, chunk by chunk).
"""

from __future__ import annotations

from typing import List

import numpy as np
import onnxruntime
import torch

from wenet_lite.export.onnx import OUTPUT_NAMES


def encoder_over_sherpa_windows(
    model, feats: torch.Tensor, chunk_size: int, left_chunks: int
) -> torch.Tensor:
    """(1, T, D) our encoder's chunk-by-chunk output over the windows sherpa-onnx decodes of
    (T_in, F) features: it decodes window k (frames k*shift .. k*shift+W-1) only once frame
    k*shift+W exists (online-recognizer-*-impl.h IsReady), never the last incomplete one."""
    sub = model.encoder.subsampling
    window, shift = sub.window_size(chunk_size), chunk_size * sub.rate
    num_windows = (feats.size(0) - window - 1) // shift + 1
    frames = (num_windows - 1) * shift + window
    with torch.no_grad():
        return model.encoder.forward_chunk_by_chunk(feats[None, :frames], chunk_size, left_chunks)


def sherpa_attn_mask(chunk_index: int, chunk_size: int, left_chunks: int) -> np.ndarray:
    """The (1, 1, C*N + C) bool mask sherpa-onnx feeds before chunk ``chunk_index`` (0-based)."""
    cached = chunk_size * left_chunks
    mask = np.ones((1, 1, cached + chunk_size), dtype=bool)
    if chunk_index < left_chunks:
        mask[:, :, : cached - chunk_index * chunk_size] = False
    return mask


class OnnxStreamer:
    """Drives an exported model the way sherpa-onnx does.

    Args: an ``onnxruntime.InferenceSession`` of a file written by :func:`export_onnx`.
    """

    def __init__(self, session: onnxruntime.InferenceSession) -> None:
        meta = session.get_modelmeta().custom_metadata_map
        self.session = session
        self.chunk_size = int(meta["chunk_size"])
        self.left_chunks = int(meta["left_chunks"])
        self.window_size = int(meta["window_size"])
        self.window_shift = int(meta["window_shift"])
        self.reset()

    def reset(self) -> None:
        """Start a new stream: zero caches, as sherpa's GetInitStates."""
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.chunk_index = 0
        self.attn_cache = np.zeros(inputs["attn_cache"].shape, dtype=np.float32)
        self.conv_cache = np.zeros(inputs["conv_cache"].shape, dtype=np.float32)

    def accept_window(self, window: np.ndarray) -> np.ndarray:
        """Args: window (W, F) float32 fbank frames. Returns: log_probs (C, V)."""
        cached = self.chunk_size * self.left_chunks
        offset = np.array([cached + self.chunk_index * self.chunk_size], dtype=np.int64)
        feeds = {
            "x": window[None].astype(np.float32, copy=False),
            "offset": offset,
            "required_cache_size": np.array([cached], dtype=np.int64),
            "attn_cache": self.attn_cache,
            "conv_cache": self.conv_cache,
            "attn_mask": sherpa_attn_mask(self.chunk_index, self.chunk_size, self.left_chunks),
        }
        log_probs, self.attn_cache, self.conv_cache = self.session.run(list(OUTPUT_NAMES), feeds)
        self.chunk_index += 1
        return log_probs[0]

    def accept_features(self, feats: np.ndarray) -> np.ndarray:
        """Every complete window of (T, F) features from a fresh stream: (chunks * C, V)."""
        self.reset()
        outs: List[np.ndarray] = []
        start = 0
        while start + self.window_size <= feats.shape[0]:
            outs.append(self.accept_window(feats[start : start + self.window_size]))
            start += self.window_shift
        if not outs:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(outs, axis=0)
