"""recipes/synthetic/local/plot_vad.py: the signal it builds keeps each utterance where it
says, the segments it draws are `stream`'s with and without rule "vad", and it writes a PNG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("silero_vad")
pytest.importorskip("matplotlib")


def test_spans_segments_and_picture(load_tool, tiny, corpus: Path, tmp_path: Path) -> None:
    plot_vad = load_tool("plot_vad")
    x, spans = plot_vad.signal(corpus / "test-clean", 3)
    assert len(spans) == 3 and spans[1][0] - spans[0][1] == pytest.approx(1.0)
    assert spans[2][0] - spans[1][1] == pytest.approx(2.5) and x.size / 16000 == spans[2][1]
    quiet = x[int(spans[0][1] * 16000) : int(spans[1][0] * 16000)]
    assert np.abs(quiet).max() < 0.01  # the first pause is quiet, the second noise
    by_vad, events = plot_vad.segments(tiny.path, x, 0.5)
    by_blanks, none = plot_vad.segments(tiny.path, x, 0.0)
    assert none == [] and any(e.kind == "stopped" for e in events)
    assert len(by_vad) > len(by_blanks)  # the rigged model's words hold the blank rules off
    out = tmp_path / "vad.png"
    run = subprocess.run(
        [sys.executable, str(Path(plot_vad.__file__)), "--model", str(tiny.path), "--data",
         str(corpus / "test-clean"), "--utts", "3", "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert f"{len(by_vad)} segments by the VAD, {len(by_blanks)} by the blanks" in run.stdout
