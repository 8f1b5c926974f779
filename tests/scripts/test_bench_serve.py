"""benchmarks/bench_serve.py and benchmarks/bench_engines.py run end to end on the tiny model
and print their tables (the numbers are the benchmarks' business, not the tests')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import corpus, tiny  # noqa: F401 - shared fixtures

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_serve_drives_our_server(tiny, corpus) -> None:  # noqa: F811
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_serve.py"), "--data",
           str(corpus / "test-clean"), "--clients", "1,3", "--seconds", "1.5", "--ramp", "0.2",
           "--serve", f"tiny={tiny.path}::--chunk-size 4 --left-chunks 2 --jobs 2",
           "--serve-flags", "", "--flood", "1", "--realtime"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| tiny |")]
    assert [int(r[2]) for r in rows] == [1, 3]
    assert all(int(r[7]) == 0 for r in rows), out.stdout  # no errors
    assert all(float(r[8]) > 0 for r in rows)  # the workers' CPU is counted
    assert all(float(r[10]) >= 0 for r in rows)  # RSS growth of the server's processes
    assert all(float(r[11]) > 1.5 for r in rows)  # the flood got more than real time through
    assert "tiny: largest N with p95 final latency < 1 s and no errors: 3" in out.stdout
    # the same server over OpenAI's Realtime API: every session answered
    realtime = [line.split("|") for line in out.stdout.splitlines()
                if line.startswith("| tiny-realtime |")]  # fmt: skip
    assert [int(r[2]) for r in realtime] == [1, 3]
    assert all(int(r[7]) == 0 and float(r[4]) >= 0 for r in realtime), out.stdout


def test_bench_alone_batched_compares_both_ways(tiny, corpus) -> None:  # noqa: F811
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_alone_batched.py"), "--model",
           str(tiny.path), "--data", str(corpus / "test-clean"), "--streams", "3",
           "--chunk-size", "4", "--left-chunks", "2", "--precisions", "fp32,int8"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| ")]
    assert [r[1].strip() for r in rows[1:]] == ["fp32", "int8"]
    assert all(r[4].strip() == "3 of 3" and float(r[2]) > 0 for r in rows[1:]), out.stdout


@pytest.mark.slow
def test_bench_engines_prints_a_row_per_engine(tiny, corpus) -> None:  # noqa: F811
    engines = ["torch", "torch int8", "onnxruntime", "executorch"]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_engines.py"), "--model", str(tiny.path),
           "--streams", "1,2", "--seconds", "2", "--chunk-size", "4", "--left-chunks", "2",
           "--repeats", "1", "--engines", ",".join(engines)]  # fmt: skip
    # about a minute alone (an export per engine); generous for a loaded machine
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    assert "\nCPU " in out.stdout and "--precision auto:" in out.stdout  # the machine
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    rows = [line.split("|")[1:-1] for line in table[2:]]  # after the header and its rule
    assert [r[0].strip() for r in rows] == engines
    assert rows[0][2].strip() == "1.00x"  # the torch engine is the base
    for r in rows:
        assert float(r[1]) > 0 and r[4].strip().endswith("x") and float(r[5]) > 50  # RSS MB
    assert float(rows[0][6]) > 0 and rows[1][6].strip() == "-"  # the model file; int8: none
