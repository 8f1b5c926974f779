#!/usr/bin/env python3
"""Training throughput benchmark: audio seconds trained per wall second, and peak memory.

Usage:
    python tools/bench_train.py --config conf/conformer_u2.yaml --data data [--steps 5]
        [--warmup 2] [--threads 2] [--train-part train-clean-100] [--set KEY=VALUE ...]

Runs the real trainer (``wenet_lite.train.trainer.train``, what `wenet-lite train` calls) for
``--steps`` optimizer steps into a temporary exp dir, without dev scoring, logging every step.
Throughput is the audio of the steps after the first ``--warmup`` divided by their wall time,
both from train.log's per-step lines (the warm-up steps include DataLoader start-up,
first-touch allocations and oneDNN kernel set-up for new shapes); audio seconds are those fed
to the model (after speed perturbation). Peak memory is ru_maxrss of this process and of its
largest DataLoader worker. Needs prepared data and DATA/cmvn.json.
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

_SPEED = re.compile(r"step (\d+): .* audio ([\d.]+) s/s \(([\d.]+) s\)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--train-part", default="train-clean-100")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the mean")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from wenet_lite.train.trainer import TrainOptions, train

    overrides = (*args.overrides, f"train.max_steps={args.steps}", "train.log_interval=1")
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "exp"
        start = time.time()
        result = train(
            TrainOptions(
                Path(args.config), args.data, exp, overrides, (args.train_part,), (),
                progress_bar=False,
            )
        )  # fmt: skip
        wall = time.time() - start
        log = (exp / "train.log").read_text()
        steps = [(float(m.group(3)), float(m.group(2))) for m in _SPEED.finditer(log)]
    timed = steps[args.warmup :]  # (audio seconds, audio seconds per second) per step
    if not timed:
        print(f"need more than --warmup {args.warmup} steps", file=sys.stderr)
        return 1
    audio = sum(a for a, _ in timed)
    seconds = sum(a / r for a, r in timed)
    rates = [r for _, r in timed]
    params = sum(p.numel() for p in result.model.parameters()) / 1e6 if result.model else 0
    main_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"{args.config}: {params:.1f} M params, {args.threads} threads, {result.step} steps in "
        f"{wall:.0f} s (with setup); steps {args.warmup + 1}..{len(steps)}: {audio:.0f} s of "
        f"audio in {seconds:.1f} s = {audio / seconds:.1f} audio s/s (per step {min(rates):.1f} "
        f"to {max(rates):.1f}); "
        f"peak RSS main {main_mb:.0f} MiB, largest worker {worker_mb:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
