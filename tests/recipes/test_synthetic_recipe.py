"""recipes/synthetic/run.sh end to end in smoke mode: every stage runs and leaves its artefacts.

SMOKE=1 generates 0.02 h of speech and trains conf/tiny_test.yaml for 40 steps, then decodes,
streams, exports (TorchScript, ONNX), runs both exported models and writes plots and
RESULTS.md: the same commands as `make demo`, small enough for CI (44 s on 2 cores).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "synthetic" / "run.sh"
CHUNKS = (16, 4)
TIMEOUT_S = 600

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("espeak-ng") is None
        or shutil.which("flite") is None
        or not Path("/usr/share/games/fortunes").is_dir(),
        reason="needs apt-get install espeak-ng flite fortunes-min fortunes",
    ),
]


def _hyps(path: Path) -> Dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        uid, _, text = line.partition(" ")
        out[uid] = text.strip()
    return out


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the whole smoke recipe once; returns its exp dir."""
    if shutil.which("wenet-lite") is None:
        pytest.skip("wenet-lite is not on PATH (pip install -e .)")
    tmp = tmp_path_factory.mktemp("recipe")
    env = dict(os.environ, SMOKE="1", OMP_NUM_THREADS="1")
    # The recipe calls python3 and wenet-lite: use this interpreter's environment first.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = ["bash", str(RECIPE), "--corpus", str(tmp / "corpus"), "--data", str(tmp / "data")]
    cmd += ["--exp", str(tmp / "exp")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    (tmp / "recipe.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return tmp / "exp"


def test_training_artefacts(smoke_run: Path) -> None:
    exp = smoke_run
    for name in ("config.yaml", "train.log", "tokenizer.model", "skipped.json", "avg_3.pt"):
        assert (exp / name).is_file(), name
    assert list((exp / "tensorboard").glob("events.out.tfevents.*"))
    assert list(exp.glob("step_*.pt"))
    log = (exp / "train.log").read_text()
    assert "step 40:" in log
    assert re.search(r"stored fbank for (\d+) of \1 training utterances", log)  # stage 2's


def test_decode_stream_and_results(smoke_run: Path) -> None:
    decode = smoke_run / "decode" / "test-clean"
    modes = ["full", "full_lm"] + [f"{m}{c}" for c in CHUNKS for m in ("chunk", "stream")]
    modes += [f"chunk{c}_sim" for c in CHUNKS] + ["chunk16_sim_lm", "stream16_lm"]
    for mode in modes:
        summary = (decode / mode / "summary.txt").read_text()
        assert "WER " in summary and "CER " in summary, mode
        assert (decode / mode / "hyp.txt").is_file(), mode
    results = (smoke_run / "RESULTS.md").read_text()
    assert "| decoding mode | chunk |" in results
    assert "never occur in the" in results
    lm_row = (
        "beam 20, token min log-prob -5.0, blank penalty 0.7, LM weight 0.4, word bonus 2.5, "
        "oov penalty 3.0), full context |"
    )
    assert f"(`decode --lm`, {lm_row}" in results
    assert "-word LM text (librispeech-lm-norm.txt.gz)" in results  # the corpus's LM text
    assert "![Training curves](training.png)" in results
    for png in ("training.png", "alignment.png"):
        assert (smoke_run / png).read_bytes()[:4] == b"\x89PNG", png
    assert (smoke_run / "stream_one_file.txt").is_file()


@pytest.mark.parametrize("chunk, lm", [(16, ""), (4, ""), (16, "_lm")])
def test_stream_equals_simulated_streaming(smoke_run: Path, chunk: int, lm: str) -> None:
    """Also with the word LM (stage 5's settings, beam, pruning and penalties)."""
    decode = smoke_run / "decode" / "test-clean"
    streamed = _hyps(decode / f"stream{chunk}{lm}" / "hyp.txt")
    simulated = _hyps(decode / f"chunk{chunk}_sim{lm}" / "hyp.txt")
    assert len(streamed) >= 10
    assert streamed == simulated
    summary = (decode / f"stream{chunk}{lm}" / "summary.txt").read_text()
    assert f"{len(streamed)}/{len(streamed)}" in summary
    if lm:
        sim = (decode / f"chunk{chunk}_sim{lm}" / "summary.txt").read_text()
        assert "+ LM " in sim and "blank penalty 0.7" in sim and "simulated streaming" in sim


def test_exported_models_ran(smoke_run: Path) -> None:
    export = smoke_run / "export"
    for name in ("model.ts", "model.int8.ts", "onnx/model.onnx", "onnx/model.int8.onnx"):
        assert (export / name).is_file(), name
    assert (export / "onnx" / "tokens.txt").is_file()
    decode = smoke_run / "decode" / "test-clean"
    num_files = len(_hyps(decode / "full" / "hyp.txt"))
    for name in ("ts16", "ts16_int8", "sherpa16", "sherpa16_int8"):
        assert len((export / f"{name}.txt").read_text().splitlines()) == num_files, name
        summary = (decode / name / "summary.txt").read_text()
        assert "WER " in summary and "failed 0" in summary, name
    results = (smoke_run / "RESULTS.md").read_text()
    assert "exported ONNX in sherpa-onnx (`tools/run_sherpa.py`), int8 | 16 |" in results
