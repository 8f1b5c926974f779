"""LibriSpeech preparation on a tiny generated corpus laid out like the real one."""

import logging
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import soundfile as sf

from wenet_lite.data.librispeech import prepare_librispeech
from wenet_lite.data.manifest import CUTS_FILENAME, cut_text, load_cuts

SR = 16000


def _make_part(corpus: Path, part: str) -> Dict[str, float]:
    """2 speakers x 1 chapter x 2 utterances; returns utterance id -> duration (s)."""
    rng = np.random.default_rng(0)
    durations = {}
    for speaker in ("19", "84"):
        chapter_dir = corpus / part / speaker / "121"
        chapter_dir.mkdir(parents=True)
        lines = []
        for i in range(2):
            utt = f"{speaker}-121-{i:04d}"
            seconds = 0.25 + 0.1 * i
            audio = (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32)
            sf.write(chapter_dir / f"{utt}.flac", audio, SR)
            lines.append(f"{utt} HELLO WORLD NUMBER {i}\n")
            durations[utt] = seconds
        (chapter_dir / f"{speaker}-121.trans.txt").write_text("".join(lines))
    return durations


def test_prepares_every_part_found(tmp_path: Path) -> None:
    expected = {part: _make_part(tmp_path / "LibriSpeech", part) for part in ("dev-clean", "x")}
    results = prepare_librispeech(tmp_path, None, tmp_path / "out")
    assert sorted(results) == ["dev-clean", "x"]  # custom part names are found too
    for part, durations in expected.items():
        assert results[part].skipped == {}
        cuts = load_cuts(tmp_path / "out" / part / CUTS_FILENAME)
        assert {c.id: c.duration for c in cuts} == pytest.approx(durations)
        cut = cuts["84-121-0001"]
        assert cut_text(cut) == "HELLO WORLD NUMBER 1"
        assert Path(cut.recording.sources[0].source).is_absolute()
        assert cut.load_audio().shape == (1, int(0.35 * SR))


def test_root_may_be_the_librispeech_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_part(tmp_path / "LibriSpeech", "dev-clean")
    _make_part(tmp_path / "LibriSpeech", "test-clean")
    monkeypatch.chdir(tmp_path)
    results = prepare_librispeech("LibriSpeech", ["test-clean"], "out")
    assert list(results) == ["test-clean"] and len(results["test-clean"].cuts) == 4
    assert (tmp_path / "out" / "test-clean" / CUTS_FILENAME).is_file()
    assert not (tmp_path / "out" / "dev-clean").exists()
    # Relative roots are stored absolute, so the cuts work from any directory.
    source = results["test-clean"].cuts[0].recording.sources[0].source
    assert source.startswith(str(tmp_path))


def test_missing_flac_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _make_part(tmp_path, "dev-clean")
    (tmp_path / "dev-clean" / "19" / "121" / "19-121-0000.flac").unlink()
    with caplog.at_level(logging.WARNING):
        result = prepare_librispeech(tmp_path, ["dev-clean"], tmp_path / "out")["dev-clean"]
    assert result.skipped == {"missing audio": 1}
    assert sorted(c.id for c in result.cuts) == ["19-121-0001", "84-121-0000", "84-121-0001"]
    assert "skipped 1 utterances (1 missing audio)" in caplog.text


def test_empty_and_unreadable_flacs_are_skipped_and_counted(tmp_path: Path) -> None:
    """A 0-sample FLAC (libsndfile cannot open one: unreadable) and a 0-byte file."""
    _make_part(tmp_path, "dev-clean")
    sf.write(tmp_path / "dev-clean" / "84" / "121" / "84-121-0001.flac", np.zeros(0), SR)
    (tmp_path / "dev-clean" / "19" / "121" / "19-121-0000.flac").write_bytes(b"")
    result = prepare_librispeech(tmp_path, ["dev-clean"], tmp_path / "out")["dev-clean"]
    assert result.skipped == {"unreadable audio": 2}
    assert sorted(c.id for c in result.cuts) == ["19-121-0001", "84-121-0000"]


def test_no_parts_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "LibriSpeech" / "empty").mkdir(parents=True)
    with pytest.raises(ValueError, match="no LibriSpeech parts under"):
        prepare_librispeech(tmp_path, None, tmp_path / "out")


def test_unknown_part_is_named(tmp_path: Path) -> None:
    _make_part(tmp_path, "dev-clean")
    with pytest.raises(ValueError, match=r"\['dev-other'\] not in .*found: \['dev-clean'\]"):
        prepare_librispeech(tmp_path, ["dev-other"], tmp_path / "out")


def test_malformed_transcript_line_names_file_and_line(tmp_path: Path) -> None:
    _make_part(tmp_path, "dev-clean")
    trans = tmp_path / "dev-clean" / "84" / "121" / "84-121.trans.txt"
    trans.write_text(trans.read_text() + "84-121-0002\n")
    with pytest.raises(ValueError, match=rf"{trans}:3: expected '<utterance-id> <TRANSCRIPT>'"):
        prepare_librispeech(tmp_path, None, tmp_path / "out")


@pytest.mark.parametrize("where", ["same file", "other file"])
def test_an_utterance_id_twice_names_both_lines(tmp_path: Path, where: str) -> None:
    """The same id twice made cuts with random ids and two transcripts (found only by a later
    decode); it is refused with both places."""
    _make_part(tmp_path, "dev-clean")
    first = tmp_path / "dev-clean" / "19" / "121" / "19-121.trans.txt"
    trans = (
        first
        if where == "same file"
        else tmp_path / "dev-clean" / "84" / "121" / "84-121.trans.txt"
    )
    trans.write_text(trans.read_text() + "19-121-0000 OTHER TEXT\n")
    with pytest.raises(ValueError, match=rf"{trans}:3: utterance 19-121-0000 appears twice "
                       rf"\(first at {first}:1\)"):  # fmt: skip
        prepare_librispeech(tmp_path, None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_non_utf8_transcripts_are_named(tmp_path: Path) -> None:
    _make_part(tmp_path, "dev-clean")
    trans = tmp_path / "dev-clean" / "84" / "121" / "84-121.trans.txt"
    trans.write_bytes(trans.read_bytes() + b"84-121-0002 CAF\xe9\n")
    with pytest.raises(ValueError, match=rf"{trans}: not UTF-8 text \(byte 0xe9"):
        prepare_librispeech(tmp_path, None, tmp_path / "out")


def test_part_without_audio_is_a_clear_error(tmp_path: Path) -> None:
    _make_part(tmp_path, "dev-clean")
    for flac in tmp_path.rglob("*.flac"):
        flac.unlink()
    with pytest.raises(
        ValueError, match=r"dev-clean: no usable utterances \(\{'missing audio': 4\}"
    ):
        prepare_librispeech(tmp_path, None, tmp_path / "out")


def test_prepare_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from wenet_lite.cli import main

    _make_part(tmp_path / "LibriSpeech", "dev-clean")
    _make_part(tmp_path / "LibriSpeech", "test-clean")
    out = tmp_path / "data"
    argv = ["prepare", "librispeech", "--root", str(tmp_path), "--out", str(out)]
    assert main(argv + ["--parts", "test-clean"]) == 0
    assert "4 utterances" in capsys.readouterr().out
    assert len(load_cuts(out / "test-clean" / CUTS_FILENAME)) == 4
    assert not (out / "dev-clean").exists()
    # a data.list through `prepare list`, and the usage errors name the missing flag
    audio = next((tmp_path / "LibriSpeech" / "dev-clean").rglob("*.flac"))
    data_list = tmp_path / "data.list"
    data_list.write_text(f'{{"key": "u1", "wav": "{audio}", "txt": "HELLO"}}\n')
    assert main(["prepare", "list", "--src", str(data_list), "--out", str(out / "mine")]) == 0
    assert [cut_text(c) for c in load_cuts(out / "mine" / CUTS_FILENAME)] == ["HELLO"]
    assert main(["prepare", "list", "--out", str(out / "x")]) == 2
    assert "needs --src" in capsys.readouterr().err
