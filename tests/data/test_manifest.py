"""Manifest readers: data.list, Kaldi dirs and lhotse manifests all become utterance cuts."""

import json
import logging
from pathlib import Path
from typing import List

import numpy as np
import pytest
import soundfile as sf

from wenet_lite.data.manifest import (
    CUTS_FILENAME,
    cut_text,
    load_cuts,
    prepare_cuts,
    read_data_list,
    read_kaldi_dir,
    read_lhotse,
    read_manifest,
    save_cuts,
    write_text,
)

SR = 16000


def _wav(path: Path, seconds: float) -> Path:
    audio = (0.1 * np.random.default_rng(0).standard_normal(int(seconds * SR))).astype(np.float32)
    sf.write(path, audio, SR)
    return path


def _data_list(tmp_path: Path, lines: List[str]) -> Path:
    path = tmp_path / "data.list"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _entry(key: str, wav: Path, txt: str) -> str:
    return json.dumps({"key": key, "wav": str(wav), "txt": txt})


def test_data_list_skips_and_counts_missing_audio(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _wav(tmp_path / "a.wav", 0.5), _wav(tmp_path / "b.flac", 0.3)
    lines = [
        _entry("a", a, "hello there"),
        _entry("gone", tmp_path / "gone.wav", "x"),
        "",
        _entry("b", b, "HI"),
    ]
    with caplog.at_level(logging.WARNING):
        result = prepare_cuts(_data_list(tmp_path, lines), tmp_path / "out")
    assert result.skipped == {"missing audio": 1} and result.num_skipped == 1
    assert "skipped 1 utterances (1 missing audio)" in caplog.text and "gone.wav" in caplog.text
    cuts = load_cuts(tmp_path / "out" / CUTS_FILENAME)
    assert [(c.id, cut_text(c)) for c in cuts] == [("a", "hello there"), ("b", "HI")]
    assert [c.duration for c in cuts] == pytest.approx([0.5, 0.3])
    assert cuts["b"].load_audio().shape == (1, int(0.3 * SR))


def test_data_list_relative_paths_are_stored_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wav(tmp_path / "a.wav", 0.2)
    monkeypatch.chdir(tmp_path)
    cuts = read_data_list(_data_list(tmp_path, [_entry("a", Path("a.wav"), "A")])).cuts
    assert cuts["a"].recording.sources[0].source == str(tmp_path / "a.wav")


@pytest.mark.parametrize(
    "bad_line,message",
    [
        ('{"key": "b", "wav": "b.wav"', r"data.list:2: not a JSON object"),
        ('{"key": "b", "wav": "b.wav"}', r"data.list:2: field 'txt' missing"),
        ('{"key": "b", "wav": 3, "txt": ""}', r"data.list:2: field 'wav' not a string"),
        ('["b", "b.wav", "x"]', r"data.list:2: expected a JSON object"),
    ],
)
def test_data_list_malformed_line_names_file_and_line(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    path = _data_list(tmp_path, [_entry("a", _wav(tmp_path / "a.wav", 0.2), "A"), bad_line])
    with pytest.raises(ValueError, match=message):
        read_data_list(path)


def test_data_list_duplicate_key(tmp_path: Path) -> None:
    line = _entry("a", _wav(tmp_path / "a.wav", 0.2), "A")
    with pytest.raises(ValueError, match=r"data.list:2: duplicate key 'a'"):
        read_data_list(_data_list(tmp_path, [line, line]))


def test_all_audio_missing_is_an_error(tmp_path: Path) -> None:
    path = _data_list(tmp_path, [_entry("a", tmp_path / "none.wav", "A")])
    with pytest.raises(ValueError, match="no usable utterances"):
        read_data_list(path)


def _kaldi_dir(tmp_path: Path, wav_scp: List[str], text: List[str]) -> Path:
    data = tmp_path / "kaldi"
    data.mkdir()
    (data / "wav.scp").write_text("".join(line + "\n" for line in wav_scp))
    (data / "text").write_text("".join(line + "\n" for line in text))
    return data


def test_kaldi_dir_without_segments(tmp_path: Path) -> None:
    a = _wav(tmp_path / "a.wav", 0.4)
    data = _kaldi_dir(
        tmp_path,
        [f"a {a}", f"gone {tmp_path / 'gone.wav'}", f"notext {a}"],
        ["a HELLO  WORLD", "gone X", "orphan Y"],
    )
    result = read_manifest(data)
    assert [(c.id, cut_text(c), c.duration) for c in result.cuts] == [("a", "HELLO  WORLD", 0.4)]
    assert result.skipped == {"not in wav.scp/segments": 1, "missing audio": 1, "no transcript": 1}


def test_kaldi_dir_with_segments(tmp_path: Path) -> None:
    rec = _wav(tmp_path / "rec.flac", 1.0)
    data = _kaldi_dir(tmp_path, [f"rec {rec}"], ["u1 FIRST", "u2 SECOND", "u3"])
    (data / "segments").write_text("u1 rec 0.0 0.4\nu2 rec 0.4 -1\nu3 rec 0.5 1.5\n")
    cuts = read_kaldi_dir(data).cuts
    # u3 has an empty transcript (allowed) and its end is clipped to the audio, like Kaldi does.
    assert [(c.id, cut_text(c)) for c in cuts] == [("u1", "FIRST"), ("u2", "SECOND"), ("u3", "")]
    assert [(c.start, c.duration) for c in cuts] == [
        pytest.approx((0, 0.4)),
        pytest.approx((0.4, 0.6)),
        pytest.approx((0.5, 0.5)),
    ]
    assert cuts["u2"].load_audio().shape == (1, int(0.6 * SR))


@pytest.mark.parametrize(
    "file,content,message",
    [
        ("wav.scp", "a {a}\nb\n", r"wav.scp:2: expected '<id> <value>'"),
        ("wav.scp", "a {a}\nb sox x.flac -t wav - |\n", r"wav.scp:2: piped command"),
        ("wav.scp", "a {a}\na {a}\n", r"wav.scp:2: duplicate id 'a'"),
        ("segments", "u1 a 0 0.1\nu2 a zero 0.2\n", r"segments:2: expected '<utt> <recording>"),
        ("segments", "u1 a 0.3 0.1\n", r"segments:1: bad segment"),
        ("segments", "u1 b 0 0.1\n", r"segments:1: recording 'b' is not in wav.scp"),
    ],
)
def test_kaldi_malformed_line_names_file_and_line(
    tmp_path: Path, file: str, content: str, message: str
) -> None:
    a = _wav(tmp_path / "a.wav", 0.4)
    data = _kaldi_dir(tmp_path, [f"a {a}"], ["a A", "u1 B", "u2 C"])
    (data / file).write_text(content.format(a=a))
    with pytest.raises(ValueError, match=message):
        read_kaldi_dir(data)


def test_kaldi_dir_needs_text(tmp_path: Path) -> None:
    data = _kaldi_dir(tmp_path, ["a a.wav"], [])
    (data / "text").unlink()
    with pytest.raises(FileNotFoundError, match="no text"):
        read_manifest(data)


def test_lhotse_cuts_file_and_pair_of_manifests(tmp_path: Path) -> None:
    a, b = _wav(tmp_path / "a.wav", 0.3), _wav(tmp_path / "b.wav", 0.2)
    lines = [_entry("a", a, "A A"), _entry("b", b, "B")]
    cuts = read_data_list(_data_list(tmp_path, lines)).cuts
    save_cuts(cuts, tmp_path / "lhotse" / "my_cuts.jsonl.gz")
    b.unlink()
    result = read_manifest(tmp_path / "lhotse" / "my_cuts.jsonl.gz")
    assert [c.id for c in result.cuts] == ["a"] and result.skipped == {"missing audio": 1}
    # A directory with a recordings + supervisions pair, as lhotse recipes write them.
    pair = tmp_path / "pair"
    pair.mkdir()
    cuts.decompose()[0].to_file(pair / "x_recordings_train.jsonl.gz")
    cuts.decompose()[1].to_file(pair / "x_supervisions_train.jsonl.gz")
    assert [(c.id, cut_text(c)) for c in read_lhotse(pair).cuts] == [("a", "A A")]


def test_unknown_input_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a a.wav\n")
    with pytest.raises(ValueError, match=r"notes.txt:1: neither a WeNet data.list"):
        read_manifest(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"expected cuts.jsonl.gz or exactly one"):
        read_manifest(tmp_path / "empty")


def test_write_text(tmp_path: Path) -> None:
    lines = [
        _entry("a", _wav(tmp_path / "a.wav", 0.2), "HELLO"),
        _entry("b", tmp_path / "a.wav", "X Y"),
    ]
    write_text(read_data_list(_data_list(tmp_path, lines)).cuts, tmp_path / "text.txt")
    assert (tmp_path / "text.txt").read_text() == "HELLO\nX Y\n"


def test_empty_audio_is_skipped_and_counted_in_every_source(tmp_path: Path) -> None:
    """A 0-sample WAV among good ones (lhotse's cut trimming asserts on it): skipped, counted."""
    good, empty = _wav(tmp_path / "good.wav", 0.4), _wav(tmp_path / "empty.wav", 0.0)
    assert sf.info(str(empty)).frames == 0
    listed = prepare_cuts(
        _data_list(tmp_path, [_entry("g", good, "A"), _entry("e", empty, "B")]), tmp_path / "l"
    )
    assert listed.skipped == {"empty audio": 1} and [c.id for c in listed.cuts] == ["g"]
    kaldi = _kaldi_dir(tmp_path, [f"g {good}", f"e {empty}"], ["g A", "e B"])
    assert read_kaldi_dir(kaldi).skipped == {"empty audio": 1}
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    # lhotse manifests written elsewhere that hold the empty file.
    recs = [Recording.from_file(str(p), recording_id=k) for k, p in (("g", good), ("e", empty))]
    sups = [SupervisionSegment(r.id, r.id, 0.0, r.duration, text="A") for r in recs]
    (tmp_path / "lh").mkdir()
    RecordingSet.from_recordings(recs).to_file(tmp_path / "lh" / "x_recordings.jsonl.gz")
    SupervisionSet.from_segments(sups).to_file(tmp_path / "lh" / "x_supervisions.jsonl.gz")
    result = read_lhotse(tmp_path / "lh")
    assert result.skipped == {"empty audio": 1} and [c.id for c in result.cuts] == ["g"]
