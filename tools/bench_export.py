#!/usr/bin/env python3
"""Streaming speed of the exported model: eager vs TorchScript vs onnxruntime, fp32 and int8.

Usage:
    python tools/bench_export.py [--config conf/conformer_u2.yaml] [--vocab 5000]
        [--chunk 16] [--left 4] [--chunks 30] [--threads 1] [--repeats 3]

Prints a markdown table: real-time factor (compute seconds per second of audio), mean
milliseconds per chunk, file size, and how far each engine's log-probs are from eager fp32
(max abs difference, and the share of frames whose argmax token agrees). Random weights and
random features: speed does not depend on training, but the output change of int8 on a trained
model (WER) needs a trained model, so the agreement column is only a proxy.

Every engine streams the same windows chunk by chunk with caches of C*N frames, one stream,
``--threads`` intra-op threads (onnxruntime: inter-op 1 too, sequential execution). One chunk
of 16 frames reads every weight once (~130 MB fp32 for the 12-block model), so on a CPU core it
is bound by memory bandwidth; int8 weights cut that traffic by 4.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch

FRAME_SHIFT_S = 0.01
ChunkFn = Callable[[np.ndarray], np.ndarray]  # (W, F) window -> (C, V) log-probs


def _torch_engine(module: torch.nn.Module) -> Callable[[], ChunkFn]:
    """A factory of fresh streams over a StreamingCTC (eager) or its scripted form."""

    def new_stream() -> ChunkFn:
        state = [module.init_state(1)]

        def step(window: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                log_probs, state[0] = module.forward_chunk(torch.from_numpy(window)[None], state[0])
            return log_probs[0].numpy()

        return step

    return new_stream


def _onnx_engine(path: Path, threads: int) -> Callable[[], ChunkFn]:
    import onnxruntime as ort

    from wenet_lite.export.onnx import OnnxStreamer

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    streamer = OnnxStreamer(
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    )

    def new_stream() -> ChunkFn:
        streamer.reset()
        return streamer.accept_window

    return new_stream


def _run(new_stream: Callable[[], ChunkFn], windows: List[np.ndarray]) -> Tuple[np.ndarray, float]:
    """Stream all windows; returns log-probs (T, V) and seconds spent in the model."""
    step = new_stream()
    outs, spent = [], 0.0
    for window in windows:
        t0 = time.perf_counter()
        outs.append(step(window))
        spent += time.perf_counter() - t0
    return np.concatenate(outs), spent


Engines = Dict[str, Tuple[Callable[[], ChunkFn], int]]  # name -> (stream factory, file bytes)


def _engines(args: argparse.Namespace, work: Path) -> Tuple[Engines, int, int]:
    """Build the model once and every engine from it; also the window size and shift."""
    from wenet_lite.config import load_config
    from wenet_lite.export.onnx import export_onnx_model, quantize_int8
    from wenet_lite.export.torchscript import StreamingCTC, save_scripted, script_model
    from wenet_lite.model import build_model

    cfg = load_config(args.config)
    torch.manual_seed(0)
    model = build_model(cfg, args.vocab).eval()
    pieces = ["<blank>", "<unk>"] + [f"t{i}" for i in range(args.vocab - 2)]
    eager = StreamingCTC(model.encoder, model.ctc, args.chunk, args.left, {"k": "v"}, pieces)
    torch.save(model.state_dict(), work / "eager.pt")
    engines: Engines = {"eager fp32": (_torch_engine(eager), _size(work / "eager.pt"))}
    for quantize in (None, "int8"):
        path = work / f"model.{quantize or 'fp32'}.ts"
        save_scripted(script_model(model, cfg, pieces, args.chunk, args.left, quantize), path)
        module = torch.jit.load(str(path)).eval()
        engines[f"torchscript {quantize or 'fp32'}"] = (_torch_engine(module), _size(path))
    onnx_fp32 = export_onnx_model(model, cfg, work / "model.onnx", args.chunk, args.left)
    onnx_int8 = quantize_int8(onnx_fp32, work / "model.int8.onnx")
    engines["onnxruntime fp32"] = (_onnx_engine(onnx_fp32, args.threads), _size(onnx_fp32))
    engines["onnxruntime int8"] = (_onnx_engine(onnx_int8, args.threads), _size(onnx_int8))
    sub = model.encoder.subsampling
    return engines, sub.window_size(args.chunk), args.chunk * sub.rate


def _size(path: Path) -> int:
    return path.stat().st_size


def _measure(engines: Engines, windows: List[np.ndarray], repeats: int) -> List[Tuple]:
    """Per engine: (name, seconds, file bytes, max abs diff and argmax agreement vs the first)."""
    rows, reference = [], None
    for name, (new_stream, size) in engines.items():
        _run(new_stream, windows[:2])  # warm-up: allocations, weight prepacking
        passes = [_run(new_stream, windows) for _ in range(repeats)]
        log_probs, spent = passes[0][0], min(p[1] for p in passes)
        if reference is None:
            reference = log_probs
        diff = float(np.abs(log_probs - reference).max())
        agree = float((log_probs.argmax(-1) == reference.argmax(-1)).mean())
        rows.append((name, spent, size, diff, agree))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--config", default="conf/conformer_u2.yaml")
    parser.add_argument("--vocab", type=int, default=5000)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--left", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=30, help="chunks streamed per pass")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="best of N passes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)  # onnxruntime's quantizer suggests pre-processing
    with tempfile.TemporaryDirectory() as tmp:
        engines, window, shift = _engines(args, Path(tmp))
        rng = np.random.default_rng(0)
        feats = rng.standard_normal(((args.chunks - 1) * shift + window, 80), dtype=np.float32)
        windows = [feats[k * shift : k * shift + window] for k in range(args.chunks)]
        rows = _measure(engines, windows, args.repeats)
    audio_s = args.chunks * shift * FRAME_SHIFT_S
    print(
        f"{args.config}, vocab {args.vocab}, C={args.chunk}, N={args.left}, {args.threads} "
        f"thread(s), {args.chunks} chunks ({audio_s:.1f} s of audio), best of {args.repeats}"
    )
    print("| engine | RTF | ms/chunk | file MB | max abs diff | argmax agree |")
    print("|---|---|---|---|---|---|")
    for name, spent, size, diff, agree in rows:
        print(
            f"| {name} | {spent / audio_s:.3f} | {1000 * spent / args.chunks:.1f} | "
            f"{size / 2**20:.0f} | {diff:.1e} | {100 * agree:.1f}% |"
        )


if __name__ == "__main__":
    main()
