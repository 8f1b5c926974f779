"""No shell command from a data file: names from a shard list reach a ``pipe:`` command only as
plain quoted words, and ``pipe:`` lines and lhotse ``command`` sources run only with the user's
opt-in. Each vector's payload touches a marker file; the opt-in (or the quoting switched off) is
the negative control that shows the payload would run."""

from __future__ import annotations

import contextlib
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
import torch
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


# ----------------------------------------------------------------- every path a manifest names


def _url_cut(marker: Path, wav: Path, cut_id: str = "u1") -> MonoCut:
    """A cut whose audio source is a ``url`` of the form lhotse runs through a shell."""
    source = AudioSource(type="url", channels=[0], source=f"pipe:touch {marker}; cat {wav}")
    rec = Recording(cut_id, [source], sampling_rate=16000, num_samples=1600, duration=0.1)
    sup = SupervisionSegment(cut_id, cut_id, 0.0, 0.1, text="HELLO")
    return MonoCut(cut_id, 0.0, 0.1, 0, recording=rec, supervisions=[sup])


def _fbank_cut(marker: Path, npy: Path) -> MonoCut:
    """A cut whose stored fbank lies at a ``pipe:`` storage path (lhotse's numpy reader would
    open ``<path>/<key>`` through a shell)."""
    from lhotse.array import Array, TemporalArray

    cut = _url_cut(marker.with_name("unused"), npy)
    cut.recording.sources[0] = AudioSource(type="file", channels=[0], source=str(npy))
    array = Array(storage_type="numpy_files", storage_path=f"pipe:touch {marker}; cat {npy} #",
                  storage_key="k.npy", shape=[3, 4])  # fmt: skip
    return cut.with_custom("fbank", TemporalArray(array, temporal_dim=0, frame_shift=0.01, start=0))


@pytest.fixture()
def http_root(tmp_path) -> Iterator[tuple]:
    """(folder, base URL) of a real http server over ``tmp_path/www``."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_pipe_url_source_in_a_manifest_runs_only_with_the_opt_in(tmp_path) -> None:
    from lhotse import CutSet

    marker, wav = tmp_path / "owned", _wav(tmp_path / "a.wav")
    CutSet.from_cuts([_url_cut(marker, wav)]).to_file(tmp_path / "cuts.jsonl.gz")
    with pytest.raises(DataCommandRefused, match=r"cuts\.jsonl\.gz: recording u1's audio source "
                       r"is the shell command 'pipe:touch .*--allow-data-commands"):  # fmt: skip
        load_cuts(tmp_path)
    with pytest.raises(DataCommandRefused, match="cut u1: recording u1"):
        cut_samples(_url_cut(marker, wav), 16000)  # however it was built
    assert not marker.exists()
    allow_data_commands(True)  # control: with the opt-in the command runs (by our reader)
    (cut,) = load_cuts(tmp_path)
    assert cut_samples(cut, 16000).shape == (1600,) and marker.exists()


def test_sources_are_accepted_by_type_and_urls_only_as_http(tmp_path, http_root) -> None:
    wav = _wav(tmp_path / "a.wav")
    root, base = http_root
    (root / "a.wav").write_bytes(wav.read_bytes())
    cut = _url_cut(tmp_path / "unused", wav)
    for kind, source, problem in (("url", "s3://b/a.wav", "only http"),
                                  ("url", str(wav), "only http"),
                                  ("exec", str(wav), "has type 'exec'")):  # fmt: skip
        cut.recording.sources[0] = AudioSource(type=kind, channels=[0], source=source)
        with pytest.raises(ValueError, match=problem):
            cut_samples(cut, 16000)
    cut.recording.sources[0] = AudioSource(type="url", channels=[0], source=f"{base}/a.wav")
    assert cut_samples(cut, 16000).shape == (1600,)  # an http URL read by our own reader


def test_a_pipe_url_source_in_shar_shards_runs_only_with_the_opt_in(tmp_path, http_root) -> None:
    marker, wav = tmp_path / "owned", _wav(tmp_path / "a.wav")
    root, base = http_root
    _shar_part(root / "train", _url_cut(marker, wav), _PLAIN)  # audio members .nodata
    for data in (str(root), base):  # a folder, and the same shards over http
        _, found = find_shards(Storage(data), "train")
        with pytest.raises(ShardError, match=r"cuts\.000000\.jsonl\.gz:1: recording u1's audio "
                           "source is the shell command 'pipe:touch"):  # fmt: skip
            list(read_shard(found[0]))
    assert not marker.exists()
    allow_data_commands(True)
    (cut,) = read_shard(find_shards(Storage(base), "train")[1][0])
    assert cut_samples(cut, 16000).shape == (1600,) and marker.exists()


def test_a_stored_array_at_a_pipe_path_is_refused_even_with_the_opt_in(tmp_path, http_root):
    from lhotse import CutSet

    from wenet_lite.data.dataset import load_stored_fbank

    marker, npy = tmp_path / "owned", tmp_path / "k.npy"
    np.save(npy, np.zeros((3, 4), dtype=np.float16))
    root, base = http_root
    cut = _fbank_cut(marker, npy)
    CutSet.from_cuts([cut]).to_file(tmp_path / "cuts.jsonl.gz")
    (root / "train").mkdir()
    _shar_part(root / "shar", cut, dict(_PLAIN, fbank="fbank.000000.tar"))
    _tar(root / "shar" / "fbank.000000.tar", {"u1.nodata": b""})
    allow_data_commands(True)  # arrays never run commands, opted in or not
    with pytest.raises(DataCommandRefused, match=r"cut u1's stored array 'fbank' is the shell "
                       "command 'pipe:touch"):  # fmt: skip
        load_cuts(tmp_path)
    for data in (str(root), base):
        _, found = find_shards(Storage(data), "shar")
        with pytest.raises(ShardError, match="stored array 'fbank' is the shell command"):
            list(read_shard(found[0], audio=False))
    with pytest.raises(DataCommandRefused, match="stored array"):
        load_stored_fbank(cut)  # however the cut was built
    assert not marker.exists()
    with pytest.raises(AttributeError):  # numpy cannot seek the pipe, after the command ran
        cut.load_custom("fbank")  # control: lhotse's own reader of the same cut runs it
    assert marker.exists()


def test_stored_arrays_are_read_from_a_folder_or_a_shard_member(tmp_path) -> None:
    from lhotse.array import Array, TemporalArray

    from wenet_lite.data.manifest import cut_array

    stored = np.arange(12, dtype=np.float16).reshape(3, 4)
    np.save(tmp_path / "k.npy", stored)
    cut = _url_cut(tmp_path / "unused", tmp_path / "a.wav")
    cut.recording.sources[0] = AudioSource(type="file", channels=[0], source=str(tmp_path))

    def with_array(**where) -> MonoCut:
        array = Array(shape=[3, 4], **where)
        return cut.with_custom("fbank", TemporalArray(array, 0, 0.01, 0))

    folder = with_array(storage_type="numpy_files", storage_path=str(tmp_path), storage_key="k.npy")
    assert np.array_equal(cut_array(folder, "fbank"), stored)
    buffer = io.BytesIO()
    np.save(buffer, stored)
    member = with_array(storage_type="memory_npy", storage_path="", storage_key=buffer.getvalue())
    assert np.array_equal(cut_array(member, "fbank"), stored)
    outside = "not a file inside a folder"
    bad_places = [(str(tmp_path / "nope"), "k.npy", outside), (str(tmp_path), "../k.npy", outside),
                  ("http://h/x", "k.npy", "at the URL")]  # fmt: skip
    for path, key, problem in bad_places:
        bad = dict(storage_path=path, storage_key=key)
        with pytest.raises(ValueError, match=problem):
            cut_array(with_array(storage_type="numpy_files", **bad), "fbank")
    pickled = tmp_path / "p.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    obj = with_array(storage_type="numpy_files", storage_path=str(tmp_path), storage_key="p.npy")
    with pytest.raises(ValueError, match="not a .npy array"):
        cut_array(obj, "fbank")  # a pickled object array is never unpickled


def test_a_shard_line_that_is_not_a_cut_is_one_error(tmp_path) -> None:
    wav = _wav(tmp_path / "a.wav")
    rec = Recording.from_file(wav, recording_id="r1")
    sup = SupervisionSegment("s1", "r1", 0.0, 0.1, text="HI")
    for i, item in enumerate((sup, rec)):
        folder = tmp_path / f"d{i}" / "train"
        folder.mkdir(parents=True)
        with gzip.open(folder / "cuts.000000.jsonl.gz", "wt") as f:
            f.write(json.dumps(item.to_dict()) + "\n")
        _tar(folder / "recording.000000.tar", {})
        listing = {"format": "lhotse-shar", "shards": [dict(_PLAIN, utterances=1)]}
        (folder / SHARD_LIST).write_text(json.dumps(listing))
        _, found = find_shards(Storage(str(tmp_path / f"d{i}")), "train")
        name = type(item).__name__
        with pytest.raises(ShardError, match=rf"jsonl\.gz:1: not a cut \(a lhotse {name} line"):
            list(read_shard(found[0]))


def test_an_abandoned_pipe_ends_its_whole_process_group(tmp_path, monkeypatch) -> None:
    import os
    import time

    monkeypatch.setattr(storage_module, "STALL_SECONDS", 1.0)
    pid_file = tmp_path / "child.pid"
    location = f"pipe:sleep 60 & echo $! > {pid_file}; wait"
    with pytest.raises(ShardError, match="stalled"):
        storage_module.read_bytes(location)
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the command's child outlived the abandoned read")


class _Choice(torch.utils.data.Dataset):
    """What a loader worker was told about data files' commands."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> bool:
        return commands.commands_allowed()


def test_spawned_loader_workers_keep_the_choice() -> None:
    allow_data_commands(True)
    told = torch.utils.data.DataLoader(_Choice(), batch_size=None, num_workers=1,
                                       multiprocessing_context="spawn",
                                       worker_init_fn=commands.worker_opt_in())  # fmt: skip
    assert list(told) == [True]
    bare = torch.utils.data.DataLoader(_Choice(), batch_size=None, num_workers=1,
                                       multiprocessing_context="spawn")  # fmt: skip
    assert list(bare) == [False]  # the control: a spawned worker starts refusing


def test_a_python_caller_of_training_opts_in_by_the_data_config(tmp_path) -> None:
    from wenet_lite.train.trainer import TrainOptions, train

    marker = tmp_path / "owned"
    tar = tmp_path / "shard0.tar"
    _tar(tar, {"u1.wav": _wav(tmp_path / "a.wav").read_bytes(), "u1.txt": b"HELLO"})
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "data.list").write_text(f"pipe:touch {marker}; cat {tar}\n")

    def run(*overrides: str) -> None:
        train(TrainOptions(Path("conf/tiny_test.yaml"), tmp_path / "data", tmp_path / "exp",
                           overrides=("train.max_steps=1", *overrides), train_parts=("train",),
                           dev_parts=(), progress_bar=False))  # fmt: skip

    with pytest.raises(DataCommandRefused, match="run only with --allow-data-commands"):
        run()
    assert not marker.exists() and not commands.commands_allowed()
    with contextlib.suppress(Exception):  # one utterance: what fails after the list, fails
        run("data.allow_commands=true")
    assert marker.exists()  # the list's command ran, by the caller's config
    assert not commands.commands_allowed()  # and the choice ended with the run
