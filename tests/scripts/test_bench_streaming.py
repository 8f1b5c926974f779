"""benchmarks/bench_streaming.py: one run gives a row per stream count with the step time and
whether its p95 fits within the chunk, with the stream states in slots or held per stream."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("slots", ["on", "off"])
def test_a_row_per_stream_count_says_whether_it_keeps_up(slots: str) -> None:
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_streaming.py"), "--config",
           "wenet_lite/conf/tiny_test.yaml", "--chunk", "4", "--left", "2", "--streams", "1",
           "3", "--seconds", "1.5", "--slots", slots]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CPU" in proc.stdout
    rows = re.findall(r"^\| fp32 \| 2 \| (\d+) \| ([\d.]+) / ([\d.]+) \|.*\| (yes|no) \|$",
                      proc.stdout, re.M)  # fmt: skip
    assert [r[0] for r in rows] == ["1", "3"], proc.stdout
    for _, mean, p95, fits in rows:
        assert float(mean) > 0 and fits == ("yes" if float(p95) < 160 else "no")
