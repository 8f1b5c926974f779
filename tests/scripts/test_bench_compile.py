"""benchmarks/bench_compile.py: one run times a chunk step eager and compiled, naming the CPU, and
checks a compiled stream batched against alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_row_per_precision_with_the_exactness_checks() -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_compile.py"), "--config",
           str(REPO / "conf" / "tiny_test.yaml"), "--vocab", "20", "--streams", "2",
           "--precisions", "fp32", "--freezing", "off", "--repeats", "2"]  # fmt: skip
    # a compile per batch size, about 15 s each on 2 cores; generous for a loaded machine
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "\nCPU " in out.stdout and "one fp32 stream, eager:" in out.stdout
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| fp32")]
    assert len(rows) == 1, out.stdout
    cells = [c.strip() for c in rows[0]]
    assert cells[:2] == ["fp32", "off"]
    assert float(cells[2]) > 0 and float(cells[3]) > 0 and cells[4].endswith("x")
    assert float(cells[7]) < 1e-4  # fp32 compiled: the same model, within float rounding
    assert cells[8].startswith("yes")  # eager: a stream's numbers batched == alone
