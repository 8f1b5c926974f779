"""benchmarks/bench_features.py: one run gives both fbanks side by side, naming the CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_table_has_both_fbanks_per_stream_count() -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_features.py"), "--streams", "1", "3",
           "--steps", "5", "--bins", "40"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("CPU ") and "--precision auto:" in proc.stdout
    rows = re.findall(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \|$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["1", "3"], proc.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
