"""CTC log-probabilities of audio of any length in bounded memory: what `decode` runs for an
utterance longer than ``max_window_seconds``.

Full-context attention over T frames costs memory in T²: a 10-minute file needs gigabytes. So:

- **Chunked modes** (chunk-masked, simulated streaming) run the encoder chunk by chunk with the
  attention cache (``ConformerEncoder.forward_chunk_by_chunk``): the chunk-masked forward and
  the cached one are the same computation (equal within float rounding, tested), so results
  do not change; memory grows linearly, and not at all with left chunks >= 0.
- **Full context** encodes overlapping windows of ``window`` encoder frames, ``overlap``
  frames apart at each join, and keeps each window's middle: window k covers frames
  [k*hop, k*hop + window) with hop = window - overlap and contributes
  [k*hop + overlap/2, (k+1)*hop + overlap/2) (the first from 0, the last to the end), so every
  kept frame has at least overlap/2 frames of context on each side and the kept parts tile
  the utterance exactly (NeMo's buffered CTC decoding keeps window middles the same way).

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Tuple

import torch

from wenet_lite.model import ASRModel
from wenet_lite.model.subsampling import output_length

__all__ = ["full_context_windows", "long_encoder_output", "long_log_probs"]


def full_context_windows(total: int, window: int, overlap: int) -> List[Tuple[int, int, int]]:
    """(first frame, keep from, keep to) of each window over ``total`` encoder frames, keep
    bounds relative to the window; see the module docstring."""
    if window <= 0 or not 0 <= overlap < window:
        raise ValueError(f"need 0 <= overlap ({overlap}) < window ({window})")
    hop, half = window - overlap, overlap // 2
    windows: List[Tuple[int, int, int]] = []
    start = 0
    while True:
        last = start + window >= total
        keep_from = 0 if start == 0 else half
        keep_to = (total - start) if last else window - (overlap - half)
        windows.append((start, keep_from, keep_to))
        if last:
            return windows
        start += hop


@torch.inference_mode()
def long_encoder_output(
    model: ASRModel,
    feats: torch.Tensor,
    chunk_size: int,
    left_chunks: int,
    window: int,
    overlap: int,
    progress: Optional[str] = None,
) -> torch.Tensor:
    """The encoder output (T, D) of one long utterance's features (T_in, F) on the model's
    device: chunk by chunk when ``chunk_size`` > 0, else in overlapping full-context windows of
    ``window`` encoder frames. ``progress``: a label for a progress bar (None: none)."""
    encoder = model.encoder
    device = encoder.cmvn.mean.device
    x = feats.to(device)[None]  # (1, T_in, F)
    if chunk_size > 0:
        return encoder.forward_chunk_by_chunk(x, chunk_size, left_chunks)[0]  # (T, D)
    sub = encoder.subsampling
    total = output_length(feats.size(0), sub.layers)
    pieces = []
    for start, keep_from, keep_to in _bar(full_context_windows(total, window, overlap), progress):
        first = start * sub.rate
        frames = x[:, first : first + sub.window_size(window)]  # (1, W_in, F)
        lens = torch.tensor([frames.size(1)], device=device)
        encoded, _ = encoder(frames, lens)  # (1, T_w, D)
        pieces.append(encoded[0, keep_from:keep_to])
    out = torch.cat(pieces)  # (T, D)
    assert out.size(0) == total, (out.size(0), total)
    return out


@torch.inference_mode()
def long_log_probs(model: ASRModel, feats: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Log-probabilities (T, V): the CTC head over :func:`long_encoder_output` (same arguments)."""
    return model.ctc(long_encoder_output(model, feats, *args, **kwargs)[None])[0]


def _bar(
    windows: List[Tuple[int, int, int]], label: Optional[str]
) -> Iterator[Tuple[int, int, int]]:
    if label is None or len(windows) < 3:
        yield from windows
        return
    from tqdm import tqdm

    yield from tqdm(windows, desc=label, unit="window", leave=False)
