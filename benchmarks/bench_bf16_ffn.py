#!/usr/bin/env python3
"""One feed-forward module of the bf16 engine with its inner activations in fp32 and in bf16,
side by side in one run: whether keeping them bf16 (``model/bf16.py``) pays on this CPU.

Usage:
    python benchmarks/bench_bf16_ffn.py [--rows 16 256] [--width 256] [--ffn-dim 2048]
        [--products real|stub] [--turns 4]

A row is one frame of one stream (16 streams of C = 16: 256 rows). ``--products stub`` hands
back a ready result in place of each bf16 product, so only the work around the products is
timed (the conversions, copies, biases and the activation): the default where bf16 is
emulated, whose products would drown the rest. Microseconds a call, best of 5 x ``--repeats``
calls per turn, turns alternating, one thread, with the allocator setting the recogniser uses
(``wenet_lite/host/malloc.py``).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch


def _best_us(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return 1e6 * best


def _stub_products() -> None:
    """Every bf16 product a ready result of its shape, written where the product would be."""
    from wenet_lite.model import bf16

    ready: Dict[Tuple[int, int], torch.Tensor] = {}

    def product(x: torch.Tensor, w: torch.Tensor, rows: int) -> torch.Tensor:
        key = (x.size(0), w.size(1))
        if key not in ready:
            ready[key] = torch.randn(key).to(torch.bfloat16)
        return ready[key].clone()

    bf16.grouped_product = product  # the layers look it up on each call


def measure(
    rows: List[int], width: int, ffn_dim: int, stub: bool, turns: int, repeats: int
) -> List[Tuple[int, List[float], List[float]]]:
    """Per row count: the inner-fp32 and inner-bf16 times of each turn, us a call."""
    from wenet_lite.host.malloc import keep_freed_memory
    from wenet_lite.model.bf16 import to_bf16
    from wenet_lite.model.conformer import FeedForward

    keep_freed_memory()
    torch.manual_seed(0)
    ffn = to_bf16(torch.nn.Sequential(FeedForward(width, ffn_dim, 0.1)))[0].eval()
    if stub:  # after to_bf16: its checks multiply for real
        _stub_products()
    results = []
    for n in rows:
        x = torch.randn(n, width)
        fp32_inner: List[float] = []
        bf16_inner: List[float] = []
        with torch.inference_mode():
            for _ in range(turns):
                for inner, times in ((False, fp32_inner), (True, bf16_inner)):
                    ffn[0].bf16_output = inner
                    times.append(_best_us(lambda x=x: ffn(x), repeats))
        results.append((n, fp32_inner, bf16_inner))
    return results


def main(argv: Optional[List[str]] = None) -> None:
    from wenet_lite.host.cpu import cpu_summary, native_bf16

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[16, 256])
    p.add_argument("--width", type=int, default=256, help="model width D (256)")
    p.add_argument("--ffn-dim", type=int, default=2048, help="inner width (2048)")
    p.add_argument("--products", choices=["real", "stub"], default=None,
                   help="real bf16 products, or a stub (default: real where native)")  # fmt: skip
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)
    if min(args.rows + [args.width, args.ffn_dim, args.turns, args.repeats]) < 1:
        p.error("--rows, --width, --ffn-dim, --turns and --repeats must be >= 1")
    stub = args.products == "stub" or (args.products is None and not native_bf16())
    torch.set_num_threads(1)
    print(cpu_summary())
    what = "products stubbed: the work around them" if stub else "real bf16 products"
    print(f"feed-forward {args.width} -> {args.ffn_dim} -> {args.width}, {what}; one thread, "
          f"us a call, best of 5 x {args.repeats}, {args.turns} turns")  # fmt: skip
    print("| rows | inner fp32, us (turns) | inner bf16, us (turns) | bf16 / fp32 |")
    print("|---|---|---|---|")
    for n, a, b in measure(args.rows, args.width, args.ffn_dim, stub, args.turns, args.repeats):
        turns_a, turns_b = ", ".join(f"{t:.0f}" for t in a), ", ".join(f"{t:.0f}" for t in b)
        print(f"| {n} | {min(a):.0f} ({turns_a}) | {min(b):.0f} ({turns_b}) | "
              f"{min(b) / min(a):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
