#!/usr/bin/env python3
"""Streaming features of many streams: the per-stream online fbank (kaldi-native-fbank, one
call per stream and piece) against the streams' batched fbank (``features/stream_fbank.py``,
one torch call for every stream's new frames), side by side in one run.

Usage:
    python benchmarks/bench_features.py [--streams 1 16 64 256] [--steps 40] [--bins 80]

Every step each stream receives 640 ms of audio and the recogniser's window of the next chunk
is read (67 frames, C = 16), as ``StreamingRecognizer.decode_streams`` does; the table gives
milliseconds per step and per stream, one thread. The frames are the same within float32
rounding (``tests/features/test_stream_fbank.py``).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List

import numpy as np
import torch

PIECE = 10240  # samples of 640 ms at 16 kHz: one chunk of C = 16
WINDOW, SHIFT = 67, 64  # frames of a chunk's window and between windows (C = 16, subsampling 4)


def _run(make: Callable, compute: Callable, streams: int, steps: int, audio: np.ndarray) -> float:
    """Mean milliseconds per step (every stream fed one piece, then its window read)."""
    fbanks = [make() for _ in range(streams)]
    nxt = [0] * streams
    times: List[float] = []
    for k in range(steps):
        start = time.perf_counter()
        piece = audio[(k * PIECE) % (len(audio) - PIECE) :][:PIECE]
        for f in fbanks:
            f.accept_waveform(16000, piece)
        compute(fbanks)
        for i, f in enumerate(fbanks):
            if f.num_frames_ready - nxt[i] >= WINDOW:
                f.get_frames(nxt[i], WINDOW)
                nxt[i] += SHIFT
                f.discard_before(nxt[i])
        times.append(time.perf_counter() - start)
    return 1000 * sum(times[2:]) / len(times[2:])


def main() -> None:
    from wenet_lite.config import FeatureConfig
    from wenet_lite.features.fbank import OnlineFbank
    from wenet_lite.features.stream_fbank import FbankStream, compute_ready
    from wenet_lite.host.cpu import cpu_summary

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64, 256])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--bins", type=int, default=80)
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = FeatureConfig(num_mel_bins=args.bins)
    audio = np.random.default_rng(0).uniform(-0.3, 0.3, 16000 * 30).astype(np.float32)
    print(f"{cpu_summary()}\none thread, {args.bins} bins, 640 ms a step")
    print("| streams | knf per stream: ms a step | batched: ms a step | knf / batched |")
    print("|---|---|---|---|")
    for n in args.streams:
        knf = _run(lambda: OnlineFbank(cfg), lambda fs: None, n, args.steps, audio)
        ours = _run(lambda: FbankStream(cfg), compute_ready, n, args.steps, audio)
        print(f"| {n} | {knf:.2f} | {ours:.2f} | {knf / ours:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
