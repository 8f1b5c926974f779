"""`wenet-lite compute-cmvn | train | average` end to end through the CLI entry point."""

import json
from pathlib import Path

import pytest

from wenet_lite import load_model
from wenet_lite.cli import build_parser, main
from wenet_lite.features.cmvn import load_cmvn

TINY = "conf/tiny_test.yaml"


def test_help_starts_with_a_usage_line() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("compute-cmvn", "train", "average"):
        assert sub[name].description.startswith(f"usage: wenet-lite {name} --")


def test_cmvn_train_average_from_the_command_line(synthetic_corpus, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    data.symlink_to(synthetic_corpus.data, target_is_directory=True)
    cmvn = tmp_path / "cmvn.json"
    argv = ["compute-cmvn", "--config", TINY, "--data", str(data / "train-clean-100")]
    assert main(argv + ["--out", str(cmvn)]) == 0
    mean, istd = load_cmvn(cmvn)
    assert mean.shape == (80,) and bool((istd > 0).all())

    exp = tmp_path / "exp" / "tiny"
    argv = ["train", "--config", TINY, "--data", str(data), "--exp", str(exp), "--cmvn", str(cmvn)]
    argv += ["--set", "train.max_epochs=2", "--set", "train.checkpoint_interval=4"]
    assert main(argv + ["--no-progress"]) == 0
    assert "trained to step" in capsys.readouterr().out
    for name in ("config.yaml", "train.log", "tokenizer.model", "skipped.json"):
        assert (exp / name).is_file(), name
    assert list((exp / "tensorboard").glob("events.out.tfevents.*"))
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
    ],
)
def test_train_start_errors_are_one_line(synthetic_corpus, tmp_path, capsys, args, message) -> None:
    argv = ["train", "--data", str(synthetic_corpus.data), "--exp", str(tmp_path / "e"), *args]
    assert main(argv) in (1, 2)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
