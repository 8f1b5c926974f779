#!/usr/bin/env python3
"""A roofline of the stream step: how much of the CPU's arithmetic one batched encoder chunk
uses, part by part, per engine and batch size.

    python benchmarks/bench_roofline.py [--configs synthetic_small conformer_u2] [--chunk 16]
        [--left 4] [--batches 1 16 64] [--engines torch "torch int8" onnxruntime ...]
        [--threads 1] [--steps 20]

For each config (random weights: speed does not depend on training) and batch of B streams,
one chunk of C encoder frames with M = C x left cached frames (the cache full, as in a stream
past its first seconds):

- FLOPs per chunk of each part, counted by PyTorch's FlopCounterMode on the fp32 model
  (multiply-adds x 2 of every matrix product and convolution): the subsampling, the
  feed-forward modules, the attention's projections, its scores and position term, the
  convolution module, the CTC head. Norms, activations, masks and cache copies are not
  counted: they are the time the arithmetic does not explain.
- On the torch engine, the time of each part (forward hooks around its modules, the step's
  own time beside it without hooks), and its achieved GFLOP/s per core.
- Per engine, the whole step: ms, GFLOP/s per core, and the share of the practical peak: one
  2048^3 matrix product on as many threads (fp32; int8 engines are held against it too, as
  they replace fp32 work).

One thread by default, as each server worker's engine runs; ``--threads`` sets it for every
engine. Exported engines (onnxruntime, executorch) are built in this process from the same
weights.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import Callable, Dict, List, Tuple

import torch

PARTS = (  # (part, the leaf modules it is made of, by name pattern) - the first match names it
    ("subsampling", (".subsampling.", ".Conv2dSubsampling.")),
    ("feed-forward", (".ff1.", ".ff2.")),
    ("attention projections", (".attn.qkv.", ".attn.out.", ".attn.q.", ".attn.k.", ".attn.v.")),
    ("attention scores and positions", (".attn.", ".rel_pos.")),
    ("convolution module", (".conv.",)),
    ("CTC", (".ctc.", ".CTCHead.")),
)


def part_of(name: str) -> str:
    """The part a module belongs to, by its name in the model (``encoder.blocks.0.ff1.0``) or
    in the FLOP counter (``ConformerBlock.ff1.0``: the class of the module called first)."""
    key = "." + name + "."
    return next((part for part, keys in PARTS if any(k in key for k in keys)), "other")


def _model(config: str):
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model

    cfg = load_config(config)
    torch.manual_seed(0)
    return build_model(cfg, cfg.tokenizer.vocab_size).eval(), cfg


def _warm_inputs(engine, model, batch: int, chunk: int, left: int, feat_dim: int):
    """A window batch and a state whose cache is full: ``left`` chunks already streamed."""
    window = model.encoder.subsampling.window_size(chunk)
    torch.manual_seed(1)
    feats = torch.randn(batch, window, feat_dim)
    lens = torch.full([batch], window, dtype=torch.long)
    state = engine.init_state(batch)
    for _ in range(max(left, 1)):
        _, state = engine.run(feats, lens, state)
    return feats, lens, state


def _stream(engine, feats, lens, state) -> Callable[[], object]:
    """One chunk step of B streams, each call the next chunk of the same streams (the state
    carried on, as a stream's steps are; with a fixed cache every step has the same shapes)."""
    held = [state]

    def step():
        out, held[0] = engine.run(feats, lens, held[0])
        return out

    return step


def _flops(model, feats, lens, state) -> Dict[str, float]:
    """FLOPs of one chunk per part (the model's fp32 forward_chunk and CTC head)."""
    from torch.utils.flop_counter import FlopCounterMode

    from wenet_lite.runtime.positions import PositionTables

    pos = PositionTables(model.encoder, feats.size(1)).get(state.att_cache.size(3), state.offset)
    with torch.inference_mode(), FlopCounterMode(display=False, depth=None) as counter:
        out, _ = model.encoder.forward_chunk(feats, state, lens, pos)
        model.ctc(out)
    from bench_train import flops_by_part  # the same attribution, run from benchmarks/

    counts = {n: float(sum(ops.values())) for n, ops in counter.get_flop_counts().items()}
    total = counts.pop("Global", 0.0)
    parts = flops_by_part(counts, part_of)  # the attention's own FLOPs: its scores
    parts["total"] = total
    return dict(parts)


def _hooked_times(model, run: Callable[[], object], steps: int) -> Dict[str, float]:
    """Seconds per step spent in each part's modules (forward hooks around the outermost module
    of each part; attention's projections taken out of the attention module's time)."""
    spans: Dict[str, float] = defaultdict(float)
    starts: Dict[int, float] = {}
    handles = []
    watched: List[Tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        parent_part = part_of(name.rpartition(".")[0]) if "." in name else "other"
        part = part_of(name)
        if part == "other" or (parent_part == part and name.rpartition(".")[0]):
            continue  # only the outermost module of a part
        if part == "attention projections" and parent_part != "attention scores and positions":
            continue
        watched.append((part, module))
    for part, module in watched:

        def pre(m, args):
            starts[id(m)] = time.perf_counter()

        def post(m, args, out, part=part):
            took = time.perf_counter() - starts[id(m)]
            spans[part] += took
            if part == "attention projections":  # inside the attention module's span
                spans["attention scores and positions"] -= took

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        run()
        spans.clear()
        for _ in range(steps):
            run()
    finally:
        for h in handles:
            h.remove()
    return {k: v / steps for k, v in spans.items()}


def _best_step(run: Callable[[], object], steps: int) -> float:
    run()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            run()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def _engine(name: str, model, chunking):
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine, TorchEngine

    if name.startswith("torch"):
        return TorchEngine(model, chunking, name.split()[1] if " " in name else "fp32")
    if name == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx

        return OnnxRuntimeEngine(export_batched_onnx(model, chunking), chunking, threads=1)
    from wenet_lite.export.executorch import lower_executorch

    int8 = name.endswith("int8")
    program = lower_executorch(model, chunking, "int8" if int8 else None)
    return ExecuTorchEngine(program, chunking, threads=1, int8=int8)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=["synthetic_small", "conformer_u2"])
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--left", type=int, default=4, help="left chunks cached (a fixed cache)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--engines", nargs="+", default=["torch", "torch int8", "onnxruntime",
                                                    "executorch", "executorch int8"])  # fmt: skip
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="chunks timed per measurement")
    args = p.parse_args()

    from wenet_lite.host.cpu import cpu_summary
    from wenet_lite.model.chunking import Chunking

    torch.set_num_threads(args.threads)
    from wenet_lite.host.malloc import keep_freed_memory

    keep_freed_memory()  # as the streaming recogniser does: freed activations are reused
    from bench_train import gemm_peak

    peak = gemm_peak(torch.float32)
    print(cpu_summary().splitlines()[0])
    print(f"practical peak: one 2048^3 fp32 matrix product on {args.threads} thread(s): "
          f"{peak:.1f} GFLOP/s ({peak / args.threads:.1f} per core)\n", flush=True)  # fmt: skip
    chunking = Chunking(args.chunk, args.left)
    for config in args.configs:
        model, cfg = _model(config)
        feat_dim = cfg.features.num_mel_bins
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"## {config}: {params:.1f} M parameters, d_model {cfg.encoder.d_model}, "
              f"{cfg.encoder.num_blocks} blocks; chunk {args.chunk} frames, {args.left} left "
              f"chunks cached\n", flush=True)  # fmt: skip
        torch_engine = _engine("torch", model, chunking)
        flops_by_batch = {}
        print("| batch | part | MFLOP per chunk | share | ms per chunk | GFLOP/s per core "
              "| of peak |\n|---|---|---|---|---|---|---|")  # fmt: skip
        for b in args.batches:
            feats, lens, state = _warm_inputs(torch_engine, model, b, args.chunk, args.left,
                                              feat_dim)  # fmt: skip
            flops = _flops(model, feats, lens, state)
            flops_by_batch[b] = flops["total"]

            run = _stream(torch_engine, feats, lens, state)

            step = _best_step(run, args.steps)
            times = _hooked_times(model, run, args.steps)
            counted = sum(times.values())
            rows = [(part, flops.get(part, 0.0), times.get(part, 0.0)) for part, _ in PARTS]
            other = "other (norms, activations, masks, caches, Python)"
            rows.append((other, 0.0, max(step - counted, 0.0)))
            for part, f, t in rows:
                rate = f / t / 1e9 / args.threads if t > 0 and f > 0 else 0.0
                print(
                    f"| {b} | {part} | {f / 1e6:.1f} | {100 * f / flops['total']:.0f} % | "
                    f"{1000 * t:.2f} | {rate:.1f} | {100 * rate * args.threads / peak:.0f} % |"
                )
            rate = flops["total"] / step / 1e9 / args.threads
            print(
                f"| {b} | **step** | {flops['total'] / 1e6:.1f} | 100 % | {1000 * step:.2f} | "
                f"{rate:.1f} | {100 * rate * args.threads / peak:.0f} % |",
                flush=True,
            )
        print("\n| engine | batch | ms per chunk | ms per stream-chunk | GFLOP/s per core "
              "| of peak | x one stream's throughput |\n|---|---|---|---|---|---|---|")  # fmt: skip
        for name in args.engines:
            try:
                engine = torch_engine if name == "torch" else _engine(name, model, chunking)
            except Exception as e:  # noqa: BLE001 - an engine missing here is a row saying so
                print(f"| {name} | - | unavailable: {str(e).splitlines()[0][:120]} | | | | |")
                continue
            single = None
            for b in args.batches:
                feats, lens, state = _warm_inputs(engine, model, b, args.chunk, args.left,
                                                  feat_dim)  # fmt: skip
                step = _best_step(_stream(engine, feats, lens, state), args.steps)
                per_stream = step / b
                single = single or per_stream
                rate = flops_by_batch[b] / step / 1e9 / args.threads
                print(f"| {name} | {b} | {1000 * step:.2f} | {1000 * per_stream:.3f} | "
                      f"{rate:.1f} | {100 * rate * args.threads / peak:.0f} % | "
                      f"{single / per_stream:.2f}x |", flush=True)  # fmt: skip
        print()


if __name__ == "__main__":
    main()
