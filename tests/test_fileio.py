"""Atomic writes: a failure mid-write leaves the previous file intact and no temporary behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from lhotse import CutSet, MonoCut, Recording, SupervisionSegment

from wenet_lite import fileio
from wenet_lite.data.manifest import load_cuts, save_cuts
from wenet_lite.features.cmvn import load_cmvn, save_cmvn
from wenet_lite.files.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from wenet_lite.search.lm import WordLM


def _fail_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write fails at its flush to disk, as on a full disk."""

    def fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", fsync)


def test_atomic_open_replaces_only_on_success(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "a.txt"
    fileio.write_text_atomic(path, "first\n")
    assert path.read_text() == "first\n"

    with pytest.raises(RuntimeError, match="boom"):
        with fileio.atomic_open(path) as f:
            f.write("half of the second")
            raise RuntimeError("boom")
    assert path.read_text() == "first\n"

    _fail_fsync(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        fileio.write_text_atomic(path, "second\n")
    assert path.read_text() == "first\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]


def test_two_writers_of_one_file_never_share_a_temporary(tmp_path):
    """Two writers of the same file at once (two server workers keeping one exported graph):
    each writes its own temporary file, so the one that renames last leaves its whole bytes and
    nothing is left behind. With one fixed temporary name the second writer truncated the
    first's file and the first's rename found it gone."""
    out = tmp_path / "graph.onnx"
    first_bytes, second_bytes = b"A" * 10_000, b"B" * 3
    first = fileio.atomic_open(out, "wb")
    f1 = first.__enter__()
    f1.write(first_bytes[:5000])
    with fileio.atomic_open(out, "wb") as f2:  # starts and finishes inside the first
        f2.write(second_bytes)
    assert out.read_bytes() == second_bytes
    f1.write(first_bytes[5000:])
    first.__exit__(None, None, None)
    assert out.read_bytes() == first_bytes
    assert [p.name for p in tmp_path.iterdir()] == ["graph.onnx"]
    names = {fileio.temporary_path(out).name for _ in range(20)}
    assert len(names) == 20 and all(n.startswith(".tmp-") and n.endswith(".onnx") for n in names)


def test_atomic_open_rejects_append(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        with fileio.atomic_open(tmp_path / "a.txt", "a"):
            pass


def test_checkpoint_cmvn_and_lm_survive_a_failed_rewrite(tmp_path, monkeypatch):
    ckpt, cmvn, lm_path = tmp_path / "step_1.pt", tmp_path / "cmvn.json", tmp_path / "lm.json"
    save_checkpoint({"model": {"w": torch.ones(3)}, "config": {}}, ckpt)
    save_cmvn(cmvn, [0.5, 1.0], [2.0, 3.0], 10)
    lm = WordLM.train(["A B C", "A B"])
    lm.save(lm_path)
    before = {p: p.read_bytes() for p in (ckpt, cmvn, lm_path)}

    _fail_fsync(monkeypatch)
    with pytest.raises(CheckpointError, match=f"{ckpt}: could not be written .* intact"):
        save_checkpoint({"model": {"w": torch.zeros(3)}, "config": {}}, ckpt)
    with pytest.raises(OSError):
        save_cmvn(cmvn, [9.0, 9.0], [1.0, 1.0], 1)
    with pytest.raises(OSError):
        WordLM.train(["X Y"]).save(lm_path)
    monkeypatch.undo()

    assert {p: p.read_bytes() for p in before} == before
    assert torch.equal(load_checkpoint(ckpt)["model"]["w"], torch.ones(3))
    mean, _ = load_cmvn(cmvn)
    assert mean.tolist() == [0.5, 1.0]
    assert json.loads(lm_path.read_text())["unigrams"] == json.loads(before[lm_path])["unigrams"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmvn.json", "lm.json", "step_1.pt"]


def test_save_cuts_keeps_the_format_and_leaves_no_temporary(tmp_path):
    rec = Recording(id="r1", sources=[], sampling_rate=16000, num_samples=16000, duration=1.0)
    sup = SupervisionSegment(id="r1", recording_id="r1", start=0.0, duration=1.0, text="HI")
    cuts = CutSet.from_cuts(
        [MonoCut(id="r1", start=0.0, duration=1.0, channel=0, recording=rec, supervisions=[sup])]
    )
    path = tmp_path / "cuts.jsonl.gz"
    save_cuts(cuts, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # gzip, chosen by lhotse from the suffix
    assert [c.supervisions[0].text for c in load_cuts(path)] == ["HI"]
    assert [p.name for p in tmp_path.iterdir()] == ["cuts.jsonl.gz"]


def test_open_text_reads_plain_and_gzipped(tmp_path):
    import gzip

    (tmp_path / "a.txt").write_text("HELLO WORLD\n", encoding="utf-8")
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write("HELLO WORLD\n")
    for name in ("a.txt", "a.txt.gz"):
        with fileio.open_text(tmp_path / name) as f:
            assert f.read() == "HELLO WORLD\n"


def test_write_files_atomic_is_all_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import wenet_lite.fileio as fileio

    fileio.write_files_atomic(tmp_path, {"a.txt": "old a\n", "b.txt": "old b\n"})
    calls = []
    fsync = os.fsync

    def full_on_the_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".tmp-b.txt"))
        return fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", full_on_the_second)
    with pytest.raises(OSError, match="No space left"):
        fileio.write_files_atomic(tmp_path, {"a.txt": "new a\n", "b.txt": "new b\n"})
    assert (tmp_path / "a.txt").read_text() == "old a\n"  # not a mix of new and old
    assert (tmp_path / "b.txt").read_text() == "old b\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]
