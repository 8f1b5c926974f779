"""Engines side by side: the whole streaming recogniser (features, search, state batching) on
each engine, one stream and many batched, one thread.

    python tools/bench_engines.py --model exp/synthetic/avg_5.pt [--data DIR] [--streams 1,16]

Prints ms per decode step (one chunk of every stream) and the real-time factor per stream, best
of --repeats. Without --data the streams are noise (timing does not depend on the words).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from wenet_lite.decode.endpoint import EndpointConfig
from wenet_lite.decode.engines import OnnxRuntimeEngine, TorchEngine
from wenet_lite.decode.streaming import StreamingRecognizer
from wenet_lite.export.batched import export_batched_onnx
from wenet_lite.model.chunking import Chunking
from wenet_lite.model_io import load_model


def _audio(data: str, n: int, seconds: float) -> list:
    if not data:
        rng = np.random.default_rng(0)
        return [rng.normal(0, 0.1, int(16000 * seconds)).astype(np.float32) for _ in range(n)]
    from wenet_lite.data.manifest import cut_samples, load_cuts

    cuts = list(load_cuts(data))
    return [
        np.resize(cut_samples(cuts[i % len(cuts)], 16000), int(16000 * seconds)).astype(np.float32)
        for i in range(n)
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", default="", help="prepared set whose audio is streamed")
    p.add_argument("--streams", default="1,16")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--left-chunks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tokenizer, cfg = load_model(args.model, torch.device("cpu"))
    chunking = Chunking(args.chunk_size, args.left_chunks)
    counts = [int(x) for x in args.streams.split(",")]
    audio = _audio(args.data, max(counts), args.seconds)
    engines = {
        "torch": None,
        "torch int8": TorchEngine(model, chunking, int8=True),
        "onnxruntime": OnnxRuntimeEngine(export_batched_onnx(model, chunking), chunking),
    }
    print("| engine | streams | ms a step | RTF a stream |\n|---|---|---|---|")
    for name, engine in engines.items():
        rec = StreamingRecognizer.from_model(
            model, cfg, tokenizer, chunking, endpoint=EndpointConfig(enabled=False),
            engine=engine,
        )  # fmt: skip
        for n in counts:
            best, steps = float("inf"), 1
            for _ in range(args.repeats):
                streams = [rec.create_stream() for _ in range(n)]
                for s, a in zip(streams, audio):
                    s.accept_waveform(16000, a)
                    s.input_finished()
                start, steps = time.perf_counter(), 0
                while rec.decode_streams(streams):
                    steps += 1
                best = min(best, time.perf_counter() - start)
            print(f"| {name} | {n} | {1000 * best / steps:.1f} | {best / (args.seconds * n):.4f} |")


if __name__ == "__main__":
    main()
