"""Test signals shared by the VAD's tests and benchmarks/bench_vad_transcribe.py."""

from __future__ import annotations

import numpy as np


def noise_and_tones(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Noise swelling four times a second (a syllable's rhythm, which the rigged model
    writes words for) over a melody of harmonic tones, a new note every 0.4 s; 16 kHz, as
    loud as the test speech."""
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    notes = 220 * 2 ** (rng.integers(0, 12, size=int(seconds / 0.4) + 1) / 12)
    phase = 2 * np.pi * np.cumsum(notes[(t / 0.4).astype(int)]) / 16000
    tones = sum(np.sin(k * phase) / k for k in (1, 2, 3, 4)) * 0.3
    noise = rng.normal(0, 0.2, n) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    return (tones + noise).astype(np.float32)
