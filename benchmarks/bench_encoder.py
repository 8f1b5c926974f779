#!/usr/bin/env python3
"""Encoder speed benchmark: full forward and chunk-by-chunk streaming, eager and TorchScript.

Usage:
    python benchmarks/bench_encoder.py [--config conf/conformer_u2.yaml] [--seconds 10]
        [--threads 1 2] [--chunk 16] [--repeats 3] [--dtypes fp32 bf16]

Prints a table: wall seconds for the whole input, real-time factor (seconds of compute per
second of audio), per-chunk latency (mean and max, streaming only) and peak RSS. Each row runs
in its own process so peak RSS belongs to that row alone. Random weights: speed does not
depend on training.

Engines: eager PyTorch, TorchScript (what `wenet-lite export` ships) and torch.compile with
frozen weights (inductor; compile time is not counted).

Streaming one chunk of 16 frames reads every weight once (~130 MB in fp32 for the 12-block
model), so on one core it is bound by memory bandwidth rather than arithmetic; bf16 weights
halve that traffic (and use AMX/AVX512-BF16 where the CPU has them).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Dict, List

import torch

FRAME_SHIFT_S = 0.01


def _build(config: str):
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model

    cfg = load_config(config)
    return build_model(cfg, cfg.tokenizer.vocab_size).encoder.eval(), cfg.features.num_mel_bins


def _stream(enc, feats: torch.Tensor, chunk: int, left: int) -> List[float]:
    """Time each forward_chunk call the way a streaming server would make them."""
    from wenet_lite.model.posenc import slice_tables

    sub = enc.subsampling
    total = int(sub.output_lengths(torch.tensor(feats.size(1))).item())
    num_chunks = (total + chunk - 1) // chunk
    window = sub.window_size(chunk)
    state = enc.init_state(1, chunk, left)
    # Position tables depend on the window shape only: computed once, sliced per chunk.
    max_keys = chunk * (left + 1) if left >= 0 else chunk * num_chunks
    tables = enc.position_tables(chunk, max_keys)
    times = []
    for k in range(num_chunks):
        c = min(chunk, total - k * chunk)
        pos = slice_tables(tables, max_keys, c, state.att_cache.size(3) + c)
        start = k * chunk * sub.rate
        t0 = time.perf_counter()
        _, state = enc.forward_chunk(feats[:, start : start + window], state, None, pos)
        times.append(time.perf_counter() - t0)
    return times


def _worker(args: argparse.Namespace) -> Dict[str, float]:
    from wenet_lite.host.malloc import keep_freed_memory

    keep_freed_memory()  # as `wenet-lite` and StreamingRecognizer do
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    enc, dim = _build(args.config)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    enc = enc.to(dtype)
    if args.engine == "torchscript":
        enc = torch.jit.script(enc)
    elif args.engine == "compile":
        # Inductor with frozen weights: prepacked oneDNN GEMMs and fused elementwise ops.
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True
        enc.forward = torch.compile(enc.forward, dynamic=False)
        enc.forward_chunk = torch.compile(enc.forward_chunk, dynamic=False)
    frames = int(round(args.seconds / FRAME_SHIFT_S))
    feats = torch.randn(1, frames, dim, dtype=dtype)
    lens = torch.tensor([frames])
    best = float("inf")
    chunk_times: List[float] = []
    with torch.inference_mode():
        # TorchScript's profiling executor specialises the graph over its first calls.
        warmup = 3
        for rep in range(warmup + args.repeats):
            t0 = time.perf_counter()
            if args.mode == "full":
                enc(feats, lens)
                times: List[float] = []
            else:
                times = _stream(enc, feats, args.chunk, args.left)
            elapsed = time.perf_counter() - t0
            if rep >= warmup and elapsed < best:
                best, chunk_times = elapsed, times
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = {"seconds": best, "rtf": best / args.seconds, "peak_rss_mb": peak_mb}
    if chunk_times:
        row["chunk_ms_mean"] = 1000 * sum(chunk_times) / len(chunk_times)
        row["chunk_ms_max"] = 1000 * max(chunk_times)
    return row


def _run_row(
    args: argparse.Namespace, mode: str, left: int, engine: str, threads: int, dtype: str
) -> Dict:
    cmd = [
        sys.executable, __file__, "--worker", "--config", args.config,
        "--seconds", str(args.seconds), "--chunk", str(args.chunk), "--repeats", str(args.repeats),
        "--mode", mode, "--left", str(left), "--engine", engine, "--threads", str(threads),
        "--dtype", dtype,
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/conformer_u2.yaml")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio length")
    parser.add_argument("--chunk", type=int, default=16, help="encoder frames per chunk")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["eager", "torchscript"],
        choices=["eager", "torchscript", "compile"],
        help="compile = torch.compile (inductor, frozen weights; needs a C++ compiler, ~1 min)",
    )
    parser.add_argument("--dtypes", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    parser.add_argument("--left", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="eager", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.threads = args.threads[0]
        print(json.dumps(_worker(args)))
        return

    print(f"{args.config}, {args.seconds:g} s input, chunk {args.chunk}, torch {torch.__version__}")
    header = (
        "| mode | engine | dtype | threads | seconds | RTF | chunk ms (mean / max) | peak RSS MB |"
    )
    print(header)
    print("|" + "---|" * 8)
    modes = [("full", "full", -1), ("chunk N=-1", "chunk", -1), ("chunk N=4", "chunk", 4)]
    rows = [
        (label, mode, left, engine, dtype, threads)
        for label, mode, left in modes
        for engine in args.engines
        for dtype in args.dtypes
        for threads in args.threads
    ]
    for label, mode, left, engine, dtype, threads in rows:
        r = _run_row(args, mode, left, engine, threads, dtype)
        lat = "-"
        if mode != "full":
            lat = f"{r['chunk_ms_mean']:.1f} / {r['chunk_ms_max']:.1f}"
        print(
            f"| {label} | {engine} | {dtype} | {threads} | {r['seconds']:.3f} "
            f"| {r['rtf']:.4f} | {lat} | {r['peak_rss_mb']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
