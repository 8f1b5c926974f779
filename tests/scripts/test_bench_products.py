"""benchmarks/bench_products.py: one run times every precision's product per row count, naming
the CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_table_has_every_kernel_per_shape_and_row_count() -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_products.py"), "--rows", "2", "5",
           "--shapes", "64x32", "32x48", "--repeats", "2"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("CPU ") and "--precision auto:" in proc.stdout
    assert "| fp32 | bf16 | int8 _int_mm | int8 exact fp32 |" in proc.stdout
    rows = re.findall(r"^\| (\d+) x (\d+) \| (\d+) \| ([\d.]+)((?: \| [\d.]+ \([\d.]+x\)){3}) \|$",
                      proc.stdout, re.M)  # fmt: skip
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("64", "32", "2"), ("64", "32", "5"), ("32", "48", "2"), ("32", "48", "5"),
    ], proc.stdout  # fmt: skip
    assert all(float(r[3]) > 0 for r in rows)
