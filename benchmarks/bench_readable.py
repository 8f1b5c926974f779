#!/usr/bin/env python3
"""What readable output costs: the VAD per hour of audio (one file's windows in order) and per
stream (many streams' windows in one batched call, bare and as live streams' turns are tracked:
a 640 ms chunk of every stream, rule "vad"), and punctuation per 1,000 words (whole texts, and
word by word as a stream labels them).

    python benchmarks/bench_readable.py [--punct DIR] [--minutes 10] [--streams 1 16 64]

Without --punct a model of the default size with random weights is timed (the cost does not
depend on the weights). One thread, as `transcribe` and `serve` run.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import List

import numpy as np
import torch


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--punct", help="a punctuation model directory (default: random weights)")
    p.add_argument("--minutes", type=float, default=10.0, help="audio timed for the VAD")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--words", type=int, default=5000, help="words timed for punctuation")
    args = p.parse_args()
    torch.set_num_threads(1)
    from wenet_lite.host.cpu import cpu_summary

    print(cpu_summary().splitlines()[0])
    rows: List[str] = ["| what | setting | cost | per |", "|---|---|---|---|"]

    from wenet_lite.vad.silero import WINDOW, SileroVad

    vad = SileroVad()
    rng = np.random.default_rng(0)
    audio = (rng.normal(0, 0.05, int(args.minutes * 60 * 16000))).astype(np.float32)
    seconds = _best(lambda: vad.probabilities(audio), repeat=1)
    hour = seconds * 60 / args.minutes
    rows.append(f"| VAD, one file | {args.minutes:g} min of audio | {hour:.1f} s | hour of audio "
                f"({3600 / hour:.0f}x real time) |")  # fmt: skip
    for n in args.streams:
        state, context = vad.initial_state(n)
        windows = rng.normal(0, 0.05, (n, WINDOW)).astype(np.float32)

        def steps(state=state, context=context, windows=windows) -> None:
            for _ in range(50):
                _, state, context = vad.step(windows, state, context)

        per_window = _best(steps) / 50
        rows.append(f"| VAD, batched streams | {n} streams | {1000 * per_window / n:.3f} ms | "
                    f"stream per 32 ms window ({100 * per_window / 0.032:.1f} % of a core "
                    "for all) |")  # fmt: skip

    from wenet_lite.vad.online import SpeechTracker, track
    from wenet_lite.vad.silero import VadOptions

    chunk = 20 * WINDOW  # 640 ms: a chunk of 16 encoder frames
    for n in args.streams:
        trackers = [SpeechTracker(VadOptions(min_silence_ms=500)) for _ in range(n)]
        pieces = rng.normal(0, 0.05, (n, chunk)).astype(np.float32)

        def chunks(trackers=trackers, pieces=pieces) -> None:
            for _ in range(5):
                for t, x in zip(trackers, pieces):
                    t.accept(x)
                track(vad, trackers, [t.received for t in trackers])
                for t in trackers:
                    t.take()

        per_chunk = _best(chunks) / 5
        rows.append(f"| VAD, live streams' turns | {n} streams, 640 ms chunks | "
                    f"{1000 * per_chunk / n / 0.64:.3f} ms | stream per second of audio "
                    f"({100 * per_chunk / 0.64:.1f} % of a core for all) |")  # fmt: skip

    from wenet_lite.punct.model import PunctConfig, PunctModel
    from wenet_lite.punct.punctuator import Punctuator

    if args.punct:
        punctuator = Punctuator.load(args.punct)
    else:
        vocab = [f"w{i}" for i in range(20000)]
        punctuator = Punctuator(PunctModel(PunctConfig()), vocab, {})
    words = [f"w{random.Random(i).randrange(30000)}" for i in range(args.words)]
    texts = [words[i : i + 20] for i in range(0, len(words), 20)]  # segments of 20 words

    def in_batches() -> None:
        for i in range(0, len(texts), 50):
            punctuator.labels(texts[i : i + 50])

    whole = _best(in_batches)
    rows.append(f"| punctuation, whole segments | 20-word segments, 50 a batch | "
                f"{1000 * whole * 1000 / len(words):.1f} ms | 1,000 words |")  # fmt: skip

    def streamed() -> None:
        stream = punctuator.stream()
        for w in words[:1000]:
            stream.accept([w])
        stream.finish()

    one = _best(streamed, repeat=1)
    rows.append(f"| punctuation, streamed | a word at a time | {1000 * one:.1f} ms | 1,000 words |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
