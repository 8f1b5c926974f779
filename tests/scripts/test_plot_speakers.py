"""recipes/synthetic/local/plot_speakers.py and the STM reader: an STM becomes a transcript
whose words lie inside their utterances, and the picture is written for a reference and our
rows (DER 0 % for the same turns, more for one speaker in both)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


def test_stm_rows_and_picture(load_tool, tmp_path: Path, capsys) -> None:
    tool = load_tool("plot_speakers")
    from wenet_lite.speakers.der import diarization_error_rate, stm_transcript

    stm = tmp_path / "a.stm"
    stm.write_text("a 1 ann 0.50 2.00 HELLO THERE FRIEND\na 1 bob 2.50 3.50 HI\n")
    transcript = stm_transcript(stm, "a.wav", 4.0)
    assert [s.text for s in transcript.segments] == ["HELLO THERE FRIEND", "HI"]
    words = transcript.words
    assert [w.text for w in words] == ["HELLO", "THERE", "FRIEND", "HI"]
    assert words[0].start == 0.5 and words[2].end == pytest.approx(2.0)
    assert words[3].start == 2.5 and words[3].end == 3.5
    reference = [(0.5, 2.0, "ann"), (2.5, 3.5, "bob")]
    same = [(0.5, 2.0, "S1"), (2.5, 3.5, "S2")]
    swapped = [(0.5, 3.5, "S1")]  # one speaker for both turns
    out = tmp_path / "speakers.png"
    tool.plot([("reference", reference), ("same", same), ("one", swapped)], out)
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert diarization_error_rate(reference, same).rate == 0.0
    assert diarization_error_rate(reference, swapped).rate > 0.2
