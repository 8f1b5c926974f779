"""recipes/synthetic/compare_heads.sh --dry-run: the runs it would train, each head's steps at
equal time and its settings, without training anything; and recipes/common/heads_table.py's
count of what a run trained."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "recipes" / "synthetic" / "compare_heads.sh"


def _plan(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", "true", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _runs(stdout: str) -> Dict[str, Tuple[int, List[str]]]:
    """head -> (steps, the training command's words)."""
    runs = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"\[(\S+)\] (\d+) steps: (.*)", line.strip())
        assert m, line
        runs[m.group(1)] = (int(m.group(2)), shlex.split(m.group(3)))
    return runs


def _arg(words: List[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_dry_run_gives_each_head_its_steps_and_settings() -> None:
    done = _plan("--scale", "2", "--ctc-share", "0.75", "--tag", "_t",
                 "--heads", "ctc cr-ctc cr-ctc-half cr-ctc-ctc hybrid-ctc",
                 "--extra", "specaug.enabled=true")  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = _runs(done.stdout)
    assert set(runs) == {"ctc_t", "cr-ctc_t", "cr-ctc-half_t", "cr-ctc-ctc_t", "hybrid-ctc_t"}
    # the recipe's 3000 steps, twice
    steps, ctc = runs["ctc_t"]
    assert steps == 6000 and "train.max_steps=6000" in _arg(ctc, "--overrides")
    assert _arg(ctc, "--exp") == "exp/heads/ctc_t" and "--heads" not in ctc
    # two views cost about two CTC steps: half the steps at equal time
    assert runs["cr-ctc_t"][0] == round(6000 * 0.51)
    # half the batch: two views of 30 s cost one CTC step of 60 s, so as many steps as CTC
    steps, half = runs["cr-ctc-half_t"]
    overrides = _arg(half, "--overrides").split()
    assert steps == 6000
    assert "data.max_batch_seconds=30.0" in overrides and "model.cr_ctc_weight=0.2" in overrides
    # a curriculum: CTC for 3/4 of the time, then the head at its own speed for the rest;
    # --extra reaches the whole run (the first part included)
    for head, speed, second in (("cr-ctc-ctc_t", 0.51, "cr-ctc"), ("hybrid-ctc_t", 0.71, "hybrid")):
        steps, words = runs[head]
        first = 4500
        assert steps == first + round(1500 * speed)
        assert _arg(words, "--heads") == second
        assert abs(float(_arg(words, "--ctc-share")) * steps - first) < 1e-6
        assert "specaug.enabled=true" in _arg(words, "--overrides").split()
    assert not (REPO / "exp" / "heads" / "ctc_t").exists()  # nothing ran


def test_cr_ctc_late_switches_the_second_view_on_inside_one_run() -> None:
    done = _plan("--scale", "2", "--heads", "cr-ctc-late", "--extra", "train.seed=1")
    assert done.returncode == 0, done.stderr
    steps, words = _runs(done.stdout)["cr-ctc-late"]
    assert steps == 3000 + round(3000 * 0.51)  # CTC + SpecAugment half the time, then two views
    overrides = _arg(words, "--overrides").split()
    assert "model.cr_start_step=3000" in overrides and "model.cr_ctc_weight=0.2" in overrides
    assert "specaug.start_step=0" in overrides and "--heads" not in words  # no restart


def test_an_unknown_head_or_option_is_one_line() -> None:
    done = _plan("--heads", "ctc transducer")
    assert done.returncode == 2 and "unknown head transducer" in done.stderr
    done = _plan("--steps", "5")
    assert done.returncode == 2 and "unknown option --steps" in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--ctc-share", "abc"), "--ctc-share abc: give the first part's share"),
        (("--ctc-share", "1"), "--ctc-share 1: give the first part's share"),
        (("--ctc-share", "nan"), "--ctc-share nan: give the first part's share"),
        (("--scale", "-2"), "--scale -2: give a positive number"),
        (("--scale", "inf"), "--scale inf: give a positive number"),
        (("--dry-run", "maybe"), "--dry-run maybe: give true or false"),
        (("--decode-only", "yes"), "--decode-only yes: give true or false"),
        (("--config", "no_such.yaml"), "--config: config file not found: no_such.yaml"),
    ],
)
def test_a_bad_value_is_one_line_naming_it(args: Tuple[str, str], message: str) -> None:
    done = _plan("--heads", "cr-ctc-ctc", *args)
    assert done.returncode in (1, 2) and not done.stdout
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _log_training(part: Path, last_step: int, log_every: int = 20) -> None:
    """A part of a run as the trainer leaves it: the loss and speed every ``log_every`` steps
    in TensorBoard, and checkpoints, the last at ``last_step`` (not a multiple of the log's)."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(part / "tensorboard"))
    for step in range(log_every, last_step + 1, log_every):
        writer.add_scalar("train/loss", 100.0 / step, step, walltime=1000.0 + step)
        writer.add_scalar("train/audio_seconds_per_second", 150.0, step, walltime=1000.0 + step)
    writer.close()
    for step in (last_step - last_step % 100, last_step):
        (part / f"step_{step}.pt").write_bytes(b"")


def test_heads_table_counts_a_curriculum_to_its_last_checkpoint(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "recipes" / "common"))
    try:
        from heads_table import training
    finally:
        sys.path.pop(0)
    exp = tmp_path / "cr-ctc-ctc"
    (exp / "first").mkdir(parents=True)
    _log_training(exp / "first", 4500)
    _log_training(exp, 765)
    steps, minutes, speed = training(exp)
    assert steps == 4500 + 765  # the log's last step is 760
    assert speed == 150.0 and abs(minutes - (4480 + 740) / 60) < 1e-3
    only = tmp_path / "ctc"
    only.mkdir()
    _log_training(only, 6000)
    assert training(only)[0] == 6000
