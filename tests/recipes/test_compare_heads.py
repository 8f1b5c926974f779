"""recipes/synthetic/compare_heads.sh --dry-run: the runs it would train, each head's steps at
equal time and its settings, without training anything."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

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


def test_an_unknown_head_or_option_is_one_line() -> None:
    done = _plan("--heads", "ctc transducer")
    assert done.returncode == 2 and "unknown head transducer" in done.stderr
    done = _plan("--steps", "5")
    assert done.returncode == 2 and "unknown option --steps" in done.stderr
