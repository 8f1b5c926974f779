#!/usr/bin/env python3
"""Streaming benchmark: per-chunk latency, RTF, and throughput of many streams batched.

Usage:
    python benchmarks/bench_streaming.py [--config conf/conformer_u2.yaml] [--chunk 16]
        [--left -1 4] [--streams 1 4 16] [--seconds 20] [--threads 1] [--dtypes fp32 bf16]
    python benchmarks/bench_streaming.py --config conf/synthetic_small.yaml --left 4 --long 3600

Drives ``StreamingRecognizer`` the way a server does: every stream receives one chunk of audio
(C * 40 ms) per step, then ONE ``decode_streams`` call decodes every ready stream in a single
batched encoder forward. Timed per step: online fbank, encoder, CTC head and greedy search.

Columns: ``step ms`` is the wall time of one step (feeding + decoding all streams; for one
stream this is the per-chunk latency added on top of the chunk's own duration), ``RTF`` is
compute seconds per second of audio per stream, ``x realtime`` the aggregate throughput
(seconds of audio decoded per wall second, all streams together) and ``speedup`` that
throughput over the single-stream throughput of the same settings.

``--long 3600`` instead streams one hour through ONE stream (audio made chunk by chunk, never
held whole) and prints, every ``--report`` seconds of audio, the process's resident memory and
the mean step time: with ``--left`` >= 0 both stay flat however long the stream runs.

Random weights (speed does not depend on training) and a vocabulary of the config's size; no
tokenizer is needed because only text spelling needs one. Audio is white noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Dict, List, Optional

import numpy as np
import torch

RATE = 16000
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _recognizer(
    config: str,
    chunk: int,
    left: int,
    device: str,
    dtype: torch.dtype,
    precision: str = "fp32",
    slots: Optional[bool] = None,
):
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, open_streaming
    from wenet_lite.runtime.endpoint import EndpointConfig

    cfg = load_config(config)
    torch.manual_seed(0)
    model = build_model(cfg, cfg.tokenizer.vocab_size).to(device, dtype)
    return open_streaming(
        (model, None, cfg), Chunking(chunk, left), endpoint=EndpointConfig(enabled=False),
        engine=EngineSpec(precision=precision, threads=torch.get_num_threads(), device=device),
        slots=slots,
    )  # fmt: skip


def _run(rec, num_streams: int, seconds: float) -> Dict[str, float]:
    """Feed ``num_streams`` streams chunk by chunk in lockstep; time every step."""
    step_samples = rec.chunk_size * rec.subsampling_rate * int(RATE * rec.frame_shift_s)
    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)
    streams = [rec.create_stream() for _ in range(num_streams)]
    times: List[float] = []
    batch_sizes: List[int] = []
    for start in range(0, len(audio), step_samples):
        t0 = time.perf_counter()
        for s in streams:
            s.accept_waveform(RATE, audio[start : start + step_samples])
        batch_sizes.append(len(rec.decode_streams(streams)))
        times.append(time.perf_counter() - t0)
    for s in streams:
        s.input_finished()
    rec.decode_until_done(streams)
    steady = times[1:]  # the first step allocates caches and position tables
    total = sum(steady)
    audio_s = len(steady) * step_samples / RATE
    return {
        "step_ms": 1000 * statistics.mean(steady),
        "p95_ms": 1000 * sorted(steady)[int(0.95 * (len(steady) - 1))],
        "rtf": total / audio_s / num_streams,
        "throughput": num_streams * audio_s / total,
        "batch": max(batch_sizes),
    }


def _rss_mb() -> float:
    """Resident memory of this process now (not the peak), from /proc."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _long_run(rec, seconds: float, report: float) -> None:
    """One stream of ``seconds`` of noise; a row of RSS and step time every ``report`` s."""
    step_samples = rec.chunk_size * rec.subsampling_rate * int(RATE * rec.frame_shift_s)
    rng = np.random.default_rng(0)
    stream = rec.create_stream()
    print("| audio min | RSS MB | step ms (mean / max) | RTF |")
    print("|---|---|---|---|")
    window: List[float] = []
    fed, next_report = 0, report * RATE
    while fed < seconds * RATE:
        piece = (0.1 * rng.standard_normal(step_samples)).astype(np.float32)
        t0 = time.perf_counter()
        stream.accept_waveform(RATE, piece)
        rec.decode_streams([stream])
        window.append(time.perf_counter() - t0)
        fed += step_samples
        if fed >= next_report:
            mean = statistics.mean(window)
            print(
                f"| {fed / RATE / 60:.1f} | {_rss_mb():.0f} | {1000 * mean:.1f} / "
                f"{1000 * max(window):.1f} | {mean * RATE / step_samples:.4f} |",
                flush=True,
            )
            window, next_report = [], next_report + report * RATE
    stream.input_finished()
    rec.decode_until_done([stream])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/conformer_u2.yaml")
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--left", type=int, nargs="+", default=[-1, 4])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per stream")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--dtypes", nargs="+", default=["fp32"], choices=["fp32", "bf16"],
        help="the whole model cast to this dtype (a GPU's bf16)",
    )  # fmt: skip
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16", "int8", "auto"],
        help="the CPU engine's --precision (bf16: linears only, batch-invariant)",
    )  # fmt: skip
    parser.add_argument(
        "--long",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stream this much audio through one stream, reporting memory",
    )
    parser.add_argument("--report", type=float, default=300.0, help="--long: seconds per row")
    parser.add_argument(
        "--slots", choices=["auto", "on", "off"], default="auto",
        help="stream states in one batched tensor with a slot each (auto: on a GPU, with "
        "--left >= 0)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.long > 0:
        for left in args.left:
            print(f"{args.config}, chunk {args.chunk}, left {left}, one stream of "
                  f"{args.long:g} s, {args.threads} thread(s)")  # fmt: skip
            rec = _recognizer(
                args.config, args.chunk, left, args.device, _DTYPES[args.dtypes[0]],
                args.precisions[0],
            )  # fmt: skip
            _long_run(rec, args.long, args.report)
        return
    chunk_ms = args.chunk * 40
    from wenet_lite.host.cpu import cpu_summary

    print(f"{args.config}, chunk {args.chunk} ({chunk_ms} ms), {args.seconds:g} s per stream, "
          f"{args.threads} thread(s), {args.device}\n{cpu_summary()}")  # fmt: skip
    print(
        "| dtype | left | streams | step ms (mean / p95) | RTF per stream | x realtime | speedup "
        "| x one fp32 stream | p95 within the chunk |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base = None  # the first row's throughput: one stream of the first dtype (fp32 by default)
    for dtype in args.dtypes:
        for precision in args.precisions:
            for left in args.left:
                slots = {"auto": None, "on": True, "off": False}[args.slots]
                if slots and left < 0:
                    continue  # slots hold fixed caches
                rec = _recognizer(
                    args.config, args.chunk, left, args.device, _DTYPES[dtype], precision, slots
                )
                name = dtype if rec.engine.name == "torch" else rec.engine.name.split()[1]
                single = None
                for n in args.streams:
                    r = _run(rec, n, args.seconds)
                    assert r["batch"] == n, "every stream should be in each step's one batch"
                    single = r["throughput"] if single is None else single
                    base = r["throughput"] / n if base is None else base
                    print(
                        f"| {name} | {left} | {n} | {r['step_ms']:.1f} / {r['p95_ms']:.1f} "
                        f"| {r['rtf']:.4f} | {r['throughput']:.1f} | "
                        f"{r['throughput'] / single:.2f} | {r['throughput'] / base:.2f} | "
                        f"{'yes' if r['p95_ms'] < chunk_ms else 'no'} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
