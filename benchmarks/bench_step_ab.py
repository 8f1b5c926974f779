#!/usr/bin/env python3
"""The torch engine's stream step of two checkouts side by side: which one is faster.

    python benchmarks/bench_step_ab.py OLD_CHECKOUT NEW_CHECKOUT [--config synthetic_small]
        [--precision fp32] [--batches 16 64] [--rounds 5]

Each round times one process per checkout in turn (``PYTHONPATH`` set to it, this checkout's
``bench_roofline`` driving it): B streams stepped chunk after chunk with their states carried,
one thread, freed memory kept as the recogniser keeps it, the best of 5 x 10 steps. Alternating
the checkouts round by round puts both under the same drift of a shared machine; the table
gives each one's median and the change. Time it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import json, sys, torch
sys.path.insert(0, {bench!r})
from bench_roofline import _best_step, _engine, _model, _stream, _warm_inputs
from wenet_lite.host.malloc import keep_freed_memory
from wenet_lite.model.chunking import Chunking
keep_freed_memory()
torch.set_num_threads(1)
times = {{}}
for b in {batches!r}:
    model, cfg = _model({config!r})
    name = "torch" if {precision!r} == "fp32" else "torch " + {precision!r}
    engine = _engine(name, model, Chunking(16, 4))
    feats, lens, state = _warm_inputs(engine, model, b, 16, 4, cfg.features.num_mel_bins)
    run = _stream(engine, feats, lens, state)
    times[b] = min(_best_step(run, 10) for _ in range(5))
print(json.dumps(times))
"""


def _time(checkout: str, args: argparse.Namespace) -> dict:
    code = _CHILD.format(bench=str(HERE), batches=args.batches, config=args.config,
                         precision=args.precision)  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(Path(checkout).resolve()))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=checkout)  # fmt: skip
    if out.returncode != 0:
        sys.exit(f"{checkout}: the step failed:\n{out.stderr[-2000:]}")
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="a checkout of the code before (its repository root)")
    p.add_argument("new", help="a checkout of the code after")
    p.add_argument("--config", default="synthetic_small")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8", "bf16"])
    p.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    for checkout in (args.old, args.new):
        if not (Path(checkout) / "wenet_lite" / "__init__.py").is_file():
            p.error(f"{checkout}: not a wenet_lite checkout (no wenet_lite/__init__.py)")
    runs = {"old": [], "new": []}
    for r in range(args.rounds):
        for key in ("old", "new"):
            runs[key].append(_time(getattr(args, key), args))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{key} " + " ".join(f"B={b} {1000 * t[b]:.2f} ms" for b in args.batches)
            for key, t in ((k, v[-1]) for k, v in runs.items())), flush=True)  # fmt: skip
    print(f"\n{args.config}, torch {args.precision}, median ms per step of {args.rounds} rounds:\n")
    print("| streams | old | new | change |\n|---|---|---|---|")
    for b in args.batches:
        old = statistics.median(t[b] for t in runs["old"])
        new = statistics.median(t[b] for t in runs["new"])
        print(f"| {b} | {1000 * old:.2f} | {1000 * new:.2f} | {100 * (new / old - 1):+.1f} % |")


if __name__ == "__main__":
    main()
