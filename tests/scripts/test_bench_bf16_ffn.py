"""benchmarks/bench_bf16_ffn.py: one run times a bf16 feed-forward with its inner activations in
fp32 and in bf16, per row count, naming the CPU; bad values get one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "benchmarks" / "bench_bf16_ffn.py")


@pytest.mark.parametrize("products", ["stub", "real"])
def test_the_table_has_both_variants_per_row_count(products: str) -> None:
    cmd = [sys.executable, SCRIPT, "--rows", "3", "40", "--width", "16", "--ffn-dim", "64",
           "--products", products, "--turns", "2", "--repeats", "3"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("CPU ") and "--precision auto:" in proc.stdout
    assert ("products stubbed" in proc.stdout) == (products == "stub")
    cell = r"(\d+) \((\d+), (\d+)\)"  # best (turn, turn)
    rows = re.findall(rf"^\| (\d+) \| {cell} \| {cell} \| ([\d.]+) \|$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["3", "40"], proc.stdout
    for r in rows:  # the best of the turns, and the ratio of the bests
        assert int(r[1]) == min(int(r[2]), int(r[3])) and int(r[4]) == min(int(r[5]), int(r[6]))


@pytest.mark.parametrize("bad", [["--rows", "0"], ["--products", "fast"], ["--turns", "-1"]])
def test_bad_values_get_one_line(bad: list) -> None:
    proc = subprocess.run([sys.executable, SCRIPT, *bad], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error:" in proc.stderr.strip().splitlines()[-1]
