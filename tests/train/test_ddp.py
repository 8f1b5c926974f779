"""`torchrun --nproc_per_node 2` on CPU (gloo): ranks stay identical, only rank 0 writes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lhotse import CutSet

from wenet_lite.data.dataset import SKIP_REASONS
from wenet_lite.data.manifest import load_cuts
from wenet_lite.files.checkpoint import list_checkpoints, load_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from ddp_train import digest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("ddp_train.py")


GPU_PATH = ("train.compile=true", "data.fbank=device")
"""What a GPU run uses (compiled encoder, fbank in the loop), here on gloo ranks."""


HYBRID = ("model.transducer_weight=0.5", "model.cr_ctc_weight=0.2", "specaug.enabled=true")
"""The transducer head and CR-CTC's two views on the ranks."""


@pytest.mark.parametrize(
    "extra", [(), pytest.param(GPU_PATH, marks=pytest.mark.slow, id="compiled-device-fbank"),
              pytest.param(HYBRID, marks=pytest.mark.slow, id="hybrid-cr-ctc")],
)  # fmt: skip
def test_two_cpu_ranks_train_in_lockstep(synthetic_corpus, salted_cuts, make_data, tmp_path, extra):
    bad, expected = salted_cuts
    train = load_cuts(synthetic_corpus.data / "train-clean-100")
    good = sorted(train, key=lambda c: c.duration)[:8]  # all < 2 s
    dev = load_cuts(synthetic_corpus.data / "dev-clean").subset(first=4)
    # Four unreadable 4.1 s utterances fill the long bucket's 9 s batches on their own: those
    # batches have nothing usable, and their rank must still join the gradient all-reduce.
    data = make_data({"salted": CutSet.from_cuts(list(bad) + list(good)), "dev": dev})
    exp, out = tmp_path / "exp", tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(SCRIPT), str(data), str(exp), str(out), str(synthetic_corpus.tokenizer)]
    cmd += ["train.max_epochs=2", "data.max_batch_seconds=9", "data.max_duration=9"]
    cmd += ["train.checkpoint_interval=3", *extra]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["digest"] == ranks[1]["digest"]
    assert ranks[0]["step"] == ranks[1]["step"] > 0
    assert ranks[0]["empty_batches"] + ranks[1]["empty_batches"] > 0
    newest = list_checkpoints(exp)[-1]
    assert newest.name == f"step_{ranks[0]['step']}.pt"
    assert digest(load_checkpoint(newest)["model"]) == ranks[0]["digest"]

    zeros = dict.fromkeys(SKIP_REASONS, 0)
    skipped = json.loads((exp / "skipped.json").read_text())
    assert skipped == {"train": {"1": expected, "2": expected}, "dev": {"1": zeros, "2": zeros}}
    saves = [line for line in (exp / "train.log").read_text().splitlines() if " saved " in line]
    assert len(saves) == len(set(saves))  # one writer
    assert not list(exp.glob(".tmp-*"))
