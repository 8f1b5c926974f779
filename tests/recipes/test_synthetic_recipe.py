"""recipes/synthetic/run.sh end to end in smoke mode: every stage runs and leaves its artefacts.

SMOKE=1 generates 0.02 h of speech and trains conf/tiny_test.yaml for 200 steps (enough for it
to emit words), then decodes, streams, exports (TorchScript, ONNX), runs both exported models
and writes plots and RESULTS.md: the same commands as `make demo`, small enough for CI (about a
minute on 2 cores).
"""

from __future__ import annotations

import json
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


def _run_recipe(args: list, timeout: int = TIMEOUT_S) -> subprocess.CompletedProcess:
    """The smoke recipe with ``args``; it calls python3 and wenet-lite: this interpreter's
    environment first."""
    env = dict(os.environ, SMOKE="1", OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", str(RECIPE), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the whole smoke recipe once; returns its exp dir."""
    if shutil.which("wenet-lite") is None:
        pytest.skip("wenet-lite is not on PATH (pip install -e .)")
    tmp = tmp_path_factory.mktemp("recipe")
    proc = _run_recipe(["--corpus", str(tmp / "corpus"), "--data", str(tmp / "data"),
                        "--exp", str(tmp / "exp")])  # fmt: skip
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
    assert "step 200:" in log
    assert re.search(r"stored fbank for (\d+) of \1 training utterances", log)  # stage 2's


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_decode_stream_and_results(smoke_run: Path) -> None:
    decode = smoke_run / "decode" / "test-clean"
    modes = ["full", "full_lm"] + [f"{m}{c}" for c in CHUNKS for m in ("chunk", "stream")]
    modes += [f"chunk{c}_sim" for c in CHUNKS] + ["chunk16_sim_lm", "stream16_lm"]
    modes += [
        "full_beam",
        "full_beam_hot",
        "full_beam_unrelated",
        "full_lm_hot",
        "full_lm_unrelated",
        "full_rescore",
        "full_lm_rescore",
        "chunk16_sim_beam",
        "chunk16_sim_rescore",
        "chunk16_sim_lm_rescore",
        "stream16_rescore",
        "stream16_lm_rescore",
    ]
    num_utts = len(_hyps(decode / "full" / "hyp.txt"))
    table = {}
    for mode in modes:
        record = _summary(decode / mode)
        assert record["utterances"] == num_utts and record["failed"] == 0, mode
        table[mode] = record
    lm = table["full_lm"]["settings"]["search"]
    assert lm["mode"] == "prefix_beam" and lm["lm"].endswith("lm.json")
    assert (lm["beam_size"], lm["token_min_logp"], lm["blank_penalty"]) == (20, -5.0, 0.7)
    assert (lm["lm_weight"], lm["word_bonus"], lm["oov_penalty"]) == (0.4, 2.5, 3.0)
    # RESULTS.md's rows carry those numbers, row by row, and it says what precision trained
    # (the suite runs as on a CPU without native bf16: the config's auto means fp32).
    assert "Precision: fp32 (`train.precision`" in (smoke_run / "RESULTS.md").read_text()
    rows = [r for r in (smoke_run / "RESULTS.md").read_text().splitlines() if r.startswith("| ")]
    greedy = next(r for r in rows if r.startswith("| ctc greedy, full context |"))
    assert greedy.endswith(
        f"| {table['full']['wer']['percent']:.2f} | {table['full']['cer']['percent']:.2f} |"
    )
    lm_row = next(r for r in rows if "word LM lm.json" in r and "full context" in r)
    assert lm_row.endswith(f"| {table['full_lm']['wer']['percent']:.2f} "
                           f"| {table['full_lm']['cer']['percent']:.2f} |")  # fmt: skip
    # Hotwords: the lists the recipe wrote, the searches that used them, their RESULTS table.
    unseen = (smoke_run / "hotwords" / "unseen.txt").read_text().split()
    assert unseen and len((smoke_run / "hotwords" / "unrelated.txt").read_text().split()) == len(
        unseen
    )
    for mode, listed in (("full_lm_hot", "unseen"), ("full_beam_unrelated", "unrelated")):
        search = table[mode]["settings"]["search"]
        assert (
            search["hotwords"].endswith(f"hotwords/{listed}.txt")
            and search["hotwords_score"] == 0.75
        )
    assert table["full_beam"]["settings"]["search"]["hotwords"] is None
    # Attention rescoring: the beam's settings, the LM's where it is on, rows in RESULTS.
    checks = (("full_rescore", False, "full context |"),
              ("chunk16_sim_lm_rescore", True, "simulated streaming"))  # fmt: skip
    for mode, lm_on, where in checks:
        search = table[mode]["settings"]["search"]
        assert search["mode"] == "attention_rescoring" and search["beam_size"] == 20
        assert search["nbest"] == 20 and (search["lm"] is not None) == lm_on
        weight = 8.0 if lm_on else 0.5  # the recipe's rescore_lm_ctc_weight with the LM
        assert search["ctc_weight"] == weight
        rescored = f"attention rescoring of the 20-best (ctc weight {weight}, reverse weight 0.3)"
        row = next(r for r in rows if rescored in r and where in r and ("word LM" in r) == lm_on)
        wer, cer = table[mode]["wer"]["percent"], table[mode]["cer"]["percent"]
        assert row.endswith(f"| {wer:.2f} | {cer:.2f} |"), row
    results = (smoke_run / "RESULTS.md").read_text()
    assert "| decoding mode | listed words decoded right | WER | decode wall s |" in results
    assert "-word LM text (librispeech-lm-norm.txt.gz)" in results  # the corpus's LM text
    pictures = (("training", "Training curves"), ("alignment", "CTC posteriors"),
                ("attention", "Attention weights"),
                ("cross_attention", "Decoder cross-attention (attention rescoring)"))  # fmt: skip
    for png, what in pictures:
        assert (smoke_run / f"{png}.png").read_bytes()[:4] == b"\x89PNG", png
        assert f"![{what}]({png}.png)" in results
    assert (smoke_run / "stream_one_file.txt").is_file()
    # the punctuation model of the fortune text, its held-out scores beside the baseline's
    metrics = json.loads((smoke_run / "punct" / "metrics.json").read_text())
    assert metrics["steps"] == 20 and metrics["held-out lines"] > 0
    assert "Punctuation and casing (`wenet-lite train-punct`" in results
    legal = smoke_run / "punct" / "score_legal.json"  # scored on prose of a kind never seen
    if legal.is_file():  # /usr/share/common-licenses: every Debian system
        assert json.loads(legal.read_text())["model"]["words"] > 1000
        assert "legal.txt (never trained on) lines alone" in results
    for key, how in (("baseline", "lines alone"), ("baseline, running text", "8 lines run")):
        base = next(r for r in rows if r.startswith("| baseline: first word capitalised")
                    and how in r)  # fmt: skip
        scores = metrics[key]
        assert base.endswith(f"| {scores['case accuracy']:.2f} | {scores['f1 capital']:.2f} |")


@pytest.mark.parametrize(
    "chunk, lm", [(16, ""), (4, ""), (16, "_lm"), (16, "_rescore"), (16, "_lm_rescore")]
)
def test_stream_equals_simulated_streaming(smoke_run: Path, chunk: int, lm: str) -> None:
    """Also with the word LM (stage 5's settings, beam, pruning and penalties)."""
    decode = smoke_run / "decode" / "test-clean"
    streamed = _hyps(decode / f"stream{chunk}{lm}" / "hyp.txt")
    simulated = _hyps(decode / f"chunk{chunk}_sim{lm}" / "hyp.txt")
    assert len(streamed) >= 10
    assert streamed == simulated
    # Equal empty transcripts would prove nothing.
    assert sum(bool(text) for text in streamed.values()) >= len(streamed) // 2, streamed
    record = _summary(decode / f"stream{chunk}{lm}")
    assert record["identical"]["same"] == record["identical"]["compared"] == len(streamed)
    settings = record["settings"]
    assert settings["chunking"] == {"chunk_size": chunk, "left_chunks": -1}
    assert settings["search"] == _summary(decode / f"chunk{chunk}_sim{lm}")["settings"]["search"]


def test_exported_models_ran(smoke_run: Path) -> None:
    export = smoke_run / "export"
    for name in ("model.ts", "model.int8.ts", "onnx/model.onnx", "onnx/model.int8.onnx"):
        assert (export / name).is_file(), name
    assert (export / "onnx" / "tokens.txt").is_file()
    decode = smoke_run / "decode" / "test-clean"
    num_files = len(_hyps(decode / "full" / "hyp.txt"))
    assert (export / "onnx" / "decoder.onnx").is_file()
    for name in ("ts16", "ts16_int8", "sherpa16", "sherpa16_int8", "ts16_rescore"):
        assert len((export / f"{name}.txt").read_text().splitlines()) == num_files, name
        record = _summary(decode / name)
        assert record["utterances"] == num_files and record["failed"] == 0, name
    results = (smoke_run / "RESULTS.md").read_text()
    assert "exported ONNX in sherpa-onnx (`examples/run_sherpa.py`), int8 | 16 |" in results


@pytest.mark.parametrize(
    "heads, second_key", [("hybrid", "transducer_weight"), ("cr-ctc", "cr_ctc_weight")]
)
def test_curriculum_trains_ctc_then_adds_the_head(
    smoke_run: Path, tmp_path: Path, heads: str, second_key: str
) -> None:
    """--heads hybrid / cr-ctc: the config's CTC model for --ctc-share of the steps into
    EXP/first, then the head added by train --init for the rest into EXP."""
    import yaml

    exp = tmp_path / heads
    data = smoke_run.parent / "data"
    steps = "train.max_steps=8 train.checkpoint_interval=1 train.log_interval=1"
    proc = _run_recipe(["--stage", "3", "--stop-stage", "4", "--data", str(data), "--exp", str(exp),
                        "--heads", heads, "--ctc-share", "0.5", "--overrides", steps])  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    first = yaml.safe_load((exp / "first" / "config.yaml").read_text())
    second = yaml.safe_load((exp / "config.yaml").read_text())
    assert first["model"][second_key] == 0 and second["model"][second_key] > 0
    assert first["train"]["max_steps"] == 4 and second["train"]["max_steps"] == 4
    if heads == "cr-ctc":
        assert not first["specaug"]["enabled"] and second["specaug"]["enabled"]
        assert "consistency" in (exp / "train.log").read_text()
    assert "starting from the weights of" in proc.stdout + proc.stderr
    assert (exp / "first" / "avg_3.pt").is_file() and (exp / "avg_3.pt").is_file()


def test_an_unknown_heads_value_is_refused(tmp_path: Path) -> None:
    proc = _run_recipe(["--heads", "transducer", "--exp", str(tmp_path / "exp")], timeout=30)
    assert proc.returncode == 2 and "--heads is config, hybrid or cr-ctc" in proc.stderr
    assert not (tmp_path / "exp").exists()
