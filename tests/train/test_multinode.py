"""Multi-node training on torchrun, two "nodes" on one machine (two torchrun launches meeting
at a c10d rendezvous on 127.0.0.1, one gloo rank each, reading shards): the ranks hold
identical weights, only
global rank 0 writes, a job started again with --max-restarts (as torchrun restarts one after
losing a node) resumes from the newest checkpoint by itself and ends with the weights of an
uninterrupted run, and a checkpoint of two ranks resumes on one (an elastic job that lost a
node for good)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from wenet_lite.data.manifest import load_cuts

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("node_train.py")
SETTINGS = ["train.max_epochs=100", "train.checkpoint_interval=2",
            "data.max_batch_seconds=4", "data.max_duration=4", "data.num_buckets=1",
            "train.log_interval=1"]  # fmt: skip

pytestmark = pytest.mark.slow
NEW_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"node 0's rendezvous store never listened on port {port}")


class Hung(AssertionError):
    """The launches did not finish in time."""


def _two_nodes(data: Path, exp: Path, out: Path, tokenizer: Path, extra: List[str],
               during=None, pause: float = 0.0, limit: float = 180,
               store=NEW_STORE):  # fmt: skip
    """Both nodes' torchrun launches, waited for (each must succeed); the results of the
    ranks and the launches' output. ``during(procs)`` runs while they train."""
    port = _free_port()
    # Without TORCH_DISABLE_SHARE_RDZV_TCP_STORE restarted workers can read the keys of the
    # ones before them in the agent's store and hang in init_process_group (the docs say so).
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "NODE_STEP_PAUSE": str(pause), **store}  # fmt: skip
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--node-rank", str(node), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", exp.name,
               "--rdzv-conf", "last_call_timeout=5", "--max-restarts", "2",
               "--monitor-interval", "0.5", str(SCRIPT), str(data),
               str(exp), str(out), str(tokenizer), *SETTINGS, *extra]  # fmt: skip
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
        if node == 0:  # node 0 hosts the rendezvous store (node 1 may be lost for good)
            _wait_for_port(port, procs[0])
    if during is not None:
        during(procs)
    deadline = time.monotonic() + limit
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        # a launcher that failed unexpectedly leaves the other waiting: stop it
        if any(p.returncode not in (None, 0) for p in procs):
            break
        time.sleep(0.5)
    hung = any(p.poll() is None for p in procs)
    for p in procs:
        if p.poll() is None:
            p.kill()
    subprocess.run(["pkill", "-9", "-f", str(exp)], check=False)  # workers left behind
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    if hung:
        raise Hung("\n".join(text[-3000:] for text in outputs))
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-4000:]
    results = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
    return results, "\n".join(outputs)


@pytest.fixture(scope="module")
def data(synthetic_corpus, tmp_path_factory) -> Path:
    """12 short utterances as 4 shards of 3: the nodes train from shards (no shared files
    but the shards, which a node could as well read over http)."""
    from wenet_lite.data.shar_writer import write_shards

    cuts = load_cuts(synthetic_corpus.data / "train-clean-100")
    root = tmp_path_factory.mktemp("nodes")
    write_shards(sorted(cuts, key=lambda c: c.duration)[:12], root / "train", 3, progress=False)
    (root / "cmvn.json").write_bytes((synthetic_corpus.data / "cmvn.json").read_bytes())
    return root


def test_two_nodes_train_in_lockstep_and_a_restart_resumes_exactly(synthetic_corpus, data,
                                                                   tmp_path) -> None:  # fmt: skip
    tok = synthetic_corpus.tokenizer
    whole = tmp_path / "whole"
    (tmp_path / "out1").mkdir()
    ranks, output = _two_nodes(data, whole, tmp_path / "out1", tok, ["train.max_steps=8"],
                               store={})  # torchrun's shared store: rank 0 warns  # fmt: skip
    assert "Start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in output
    assert ranks[0]["digest"] == ranks[1]["digest"] and ranks[0]["step"] == 8
    assert len(ranks[0]["steps"]) == 8 and ranks[0]["steps"] == ranks[1]["steps"]  # every step
    assert len(set(ranks[0]["steps"])) == 8  # the weights change each step
    assert {r["node"] for r in ranks} == {"0", "1"}
    saves = [x for x in (whole / "train.log").read_text().splitlines() if " saved " in x]
    assert len(saves) == len(set(saves)) and saves[-1].endswith("step_8.pt")  # rank 0 alone

    cut = tmp_path / "cut"  # stopped at step 4, then started again: no --resume given
    (tmp_path / "out2").mkdir()
    _two_nodes(data, cut, tmp_path / "out2", tok, ["train.max_steps=4"])
    ranks, output = _two_nodes(data, cut, tmp_path / "out2", tok, ["train.max_steps=8"])
    assert (
        "torchrun restarted the workers (restart 0): resuming from the newest checkpoint" in output
    )
    assert f"resuming from {cut / 'step_4.pt'}" in output
    assert ranks[0]["digest"] == ranks[1]["digest"]
    first = json.loads((tmp_path / "out1" / "rank0.json").read_text())
    assert ranks[0]["digest"] == first["digest"]  # exactly the uninterrupted run's weights


def test_two_nodes_train_the_hybrid_heads_in_lockstep(synthetic_corpus, data, tmp_path) -> None:
    """The transducer head and CR-CTC's two views across two nodes: every step's weights
    equal on both ranks, and they change each step."""
    (tmp_path / "out").mkdir()
    heads = ["train.max_steps=4", "model.transducer_weight=0.75", "model.cr_ctc_weight=0.2",
             "specaug.enabled=true", "specaug.start_step=0"]  # fmt: skip
    ranks, output = _two_nodes(data, tmp_path / "hybrid", tmp_path / "out",
                               synthetic_corpus.tokenizer, heads)  # fmt: skip
    assert ranks[0]["digest"] == ranks[1]["digest"] and ranks[0]["step"] == 4
    assert ranks[0]["steps"] == ranks[1]["steps"] and len(set(ranks[0]["steps"])) == 4
    assert "transducer" in (tmp_path / "hybrid" / "train.log").read_text()


def _children(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (a torchrun agent's workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_node_killed_mid_run_restarts_the_job_from_its_checkpoint(
    synthetic_corpus, data, tmp_path
) -> None:
    """torchrun with --max-restarts: node 1's training process is killed (a lost machine)
    after the step 4 checkpoint; both nodes restart, resume from the newest checkpoint with
    no manual step and end with the weights of an uninterrupted run."""
    import signal

    tok = synthetic_corpus.tokenizer
    (tmp_path / "out1").mkdir()
    whole, _ = _two_nodes(data, tmp_path / "whole", tmp_path / "out1", tok,
                          ["train.max_steps=16"])  # fmt: skip
    exp = tmp_path / "killed"
    killed: List[int] = []

    def kill_node_1(procs) -> None:  # noqa: ANN001
        deadline = time.monotonic() + 120
        while not (exp / "step_4.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _children(procs[1].pid)
        assert workers, "node 1 has no training process"
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        killed.extend(workers)

    (tmp_path / "out2").mkdir()
    ranks, output = _two_nodes(data, exp, tmp_path / "out2", tok, ["train.max_steps=16"],
                               during=kill_node_1, pause=0.3, limit=90)  # fmt: skip
    assert killed
    assert "resuming from the newest checkpoint" in output
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in output  # a store of its own each start
    # The lost node's agent counts a restart; the other restarts its worker for the new
    # membership, which torchrun does not count. Both resume by themselves.
    assert max(r["restart"] for r in ranks) >= 1 and ranks[0]["step"] == ranks[1]["step"] == 16
    assert ranks[0]["digest"] == ranks[1]["digest"] == whole[0]["digest"]


def test_a_checkpoint_of_two_ranks_resumes_on_one(synthetic_corpus, data, tmp_path) -> None:
    """An elastic job that lost a node resumes on fewer ranks: the same epoch, past the same
    share of its batches (drawn for the ranks left), with a warning that says so."""
    from wenet_lite.train.trainer import TrainOptions, train

    (tmp_path / "out").mkdir()
    exp = tmp_path / "exp"
    _two_nodes(data, exp, tmp_path / "out", synthetic_corpus.tokenizer, ["train.max_steps=8"])
    result = train(TrainOptions(Path("conf/tiny_test.yaml"), data, exp,
                                (*SETTINGS, "train.max_steps=10"), ("train",), (),
                                tokenizer=synthetic_corpus.tokenizer, resume=True,
                                progress_bar=False, device="cpu"))  # fmt: skip
    assert result.step == 10
    log = (exp / "train.log").read_text()
    assert f"{exp / 'step_8.pt'} was written by 2 rank(s), this run has 1" in log


def test_ranks_take_rank_0s_checkpoint_or_stop_naming_it(tmp_path, monkeypatch) -> None:
    """Rank 1 of two, with rank 0's answer broadcast (stood in for here): it resumes from the
    file rank 0 named when it can read it, and stops naming it when its storage lacks it."""
    import torch.distributed as dist

    from wenet_lite.train.dist import DistInfo
    from wenet_lite.train.resume import agreed_checkpoints

    rank0 = [["step_2.pt", "step_4.pt"], True]  # what rank 0 sees and decides

    def broadcast(objects, src):  # noqa: ANN001
        assert src == 0
        objects[:] = rank0

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    info = DistInfo(rank=1, world_size=2, local_rank=0, device=__import__("torch").device("cpu"))
    (tmp_path / "step_4.pt").write_bytes(b"")  # shared storage: the file is there
    found, resume = agreed_checkpoints(tmp_path, False, info)
    assert [p.name for p in found] == ["step_2.pt", "step_4.pt"] and resume  # rank 0's choice
    (tmp_path / "step_4.pt").unlink()  # storage the nodes do not share
    with pytest.raises(FileNotFoundError, match=f"rank 1 .* cannot read {tmp_path / 'step_4.pt'}"):
        agreed_checkpoints(tmp_path, False, info)
    rank0[1] = False  # not resuming: a missing file does not matter
    assert agreed_checkpoints(tmp_path, False, info)[1] is False
