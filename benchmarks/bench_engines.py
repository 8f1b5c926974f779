"""Engines side by side: the whole streaming recogniser (features, search, state batching) on
each engine and precision, one stream and many batched, one thread.

    python benchmarks/bench_engines.py --config conf/conformer_u2.yaml [--vocab 5000]
    python benchmarks/bench_engines.py --model exp/synthetic/avg_5.pt \
        [--data data/synthetic/test-clean]

One table: per engine, ms per chunk for one stream (and the ratio to the torch fp32 engine,
the eager path), its real-time factor, the throughput gain of 4 and 16 streams batched (audio
decoded per second over one stream's), the peak resident memory of a process that builds and
runs only that engine (exports run in another), and the size of the file it runs (torch: the
model file in fp32; torch int8 quantizes in memory). The rows are measured one after another
in one run, so ratios are comparable.

``--config`` builds the model with random weights (seed 0; speed does not depend on training)
and a vocabulary of ``--vocab``; ``--model`` loads a trained one. Without ``--data`` the
streams are noise. Exporting for onnxruntime and lowering for executorch happen before
timing (executorch int8 of conformer_u2 takes about two minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

from wenet_lite.model.chunking import Chunking

ENGINES = ("torch", "torch bf16", "torch int8", "onnxruntime", "executorch", "executorch int8")


def _model(args: argparse.Namespace):
    """(model, cfg, tokenizer or None) of --model, or of --config with random weights."""
    if args.model:
        from wenet_lite.files.model_file import load_model

        return load_model(args.model, torch.device("cpu"))
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model

    cfg = load_config(args.config)
    torch.manual_seed(0)
    return build_model(cfg, args.vocab).eval(), None, cfg


def _audio(data: str, n: int, seconds: float) -> List[np.ndarray]:
    if not data:
        rng = np.random.default_rng(0)
        return [rng.normal(0, 0.1, int(16000 * seconds)).astype(np.float32) for _ in range(n)]
    from wenet_lite.data.manifest import cut_samples, load_cuts

    cuts = list(load_cuts(data))
    return [
        np.resize(cut_samples(cuts[i % len(cuts)], 16000), int(16000 * seconds)).astype(np.float32)
        for i in range(n)
    ]


def _program(name: str, model, chunking) -> bytes:
    """The exported graph (onnxruntime) or program (executorch) the engine ``name`` runs."""
    if name == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx

        return export_batched_onnx(model, chunking)
    from wenet_lite.export.executorch import lower_executorch

    return lower_executorch(model, chunking, "int8" if name.endswith("int8") else None)


def _recognizer(name: str, model, tokenizer, cfg, chunking, work: Path) -> Tuple[object, int]:
    """The recogniser on engine ``name`` and the size in bytes of the file it runs (0: none).
    Torch engines open through ``open_recognizer``; exports run in a child process, so that
    this process's peak memory is the engine's alone, and the program it writes is opened
    here (a model with random weights has no tokenizer, so no export directory)."""
    from wenet_lite.recognizer import EngineSpec, open_recognizer
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine
    from wenet_lite.runtime.streaming import StreamingRecognizer

    no_endpoint = EndpointConfig(enabled=False)
    if name.startswith("torch"):
        torch.save(model.state_dict(), work / "model.pt")
        size = (work / "model.pt").stat().st_size if name == "torch" else 0
        spec = EngineSpec(precision=name.split()[1] if " " in name else "fp32")
        return open_recognizer((model, tokenizer, cfg), chunking, None, no_endpoint, spec), size
    path = work / "program"
    argv = [a for a in sys.argv[1:] if a != "--one" and a != name]
    subprocess.run([sys.executable, __file__, *argv, "--build", name, str(path)], check=True)
    if name == "onnxruntime":
        engine = OnnxRuntimeEngine(path, chunking)
    else:
        engine = ExecuTorchEngine(path, chunking, threads=1, int8=name.endswith("int8"))
    rec = StreamingRecognizer(engine, cfg, tokenizer, endpoint=no_endpoint, model=model)
    return rec, path.stat().st_size


def _measure_one(args: argparse.Namespace) -> Dict[str, float]:
    """In this process: build one engine and time the recogniser on it."""
    torch.set_num_threads(1)
    model, tokenizer, cfg = _model(args)
    chunking = Chunking(args.chunk_size, args.left_chunks)
    counts = [int(x) for x in args.streams.split(",")]
    audio = _audio(args.data, max(counts), args.seconds)
    tmp = tempfile.TemporaryDirectory()  # kept until the process ends: engines read files
    rec, size = _recognizer(args.one, model, tokenizer, cfg, chunking, Path(tmp.name))
    row: Dict[str, float] = {"file_bytes": size}
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
        row[f"step_ms_{n}"] = 1000 * best / steps
        row[f"rtf_{n}"] = best / (args.seconds * n)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def _table(rows: Dict[str, Dict[str, float]], counts: List[int], title: str) -> str:
    base = rows.get("torch", {}).get(f"step_ms_{counts[0]}")
    lines = [title]
    head = ["engine", f"ms a chunk ({counts[0]} stream)", "x torch", "RTF"]
    head += [f"{n} streams: gain" for n in counts[1:]] + ["peak RSS MB", "file MB"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        one = row[f"step_ms_{counts[0]}"]
        cells = [
            name,
            f"{one:.1f}",
            f"{one / base:.2f}x" if base else "-",
            f"{row[f'rtf_{counts[0]}']:.4f}",
        ]
        for n in counts[1:]:  # throughput of n batched streams over one stream's
            cells.append(f"{n * one / row[f'step_ms_{n}']:.2f}x")
        cells += [
            f"{row['peak_rss_mb']:.0f}",
            f"{row['file_bytes'] / 2**20:.1f}" if row["file_bytes"] else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a trained model file")
    source.add_argument("--config", help="a config: random weights, --vocab tokens")
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--data", default="", help="prepared set whose audio is streamed")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"of {', '.join(ENGINES)}")
    p.add_argument("--streams", default="1,4,16", help="stream counts; the first is the base")
    p.add_argument("--seconds", type=float, default=20.0, help="audio per stream")
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--left-chunks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2, help="best of")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one engine, print JSON
    p.add_argument("--build", nargs=2, help=argparse.SUPPRESS)  # internal: NAME FILE, export
    args = p.parse_args()
    if args.build:
        name, out = args.build
        model, _, cfg = _model(args)
        chunking = Chunking(args.chunk_size, args.left_chunks)
        Path(out).write_bytes(_program(name, model, chunking))
        return
    if args.one:
        print(json.dumps(_measure_one(args)))
        return
    names = [n.strip() for n in args.engines.split(",")]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        p.error(f"unknown engines {unknown}; choose from {list(ENGINES)}")
    rows = {}
    for name in names:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--one", name]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        if done.returncode != 0:
            sys.exit(f"{name}: failed\n{done.stderr[-3000:]}")
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        first = args.streams.split(",")[0]
        print(f"{name}: {rows[name]['step_ms_' + first]:.1f} ms a chunk", file=sys.stderr)
    from wenet_lite.host.cpu import cpu_summary

    what = args.model or f"{args.config} (random weights, vocab {args.vocab})"
    title = (
        f"{what}: C={args.chunk_size}, N={args.left_chunks}, one thread, {args.seconds:g} s "
        f"per stream, best of {args.repeats}\n{cpu_summary()}"
    )
    print(_table(rows, [int(x) for x in args.streams.split(",")], title))


if __name__ == "__main__":
    main()
