"""`wenet-lite compute-cmvn | train | average` end to end through the CLI entry point."""

import json
import math
import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from wenet_lite import load_model
from wenet_lite.cli import main
from wenet_lite.features.cmvn import load_cmvn

TINY = "conf/tiny_test.yaml"


def test_cmvn_train_average_from_the_command_line(synthetic_corpus, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    data.symlink_to(synthetic_corpus.data, target_is_directory=True)
    cmvn = tmp_path / "cmvn.json"
    argv = ["compute-cmvn", "--config", TINY, "--data", str(data / "train-clean-100")]
    assert main(argv + ["--out", str(cmvn)]) == 0
    mean, istd = load_cmvn(cmvn)
    assert mean.shape == (80,) and bool((istd > 0).all())
    assert main(argv + ["--out", str(tmp_path / "sub.json"), "--max-utts", "3"]) == 0
    full_frames, sub_frames = re.findall(r": (\d+) frames", capsys.readouterr().out)
    assert 0 < int(sub_frames) < int(full_frames) / 3
    sub_mean, _ = load_cmvn(tmp_path / "sub.json")
    assert 0 < (sub_mean - mean).abs().max() < 3.0  # 3 utterances: a rough estimate (means ~15)

    exp = tmp_path / "exp" / "tiny"
    argv = ["train", "--config", TINY, "--data", str(data), "--exp", str(exp), "--cmvn", str(cmvn),
            "--device", "cpu"]  # fmt: skip
    argv += ["--set", "train.max_epochs=2", "--set", "train.checkpoint_interval=4"]
    assert main(argv + ["--no-progress"]) == 0
    assert "trained to step" in capsys.readouterr().out
    for name in ("config.yaml", "train.log", "tokenizer.model", "skipped.json"):
        assert (exp / name).is_file(), name
    events = EventAccumulator(str(exp / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/frames_per_second"):
        assert tag in tags, tags
        assert all(math.isfinite(e.value) for e in events.Scalars(tag))
    assert {"dev/loss", "dev/wer_full", "dev/wer_chunk4"} <= tags, tags
    assert [e.step for e in events.Scalars("dev/loss")] == [9, 18]  # each epoch end
    log = (exp / "train.log").read_text()
    assert "epoch 2 dev:" in log and "WER[full]" in log and "WER[chunk4]" in log
    assert set(json.loads((exp / "skipped.json").read_text())) == {"train", "dev"}
    steps = sorted(int(p.stem.split("_")[1]) for p in exp.glob("step_*.pt"))
    assert steps == [8, 9, 12, 16, 18]  # every 4 steps and at epoch ends (9, 18); newest 5

    assert main(["average", "--exp", str(exp), "--num", "2"]) == 0
    model, tokenizer, cfg = load_model(exp / "avg_2.pt")
    assert cfg.train.max_epochs == 2 and tokenizer.vocab_size == 40
    assert bool((model.encoder.cmvn.mean == mean).all())

    # Rerunning into a used exp dir without --resume is refused, with the reason.
    assert main(argv) == 1
    assert "pass --resume" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "conf/nope.yaml"], "config file not found: conf/nope.yaml"),
        (["--config", TINY, "--set", "train.lr=-1"], "train.lr: must be positive"),
        (["--config", TINY, "--train-part", "nope"], "no prepared part 'nope'"),
        (
            ["--config", TINY, "--train-part", "train-clean-100=1,dev-clean"],
            "give every part a weight",
        ),
        (["--config", TINY, "--train-part", "train-clean-100=0"], "weight must be a number > 0"),
        (["--config", TINY, "--train-part", "train-clean-100=x"], "weight must be a number > 0"),
        (["--config", TINY, "--train-part", "dev-clean=1,dev-clean=2"], "a part named twice"),
    ],
)
def test_train_start_errors_are_one_line(synthetic_corpus, tmp_path, capsys, args, message) -> None:
    argv = ["train", "--data", str(synthetic_corpus.data), "--exp", str(tmp_path / "e"), *args]
    assert main(argv) in (1, 2)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_full_disk_while_saving_is_one_line_and_keeps_earlier_checkpoints(
    synthetic_corpus, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch reports a full disk as ``RuntimeError: ... unexpected pos 64 vs 0``."""
    import torch

    import wenet_lite.files.checkpoint as checkpoint

    save = torch.save

    def full_disk_after_the_first(obj, f, *args, **kwargs):
        if list(tmp_path.rglob("step_*.pt")):
            raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0")
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk_after_the_first)
    exp = tmp_path / "exp"
    argv = ["train", "--config", TINY, "--data", str(synthetic_corpus.data), "--exp", str(exp)]
    argv += ["--tokenizer", str(synthetic_corpus.tokenizer), "--no-progress"]
    argv += ["--set", "train.checkpoint_interval=2", "--set", "train.max_steps=6"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{exp / 'step_4.pt'}: could not be written (" in err and "unexpected pos" in err
    assert "the files written before it are intact" in err
    assert [p.name for p in exp.glob("step_*.pt")] == ["step_2.pt"]
    assert not list(exp.glob(".tmp-*"))
    load_model(exp / "step_2.pt")  # intact


def test_parts_mixed_by_weight_from_the_command_line(synthetic_corpus, tmp_path, capsys) -> None:
    """--train-part A=W,B=W: the log states each part's utterances per epoch; a part that
    shares utterances with another is refused, naming both."""
    data = tmp_path / "data"
    data.mkdir()
    for part in ("train-clean-100", "dev-clean", "test-clean"):
        (data / part).symlink_to(synthetic_corpus.data / part, target_is_directory=True)
    (data / "again").symlink_to(synthetic_corpus.data / "dev-clean", target_is_directory=True)
    (data / "cmvn.json").symlink_to(synthetic_corpus.data / "cmvn.json")
    base = ["train", "--config", TINY, "--data", str(data), "--device", "cpu", "--no-progress",
            "--dev-part", "test-clean", "--set", "train.max_steps=2"]  # fmt: skip
    exp = tmp_path / "exp"
    argv = [*base, "--exp", str(exp), "--train-part", "train-clean-100=1,dev-clean=3"]
    assert main(argv) == 0
    log = (exp / "train.log").read_text()
    line = next(x for x in log.splitlines() if "parts mixed by weight" in x)
    shares = {m[0]: int(m[1]) for m in re.findall(r"(\S+) (\d+) of \d+ \(weight", line)}
    assert abs(shares["dev-clean"] - 3 * shares["train-clean-100"]) <= 4  # 3:1, rounded
    argv = [*base, "--exp", str(tmp_path / "e2"), "--train-part", "dev-clean=1,again=1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "is in both dev-clean and again" in err and "Traceback" not in err
