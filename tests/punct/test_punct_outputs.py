"""--punct on every output path of `transcribe` and `stream` (the server's are in
tests/serve/test_punct_serve.py): the words keep their times, each word's text is what the
punctuation model writes for the recognised words (a whole file at once in full context, each
segment while streaming), partial results stay as recognised, subtitles break at sentence
ends; without --punct the text differs (the control)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from wenet_lite import Transcriber, transcribe
from wenet_lite.cli import main
from wenet_lite.data.manifest import load_cuts
from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.runtime.result import Word
from wenet_lite.transcription import Segment, Transcript, format_transcript, subtitle_cues


@pytest.fixture(scope="module")
def files(corpus: Path) -> List[str]:
    return [str(c.recording.sources[0].source) for c in list(load_cuts(corpus / "test-clean"))[:3]]


def test_transcribe_punctuates_whole_files_keeping_word_times(tiny, punct_model, files) -> None:
    p = Punctuator.load(punct_model)
    raw = transcribe(tiny.path, files)
    done = transcribe(tiny.path, files, punct=punct_model)
    for r, d in zip(raw, done):
        assert r.words and [(w.start, w.end) for w in d.words] == [
            (w.start, w.end) for w in r.words
        ]
        assert [w.text for w in d.words] == p.words([w.text for w in r.words])
        assert d.text == " ".join(s.text for s in d.segments) != r.text  # the control
    streamed_raw = Transcriber(tiny.path, chunk_size=4).file(files[0])
    streamed = Transcriber(tiny.path, chunk_size=4, punct=p).file(files[0])
    assert [s.text for s in streamed.segments] == [
        " ".join(p.words([w.text for w in s.words])) for s in streamed_raw.segments
    ]  # each segment alone


def test_transcribe_cli_writes_punctuated_txt_json_srt_vtt(tiny, punct_model, files, tmp_path):
    done = transcribe(tiny.path, files, punct=punct_model)
    for fmt in ("txt", "json", "srt", "vtt"):
        out = tmp_path / fmt
        assert main(["transcribe", "--model", str(tiny.path), "--punct", str(punct_model),
                     "--format", fmt, "--out", str(out), *files]) == 0  # fmt: skip
        for path, t in zip(files, done):
            written = (out / f"{Path(path).stem}.{fmt}").read_text()
            if fmt == "json":
                data = json.loads(written)
                assert data["text"] == t.text
                assert [w["word"] for s in data["segments"] for w in s["words"]] == [
                    w.text for w in t.words
                ]
            elif fmt == "txt":
                assert written.strip() == t.text
            else:
                assert written == format_transcript(t, fmt)
    assert main(["transcribe", "--model", str(tiny.path), "--punct", str(tmp_path), files[0]]) == 1


def _words(text: str, step: float = 0.3) -> List[Word]:
    return [Word(w, i * step, i * step + 0.2) for i, w in enumerate(text.split())]


def test_cues_break_at_sentence_ends() -> None:
    words = _words("It rains. Take a coat? Yes, the red one!")
    t = Transcript("x", " ".join(w.text for w in words), [Segment(0, 3, "", tuple(words))], 3.0)
    assert [" ".join(c.lines) for c in subtitle_cues(t)] == [
        "It rains.",
        "Take a coat?",
        "Yes, the red one!",
    ]
    plain = _words("it rains take a coat yes the red one")
    t = Transcript("x", "", [Segment(0, 3, "", tuple(plain))], 3.0)
    assert len(subtitle_cues(t)) == 1  # the control: unpunctuated words share a cue


def test_stream_cli_punctuates_finals_and_leaves_partials(tiny, punct_model, files, capsys):
    p = Punctuator.load(punct_model)
    flags = ["--chunk-size", "4", "--left-chunks", "4", "--json"]

    def run(*extra: str) -> List[dict]:
        capsys.readouterr()
        assert main(["stream", "--model", str(tiny.path), *flags, *extra, *files]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    raw, done = run(), run("--punct", str(punct_model))
    raw_finals = [r for r in raw if r["type"] == "final" and r["text"]]
    finals = [r for r in done if r["type"] == "final" and r["text"]]
    assert len(finals) == len(raw_finals) >= len(files)
    for r, d in zip(raw_finals, finals):
        assert [w["word"] for w in d["words"]] == p.words([w["word"] for w in r["words"]])
        assert [(w["start"], w["end"]) for w in d["words"]] == [
            (w["start"], w["end"]) for w in r["words"]
        ]
        assert d["text"] != r["text"]
    partials = [r["text"] for r in done if r["type"] == "partial" and r["text"]]
    assert partials and partials == [r["text"] for r in raw if r["type"] == "partial" and r["text"]]
