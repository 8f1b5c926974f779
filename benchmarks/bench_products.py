#!/usr/bin/env python3
"""The matrix products under the engines' precisions, side by side in one run: fp32, bf16 (at
most 128 rows a product, as ``model/bf16.py`` multiplies where rows stay independent), and
int8's two exact kernels
(``torch._int_mm`` and integers in fp32 products, ``model/int8.py``), per row count.

Usage:
    python benchmarks/bench_products.py [--rows 16 64 256] [--shapes 256x2048 2048x256]

A row is one frame of one stream (C = 16 rows a chunk). Microseconds per product, best of
``--repeats`` after a warm-up, one thread, and each kernel's speed against fp32's: what
decides which precision and which int8 kernel pay on the CPU it runs on (its line heads the
table). The int8 columns are the integer product alone, without the quantisation around it.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List

import torch


def _best_us(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    fn()
    times: List[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * min(times)


def measure(rows: int, size_in: int, size_out: int, repeats: int) -> Dict[str, float]:
    """Microseconds of each kernel for (rows x size_in) by (size_in x size_out)."""
    from wenet_lite.model.bf16 import grouped_product
    from wenet_lite.model.int8 import exact_int_product

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, size_in, generator=gen)
    w = torch.randn(size_in, size_out, generator=gen)
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    q = torch.randint(-127, 128, (rows, size_in), dtype=torch.int8, generator=gen)
    wq = torch.randint(-127, 128, (size_in, size_out), dtype=torch.int8, generator=gen)
    qf, wqf = q.float(), wq.float()
    return {
        "fp32": _best_us(lambda: x @ w, repeats),
        "bf16": _best_us(lambda: grouped_product(xb, wb, 128), repeats),
        "int8 _int_mm": _best_us(lambda: torch._int_mm(q, wq), repeats),
        "int8 exact fp32": _best_us(lambda: exact_int_product(qf, wqf), repeats),
    }


def main() -> None:
    from wenet_lite.host.cpu import cpu_summary

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--shapes", nargs="+", default=["256x2048", "2048x256"],
                   help="IN x OUT features of the weight")  # fmt: skip
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(cpu_summary())
    print(f"one thread, best of {args.repeats}; us a product (x fp32's speed)")
    kernels = ["fp32", "bf16", "int8 _int_mm", "int8 exact fp32"]
    print("| weight | rows | " + " | ".join(kernels) + " |")
    print("|---|---|" + "---|" * len(kernels))
    for shape in args.shapes:
        size_in, size_out = (int(v) for v in shape.lower().split("x"))
        for rows in args.rows:
            us = measure(rows, size_in, size_out, args.repeats)
            cells = [f"{us['fp32']:.1f}"]
            cells += [f"{us[k]:.1f} ({us['fp32'] / us[k]:.2f}x)" for k in kernels[1:]]
            print(f"| {size_in} x {size_out} | {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
