"""benchmarks/bench_roofline.py: the parts' FLOPs add up to the step's, every part has a time on
the torch engine, and each engine's row reads a positive rate."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_parts_add_up_to_the_step(load_tool) -> None:
    tool = load_tool("bench_roofline")
    assert tool.part_of("encoder.blocks.3.attn.qkv") == "attention projections"
    assert tool.part_of("ConformerBlock.attn") == "attention scores and positions"
    assert tool.part_of("Conv2dSubsampling.conv.0") == "subsampling"
    assert tool.part_of("encoder.blocks.0.conv.depthwise") == "convolution module"
    assert tool.part_of("ctc.proj") == tool.part_of("CTCHead.proj") == "CTC"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_roofline.py"), "--configs",
           "tiny_test", "--batches", "1", "3", "--engines", "torch", "torch int8",
           "--steps", "2"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"practical peak: .* [\d.]+ GFLOP/s", out)
    for batch in ("1", "3"):
        rows = re.findall(
            rf"^\| {batch} \| ([^|]+) \| ([\d.]+) \| (\d+) % \| ([\d.]+) \|", out, re.M
        )
        parts = {name.strip(): (float(f), float(ms)) for name, f, _, ms in rows}
        step = parts.pop("**step**")
        assert abs(sum(f for f, _ in parts.values()) - step[0]) <= 0.1 + 0.01 * step[0], parts
        assert parts["subsampling"][0] > 0 and parts["feed-forward"][0] > 0
        assert all(ms > 0 for name, (_, ms) in parts.items() if not name.startswith("other"))
    engines = re.findall(r"^\| (torch(?: int8)?) \| (\d+) \| ([\d.]+) \|", out, re.M)
    assert {(e, b) for e, b, _ in engines} == {
        ("torch", "1"),
        ("torch", "3"),
        ("torch int8", "1"),
        ("torch int8", "3"),
    }
    assert all(float(ms) > 0 for _, _, ms in engines)
