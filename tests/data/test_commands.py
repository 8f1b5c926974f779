"""No shell command from a data file: names from a shard list reach a ``pipe:`` command only as
plain quoted words, and ``pipe:`` lines and lhotse ``command`` sources run only with the user's
opt-in. Each vector's payload touches a marker file; the opt-in (or the quoting switched off) is
the negative control that shows the payload would run."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import soundfile as sf
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment

from wenet_lite.data import commands, shards
from wenet_lite.data import storage as storage_module
from wenet_lite.data.commands import DataCommandRefused, allow_data_commands
from wenet_lite.data.manifest import cut_samples, load_cuts
from wenet_lite.data.shards import SHARD_LIST, find_shards, read_shard
from wenet_lite.data.storage import ShardError, Storage


@pytest.fixture(autouse=True)
def refused_by_default() -> Iterator[None]:
    allow_data_commands(False)
    yield
    allow_data_commands(False)


def _tar(path: Path, members: dict) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _wav(path: Path) -> Path:
    sf.write(path, np.zeros(1600, dtype=np.float32), 16000, subtype="PCM_16")
    return path


def _command_cut(marker: Path, wav: Path) -> MonoCut:
    """A cut whose audio comes from a shell command that touches ``marker``."""
    source = AudioSource(type="command", channels=[0], source=f"touch {marker}; cat {wav}")
    rec = Recording("u1", [source], sampling_rate=16000, num_samples=1600, duration=0.1)
    sup = SupervisionSegment("u1", "u1", 0.0, 0.1, text="HELLO")
    return MonoCut("u1", 0.0, 0.1, 0, recording=rec, supervisions=[sup])


def _shar_part(folder: Path, cut: MonoCut, names: dict) -> None:
    """One Shar shard with ``cut`` (its audio member marked ``.nodata``) and a shard list naming
    the shard's files as ``names`` says."""
    folder.mkdir(parents=True)
    with gzip.open(folder / "cuts.000000.jsonl.gz", "wt") as f:
        f.write(json.dumps(cut.to_dict()) + "\n")
    _tar(folder / "recording.000000.tar", {f"{cut.id}.nodata": b"", f"{cut.id}.json": b"{}"})
    listing = {"format": "lhotse-shar", "shards": [dict(names, utterances=1)]}
    (folder / SHARD_LIST).write_text(json.dumps(listing))


_PLAIN = {"recording": "recording.000000.tar", "cuts": "cuts.000000.jsonl.gz"}


def test_shard_list_names_reach_a_pipe_command_only_as_plain_words(tmp_path, monkeypatch):
    marker = tmp_path / "owned"
    cut = MonoCut("u1", 0.0, 0.1, 0, supervisions=[SupervisionSegment("u1", "u1", 0.0, 0.1)])
    for i, evil in enumerate((f"recording.000000.tar; touch {marker} #",
                              f"recording.000000.tar $(touch {marker})")):  # fmt: skip
        data = tmp_path / f"d{i}"
        _shar_part(data / "train", cut, dict(_PLAIN, recording=evil))
        storage = Storage(f"pipe:cat {data}/{{}}")
        with pytest.raises(ShardError, match="not a plain file name inside the part's folder"):
            find_shards(storage, "train")
        with pytest.raises(ShardError, match="not a plain file name"):
            find_shards(Storage(f"pipe:cat {data}"), "train")  # the form without {}
        assert not marker.exists()
    # names are quoted even where a caller passes one that is not plain
    assert Storage("pipe:cat /d/{}").locate("a b;c") == "pipe:cat /d/'a b;c'"
    assert Storage("pipe:cat /d").locate("x/$(y)") == "pipe:cat /d/'x/$(y)'"
    # a plain list reads through the user's pipe as before
    good = tmp_path / "good"
    _shar_part(good / "train", cut, _PLAIN)
    kind, found = find_shards(Storage(f"pipe:cat {good}/{{}}"), "train")
    assert kind == "shar" and [c.id for c in read_shard(found[0], audio=False)] == ["u1"]
    # negative control: without the name check and the quoting, the payload runs
    monkeypatch.setattr(shards, "plain_name", lambda where, name: name)
    monkeypatch.setattr(storage_module, "shell_word", lambda name: name)
    _, found = find_shards(Storage(f"pipe:cat {tmp_path / 'd0'}/{{}}"), "train")
    list(read_shard(found[0]))
    assert marker.exists()


def test_a_pipe_line_in_a_data_list_runs_only_with_the_opt_in(tmp_path) -> None:
    marker = tmp_path / "owned"
    _tar(tmp_path / "shard0.tar", {"u1.wav": _wav(tmp_path / "a.wav").read_bytes(),
                                   "u1.txt": b"HELLO"})  # fmt: skip
    (tmp_path / "data" / "train").mkdir(parents=True)
    listed = tmp_path / "data" / "train" / "data.list"
    tar = tmp_path / "shard0.tar"
    listed.write_text(f"{tar}\npipe:touch {marker}; cat {tar}\n")
    with pytest.raises(DataCommandRefused) as refused:
        find_shards(Storage(str(tmp_path / "data")), "train")
    message = str(refused.value)
    assert message.startswith(f"{listed}:2: the entry 'pipe:touch")
    assert message.endswith("run only with --allow-data-commands")
    assert not marker.exists()
    allow_data_commands(True)  # negative control: the opt-in runs it
    kind, tars = find_shards(Storage(str(tmp_path / "data")), "train")
    assert kind == "wenet" and len(tars) == 2
    assert [c.id for c in read_shard(tars[1])] == ["u1"] and marker.exists()


def test_a_command_source_in_a_shard_runs_only_with_the_opt_in(tmp_path) -> None:
    marker = tmp_path / "owned"
    _shar_part(tmp_path / "data" / "train", _command_cut(marker, _wav(tmp_path / "a.wav")), _PLAIN)
    kind, found = find_shards(Storage(str(tmp_path / "data")), "train")
    with pytest.raises(
        ShardError,
        match=r"cuts\.000000\.jsonl\.gz:1: recording u1's audio source "
        r"is the shell command 'touch .*--allow-data-commands",
    ):
        list(read_shard(found[0]))
    assert not marker.exists()
    allow_data_commands(True)
    (cut,) = read_shard(found[0])
    assert cut_samples(cut, 16000).shape == (1600,) and marker.exists()


def test_a_command_source_in_a_manifest_runs_only_with_the_opt_in(tmp_path) -> None:
    marker = tmp_path / "owned"
    from lhotse import CutSet

    CutSet.from_cuts([_command_cut(marker, _wav(tmp_path / "a.wav"))]).to_file(
        tmp_path / "cuts.jsonl.gz"
    )
    with pytest.raises(DataCommandRefused, match=r"cuts\.jsonl\.gz: recording u1's audio source"):
        load_cuts(tmp_path)
    with pytest.raises(DataCommandRefused, match="cut u1: recording u1"):
        cut_samples(_command_cut(marker, tmp_path / "a.wav"), 16000)  # however it was built
    assert not marker.exists()
    allow_data_commands(True)
    (cut,) = load_cuts(tmp_path)
    assert cut_samples(cut, 16000).shape == (1600,) and marker.exists()


def test_the_cli_refuses_in_one_line_and_says_how_to_opt_in(tmp_path) -> None:
    marker = tmp_path / "owned"
    (tmp_path / "data" / "train").mkdir(parents=True)
    listed = tmp_path / "data" / "train" / "data.list"
    listed.write_text(f"pipe:touch {marker}; cat x.tar\n")
    run = [sys.executable, "-m", "wenet_lite", "train", "--config", "conf/tiny_test.yaml",
           "--data", str(tmp_path / "data"), "--exp", str(tmp_path / "exp"),
           "--train-part", "train", "--dev-part", "", "--no-progress"]  # fmt: skip
    proc = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"wenet-lite train: error: {listed}:1: the entry 'pipe:touch")
    assert line.endswith("run only with --allow-data-commands") and not marker.exists()
    assert (
        commands.OPT_IN
        in subprocess.run(
            [sys.executable, "-m", "wenet_lite", "train", "--help"], capture_output=True, text=True
        ).stdout
    )
