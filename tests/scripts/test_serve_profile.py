"""benchmarks/serve_profile.py sorts py-spy's stacks of a server into the parts of a stream step;
bench_serve.py --profile records them with py-spy and prints the table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import corpus, tiny  # noqa: F401 - shared fixtures

ROOT = Path(__file__).resolve().parents[2]
SITE = "/venv/lib/python3.11/site-packages"
THREAD = ("Thread.run (/usr/lib/python3.11/threading.py:982);_WorkItem.run "
          "(/usr/lib/python3.11/concurrent/futures/thread.py:58);DecodeThread.step "
          "(wenet_lite/serve/decode_thread.py:67)")  # fmt: skip
DECODE = f"{THREAD};StreamingRecognizer.decode_streams (wenet_lite/runtime/streaming.py:460)"
LOOP = ("BaseEventLoop.run_forever (/usr/lib/python3.11/asyncio/base_events.py:607);"
        "BaseEventLoop._run_once (/usr/lib/python3.11/asyncio/base_events.py:1922)")  # fmt: skip


@pytest.mark.parametrize(
    "stack, part",
    [
        (f"{DECODE};ConformerEncoder.forward_chunk (wenet_lite/model/conformer.py:1)", "encoder"),
        (f"{DECODE};TorchEngine.run (wenet_lite/runtime/engines.py:9)", "encoder"),
        (f"{DECODE};compute_ready (wenet_lite/features/stream_fbank.py:200)", "features"),
        (f"{DECODE};StateList.gather (wenet_lite/model/state.py:280);stack_states "
         "(wenet_lite/model/state.py:120)", "states"),
        (f"{DECODE};CtcGreedy.step (wenet_lite/search/stream_search.py:5)", "search"),
        (f"{THREAD};DecodeThread._messages (wenet_lite/serve/decode_thread.py:170);"
         "sherpa_result (wenet_lite/serve/protocols.py:110)", "results"),
        (f"{THREAD};DecodeThread._feed (wenet_lite/serve/decode_thread.py:109)",
         "feeding and step"),
        (f"{LOOP};Protocol.parse ({SITE}/websockets/protocol.py:1)", "protocol"),
        (f"{LOOP};Handle._run (/usr/lib/python3.11/asyncio/events.py:80)", "event loop"),
        (f"{LOOP};EpollSelector.select (/usr/lib/python3.11/selectors.py:468)", "idle"),
        ("Thread.run (/usr/lib/python3.11/threading.py:982);_worker "
         "(/usr/lib/python3.11/concurrent/futures/thread.py:81)", "idle"),
        ("serve (wenet_lite/serve/server.py:389);supervise (wenet_lite/serve/workers.py:157)",
         "idle"),
        ("", "other"),
    ],
)  # fmt: skip
def test_each_stack_goes_to_its_part(load_tool, stack: str, part: str) -> None:
    sp = load_tool("serve_profile")
    line = f'process 7:"python -m wenet_lite serve";{stack} 3' if stack else 'process 7:"x" 3'
    (frames, count), = sp.read_raw_lines([line])  # fmt: skip
    assert count == 3 and not any(f.startswith("process ") for f in frames)
    assert sp.part_of(frames) == part


def test_read_raw_strips_install_paths_and_counts_parts(load_tool, tmp_path: Path) -> None:
    sp = load_tool("serve_profile")
    raw = tmp_path / "s.raw"
    raw.write_text(
        f"{DECODE};Linear.forward (wenet_lite/model/linear.py:37) 30\n"
        f"{LOOP};Frame.parse ({SITE}/websockets/frames.py:3) 10\n"
        f"{LOOP};EpollSelector.select (/usr/lib/python3.11/selectors.py:468) 60\n"
        "a line that is not a stack\n"
    )
    stacks = sp.read_raw([raw])
    assert any("(websockets/frames.py:3)" in f for frames, _ in stacks for f in frames)
    counts = sp.shares(stacks)
    assert (counts["encoder"], counts["protocol"], counts["idle"]) == (30, 10, 60)
    text = sp.table({"a": counts}, rate=10.0, seconds={"a": 2.0})
    assert "| encoder | 75.0 %, 1.50 |" in text  # 30 of 40 busy samples; 30 / 10 Hz / 2 s
    assert "| idle | 3.00 threads |" in text
    assert "| busy in all | 100 %, 2.00 |" in text


def _py_spy_works() -> bool:
    """py-spy installed and allowed to read another process (ptrace)."""
    if shutil.which("py-spy") is None:
        return False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = subprocess.run(["py-spy", "dump", "--pid", str(child.pid)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        return out.returncode == 0
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_bench_serve_profiles_the_server(tiny, corpus, tmp_path: Path) -> None:  # noqa: F811
    if not _py_spy_works():
        pytest.skip("py-spy is not installed or may not read other processes (ptrace)")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_serve.py"), "--data",
           str(corpus / "test-clean"), "--clients", "4", "--seconds", "3", "--ramp", "0.2",
           "--serve", f"tiny={tiny.path}::--chunk-size 4 --left-chunks 2 --jobs 2",
           "--serve-flags", "", "--profile", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tiny-4.raw").stat().st_size > 0
    assert "Where each server's time went at N=4" in out.stdout
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("| ") and "%" in line}  # fmt: skip
    encoder = float(rows["encoder"].split("|")[2].split("%")[0])
    assert encoder > 0, out.stdout  # the workers' decode threads were sampled


@pytest.mark.parametrize(
    "script, args, code, message",
    [
        ("serve_profile.py", ["{t}/none.raw", "--seconds", "1"], 2, "{t}/none.raw: no such py-spy"),
        ("serve_profile.py", ["{t}/s.raw", "--seconds", "1", "--rate", "0"], 2, "--rate 0.0: give"),
        ("serve_profile.py", ["{t}/s.raw", "--seconds", "nan"], 2, "--seconds nan: give how long"),
        ("bench_serve.py", ["--data", "{t}", "--profile", "{t}", "--profile-rate", "0"], 2,
         "--profile-rate 0: give py-spy's samples a second"),
        ("bench_serve.py", ["--data", "{t}", "--profile", "{t}", "--py-spy", "{t}/no-spy"], 1,
         "--profile needs py-spy ({t}/no-spy not found"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_it(tmp_path: Path, script, args, code, message) -> None:
    (tmp_path / "s.raw").write_text("")
    cmd = [sys.executable, str(ROOT / "benchmarks" / script),
           *(a.format(t=tmp_path) for a in args)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == code and "Traceback" not in out.stderr, out.stderr
    assert message.format(t=tmp_path) in out.stderr.strip().splitlines()[-1]  # the last line
