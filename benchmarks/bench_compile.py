#!/usr/bin/env python3
"""The streaming chunk step (encoder + CTC head) of B streams, eager against ``torch.compile``
(inductor), per precision of the torch engine: the time of a step, how long compiling took, how
far the compiled log-probs are from eager's, and whether a compiled stream gets the same numbers
bit for bit batched and alone (the exactness every engine keeps; eager's is printed beside it).

Usage:
    python benchmarks/bench_compile.py [--config conf/conformer_u2.yaml] [--vocab 5000]
        [--streams 16] [--precisions fp32 bf16] [--freezing on off]

Random weights (seed 0), C = 16 with 4 left chunks, a warmed cache, one thread, with the
allocator setting the recogniser uses (``wenet_lite/host/malloc.py``). ``--freezing on`` sets
inductor's ``freezing`` (weights folded in as constants; on x86 it also hands products to
oneDNN with prepacked weights). A compile per batch size: minutes for conformer_u2. ``x one fp32
stream``: B streams' throughput against one eager fp32 stream's, the figure the engines table
reports for whole recognisers (``bench_engines.py``).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List, Tuple

import torch

CHUNK, LEFT = 16, 4


def _best_ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return 1e3 * best


class Step:
    """One model in one precision, with a warmed state of ``streams`` streams and a window."""

    def __init__(self, model, precision: str, streams: int) -> None:
        from wenet_lite.model.chunking import Chunking
        from wenet_lite.runtime.engines import TorchEngine
        from wenet_lite.runtime.positions import PositionTables

        self.model = TorchEngine(model, Chunking(CHUNK, LEFT), precision).model
        self.enc = self.model.encoder
        positions = PositionTables(self.enc, CHUNK)
        sub = self.enc.subsampling
        width = (CHUNK - 1) * sub.rate + sub.right_context + 1
        gen = torch.Generator().manual_seed(1)
        state = self.enc.init_state(streams, CHUNK, LEFT)
        with torch.inference_mode():
            for _ in range(LEFT + 2):  # the cache full, as in a long stream
                x = torch.randn(streams, width, sub.input_dim, generator=gen)
                pos = positions.get(state.att_cache.size(3), state.offset)
                _, state = self.enc.forward_chunk(x, state, None, pos, True)
        self.x, self.state = torch.randn(streams, width, sub.input_dim, generator=gen), state
        self.pos = positions.get(state.att_cache.size(3), state.offset)
        """the position tables of the full cache: every stream's, batched or alone"""

    def __call__(self, x: torch.Tensor, state, pos: List[torch.Tensor]) -> torch.Tensor:
        out, _ = self.enc.forward_chunk(x, state, None, pos, True)
        return self.model.ctc(out).float()  # (B, C, V)

    def alone(self, i: int) -> Tuple[torch.Tensor, object]:
        """Stream ``i``'s window and state as a batch of one."""
        s = self.state
        one = type(s)(s.att_cache[:, i : i + 1].clone(), s.conv_cache[:, i : i + 1].clone(),
                      s.cache_len[i : i + 1], s.cache_limit, s.offset[i : i + 1])  # fmt: skip
        return self.x[i : i + 1].clone(), one


def measure(model, precision: str, streams: int, freezing: bool, repeats: int) -> Dict[str, object]:
    """One row: eager and compiled step times, compile seconds, the distance to eager and the
    batched == alone checks of stream 1 (the last stream too where there are more)."""
    import torch._inductor.config as inductor

    step = Step(model, precision, streams)
    pos = step.pos
    row: Dict[str, object] = {}
    with torch.inference_mode():
        row["eager"] = _best_ms(lambda: step(step.x, step.state, pos), repeats)
        eager = step(step.x, step.state, pos)
        inductor.freezing = freezing
        torch._dynamo.reset()
        compiled = torch.compile(step, dynamic=False)
        start = time.perf_counter()
        batched = compiled(step.x, step.state, pos)
        row["compile s"] = time.perf_counter() - start
        row["compiled"] = _best_ms(lambda: compiled(step.x, step.state, pos), repeats)
        row["max diff"] = float((batched - eager).abs().max())
        same_eager, same_compiled = True, True
        for i in sorted({min(1, streams - 1), streams - 1}):
            x, state = step.alone(i)
            same_eager &= torch.equal(step(x, state, pos)[0], eager[i])
            same_compiled &= torch.equal(compiled(x, state, pos)[0], batched[i])
        row["eager alone"], row["compiled alone"] = same_eager, same_compiled
    return row


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="conf/conformer_u2.yaml")
    parser.add_argument("--vocab", type=int, default=5000)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16", "int8"])  # fmt: skip
    parser.add_argument("--freezing", nargs="+", default=["on"], choices=["on", "off"])
    parser.add_argument("--repeats", type=int, default=10, help="steps a timing (best of 3)")
    args = parser.parse_args(argv)

    from wenet_lite.config import load_config
    from wenet_lite.host.cpu import cpu_summary
    from wenet_lite.host.malloc import keep_freed_memory
    from wenet_lite.model import build_model

    keep_freed_memory()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(load_config(args.config), args.vocab).eval()
    one = Step(model, "fp32", 1)
    with torch.inference_mode():
        base = _best_ms(lambda: one(one.x, one.state, one.pos), args.repeats)
    print(f"{args.config} (random weights, vocab {args.vocab}): C={CHUNK}, N={LEFT}, "
          f"{args.streams} streams, one thread; torch {torch.__version__}")  # fmt: skip
    print(cpu_summary())
    print(f"one fp32 stream, eager: {base:.1f} ms a step")
    print("| precision | freezing | eager ms | compiled ms | compiled / eager | x one fp32 stream "
          "(eager, compiled) | compile s | max diff from eager | batched == alone (eager, "
          "compiled) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    yes = {True: "yes", False: "**no**"}
    for precision in args.precisions:
        for freezing in args.freezing:
            r = measure(model, precision, args.streams, freezing == "on", args.repeats)
            gain = args.streams * base
            print(f"| {precision} | {freezing} | {r['eager']:.1f} | {r['compiled']:.1f} | "
                  f"{r['compiled'] / r['eager']:.2f}x | {gain / r['eager']:.2f}x, "
                  f"{gain / r['compiled']:.2f}x | {r['compile s']:.0f} | {r['max diff']:.1e} | "
                  f"{yes[r['eager alone']]}, {yes[r['compiled alone']]} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
