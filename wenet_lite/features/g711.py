"""G.711 telephone audio (mu-law and A-law, 8 bits a sample) decoded to float samples, beside
the other PCM readers of ``features/``: a table of the 256 codes each, as the ITU-T G.711
expansion gives them."""

from __future__ import annotations

import numpy as np

__all__ = ["decode_alaw", "decode_ulaw"]


def _ulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 7, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return (np.where(u & 0x80, -magnitude, magnitude) / 32768.0).astype(np.float32)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    magnitude = np.where(
        exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
    )
    return (np.where(a & 0x80, magnitude, -magnitude) / 32768.0).astype(np.float32)


_ULAW, _ALAW = _ulaw_table(), _alaw_table()


def decode_ulaw(data: bytes) -> np.ndarray:
    """G.711 mu-law bytes as (N,) float32 samples in [-1, 1)."""
    return _ULAW[np.frombuffer(data, np.uint8)]


def decode_alaw(data: bytes) -> np.ndarray:
    """G.711 A-law bytes as (N,) float32 samples in [-1, 1)."""
    return _ALAW[np.frombuffer(data, np.uint8)]
