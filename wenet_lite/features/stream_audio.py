"""A stream's audio as it arrives: float mono samples at any rate, checked, resampled to the
model's rate and clipped to [-1, 1], piece by piece.

soxr's streaming resampler at the quality ``features.audio.load_audio`` uses gives the samples
that resampling the whole file gives, whatever sizes the pieces come in, so streamed and
offline features agree.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import soxr

__all__ = ["SOXR_QUALITY", "StreamAudio"]

SOXR_QUALITY = "HQ"
"""as ``features.audio.load_audio`` resamples, so streamed and offline samples agree"""


class StreamAudio:
    """One stream's input: :meth:`accept` pieces at the rate of the first piece (it must not
    change), :meth:`finish` once; each returns the new samples at ``target_rate``."""

    def __init__(self, target_rate: int) -> None:
        self.target_rate = target_rate
        self.rate: Optional[int] = None
        """the input's sample rate (its first piece's)"""
        self._resampler: Optional[soxr.ResampleStream] = None

    def accept(self, sample_rate: int, samples: np.ndarray) -> np.ndarray:
        """(N,) float samples in [-1, 1] at ``sample_rate`` -> (M,) float32 at the target rate,
        clipped (values beyond full scale, as on file input). ValueError for integer samples
        (clipped, 16-bit PCM would be noise), other shapes, NaN or a changed rate."""
        x = _mono_float(samples)
        if self.rate is None:
            self.rate = sample_rate
            if sample_rate != self.target_rate:
                self._resampler = soxr.ResampleStream(
                    sample_rate, self.target_rate, 1, dtype="float32", quality=SOXR_QUALITY
                )
        elif sample_rate != self.rate:
            raise ValueError(
                f"a stream's sample rate cannot change: got {sample_rate} Hz after {self.rate} Hz"
            )
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        return np.clip(x, -1.0, 1.0)

    def finish(self) -> np.ndarray:
        """The resampler's last samples (none without resampling)."""
        if self._resampler is None:
            return np.zeros(0, np.float32)
        tail = self._resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        return np.clip(tail, -1.0, 1.0)


def _mono_float(samples: np.ndarray) -> np.ndarray:
    """(N,) float32 of float mono samples; ValueError for integer, multi-dimensional or
    non-finite ones."""
    kind = np.asarray(samples).dtype.kind
    if kind not in "f":
        raise ValueError(
            f"accept_waveform takes float samples in [-1, 1], got {np.asarray(samples).dtype}"
            + (": divide 16-bit PCM by 32768" if kind in "iu" else "")
        )
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono samples of shape (N,), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or inf")
    return x
