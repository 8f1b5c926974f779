"""benchmarks/bench_train.py: one run gives the loader, the bare step and the trainer side by
side."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_table_has_every_row_with_a_rate(synthetic_corpus) -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_train.py"), "--config",
           str(REPO / "conf" / "tiny_test.yaml"), "--data", str(synthetic_corpus.data),
           "--device", "cpu", "--steps", "2", "--warmup", "1", "--no-compile",
           "--set", "data.fbank=device"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = dict(re.findall(r"^\| (loader|bare step|trainer) \| ([\d.]+) \|", proc.stdout, re.M))
    assert sorted(rows) == ["bare step", "loader", "trainer"], proc.stdout
    assert all(float(rate) > 0 for rate in rows.values())
    assert "| bare step | " in proc.stdout and "| 1.00x |" in proc.stdout
    assert "data.fbank device" in proc.stdout
    flops = re.search(r"FLOPs per second of training audio: ([\d.]+) G", proc.stdout)
    assert flops and float(flops.group(1)) > 0, proc.stdout
    shares = dict(re.findall(r"^\| ([a-zA-Z -]+) \| [\d.]+ \| ([\d.]+) % \|", proc.stdout, re.M))
    assert {"feed-forward", "attention projections", "CTC"} <= set(shares), proc.stdout
    assert abs(sum(float(v) for v in shares.values()) - 100) < 1.0
    assert re.search(r"bare step: [\d.]+ GFLOP/s on 2 thread\(s\), \d+ % of one", proc.stdout)
    odd = [*cmd[:6], "--steps", "3", "--warmup", "2"]
    bad = subprocess.run(odd, capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "must be a multiple of --warmup" in bad.stderr
    gone = subprocess.run([*cmd[:6], "--device", "cuda:7"], capture_output=True, text=True,
                          cwd=REPO)  # fmt: skip
    assert gone.returncode == 2 and "cuda:7" in gone.stderr and "Traceback" not in gone.stderr
    # data whose CMVN does not fit the config's features: the trainer's message, on one line
    wide = subprocess.run([*cmd[:6], "--set", "features.num_mel_bins=64"], capture_output=True,
                          text=True, cwd=REPO)  # fmt: skip
    assert wide.returncode == 1 and "Traceback" not in wide.stderr, wide.stderr[-2000:]
    assert wide.stderr.startswith("bench_train.py: error: ") and "num_mel_bins" in wide.stderr
