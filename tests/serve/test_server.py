"""`wenet-lite serve` as users meet it: a real server process on 127.0.0.1, clients of both
protocols streaming test audio in small random pieces, all at once (so streams of different
connections share batches); the final transcripts equal `wenet-lite stream --json` of the same
files, and bad clients get a clear close reason without harm to the others."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.serve.conftest import (
    _LISTENING,
    ServerProcess,
    sherpa_finals,
    sherpa_session,
    start_process,
    start_server,
    wenet_finals,
    wenet_session,
)
from wenet_lite.data.manifest import load_cuts

SHERPA_KEYS = ["text", "tokens", "timestamps", "ys_probs", "lm_probs", "context_scores",
               "segment", "words", "start_time", "is_final", "is_eof"]  # fmt: skip


@pytest.fixture(scope="module")
def files(corpus: Path, test_audio, tmp_path_factory) -> Dict[str, np.ndarray]:
    """Four test utterances (FLAC) and one WAV of two utterances 3 s apart (two segments
    with endpointing), each with the samples the server is sent."""
    cuts = list(load_cuts(corpus / "test-clean"))
    chosen = {str(c.recording.sources[0].source): a for c, a in zip(cuts[:4], test_audio)}
    quiet = np.random.default_rng(0).normal(0, 10 ** (-70 / 20), 3 * 16000)
    joined = np.concatenate([test_audio[4], quiet, test_audio[5]])
    joined = np.round(joined * 32768).clip(-32768, 32767) / 32768  # exact in 16-bit PCM
    path = tmp_path_factory.mktemp("serve") / "two_utterances.wav"
    sf.write(path, joined, 16000, subtype="PCM_16")
    chosen[str(path)] = joined.astype(np.float32)
    return chosen


def stream_reference(capsys, model: Path, paths, *flags: str) -> Dict[str, List[dict]]:
    """`wenet-lite stream --json` of the files: each file's non-empty final segments."""
    from wenet_lite.cli import main

    capsys.readouterr()
    assert main(["stream", "--model", str(model), "--json", *flags, *paths]) == 0
    finals: Dict[str, List[dict]] = defaultdict(list)
    for line in capsys.readouterr().out.splitlines():
        record = json.loads(line)
        if record["type"] == "final" and record["text"]:
            finals[record["file"]].append(record)
    return finals


async def _all_sessions(url: str, files: Dict[str, np.ndarray]):
    names = list(files)
    sessions = await asyncio.gather(
        *[sherpa_session(url, files[n], seed=i, pace=0.01) for i, n in enumerate(names)],
        *[wenet_session(url, files[n], seed=10 + i, pace=0.01) for i, n in enumerate(names)],
    )
    return dict(zip(names, sessions[: len(names)])), dict(zip(names, sessions[len(names) :]))


def _check_against_reference(sherpa, wenet, reference) -> None:
    for name, ref in reference.items():
        texts = [r["text"] for r in ref]
        assert sherpa_finals(sherpa[name].messages) == texts, name
        best = wenet_finals(wenet[name].messages)
        assert [b["sentence"] for b in best] == texts, name
        for b, r in zip(best, ref):
            ref_words = [
                (w["word"], round(w["start"] * 1000), round(w["end"] * 1000)) for w in r["words"]
            ]
            assert [(w["word"], w["start"], w["end"]) for w in b["word_pieces"]] == ref_words
            assert [w["confidence"] for w in b["word_pieces"]] == [
                w["confidence"] for w in r["words"]
            ]
        closed = [m for m in sherpa[name].messages if isinstance(m, dict) and m["is_final"]]
        closed = [m for m in closed if m["text"]]
        assert len(closed) == len(ref)
        for m, r in zip(closed, ref):  # each token's log confidence: words' means agree
            assert len(m["ys_probs"]) == len(m["tokens"]) and all(p <= 0 for p in m["ys_probs"])
            words: List[List[float]] = []
            for piece, logp in zip(m["tokens"], m["ys_probs"]):
                if piece.startswith("\u2581") or not words:
                    words.append([])
                words[-1].append(math.exp(logp))
            sure = [sum(w) / len(w) for w in words]
            assert sure == pytest.approx([w["confidence"] for w in r["words"]], abs=2e-3)


def test_both_protocols_give_the_transcripts_of_stream(server: ServerProcess, tiny, files, capsys):
    flags = ("--chunk-size", "4", "--left-chunks", "-1")  # the server fixture's
    reference = stream_reference(capsys, tiny.path, files, *flags)
    assert all(reference.values()) and len(reference) == len(files)
    assert len(reference[next(n for n in files if n.endswith(".wav"))]) == 2, "endpoint not hit"
    sherpa, wenet = asyncio.run(_all_sessions(server.url, files))
    _check_against_reference(sherpa, wenet, reference)
    for session in sherpa.values():  # sherpa-onnx's C++ server's messages, in order
        *results, done = session.messages
        assert done == "Done!" and session.close_code == 1000
        assert all(list(m) == SHERPA_KEYS for m in results)
        assert results[-1]["is_eof"] and results[-1]["is_final"]
        assert not any(m["is_eof"] for m in results[:-1])
        assert any(not m["is_final"] and m["text"] for m in results), "no partial result"
        segments = [m["segment"] for m in results]
        assert segments == sorted(segments)
        for m in results:
            assert len(m["timestamps"]) == len(m["tokens"])
            assert all(0 <= t for t in m["timestamps"]) and m["start_time"] >= 0
    for session in wenet.values():
        types = [m["type"] for m in session.messages]
        assert types[-1] == "speech_end" and types[-2] == "final_result", types
        assert "partial_result" in types and session.close_code == 1000
    log = server.wait_log(r"[1-9]\d* steps, mean batch (\d+\.\d)")  # (a line with steps)
    assert float(log.group(1)) >= 1.0
    assert server.health()["errors"] == 0


def test_word_lm_without_endpointing_gives_the_transcripts_of_stream(
    tiny, corpus, files, tmp_path, capsys
):
    from wenet_lite.data.manifest import cut_text
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.search.lm import WordLM

    lm = WordLM.train(normalize_text(cut_text(c)) for c in load_cuts(corpus / "train-clean-100"))
    lm.save(tmp_path / "lm.json")
    flags = ["--chunk-size", "4", "--mode", "prefix_beam", "--beam", "4",
             "--lm", str(tmp_path / "lm.json"), "--no-endpoint"]  # fmt: skip
    reference = stream_reference(capsys, tiny.path, files, *flags)
    s = start_server(tiny.path, *flags)
    try:
        sherpa, wenet = asyncio.run(_all_sessions(s.url, files))
    finally:
        assert s.stop() == 0, s.log()
    assert all(len(ref) == 1 for ref in reference.values())
    _check_against_reference(sherpa, wenet, reference)


def test_hotwords_of_the_server_and_of_a_session(tiny, corpus, files, tmp_path, capsys):
    """The server's list (--hotwords) for every stream; a WeNet client's own list in its start
    signal is added to it for its session: each as `stream --hotwords` with those phrases."""
    from wenet_lite.data.manifest import cut_text

    words = sorted({w for c in load_cuts(corpus / "test-clean") for w in cut_text(c).split()})
    lines = [w.lower() for w in words[::2]] + [f"{words[1]} {words[3]} :4"]
    served, own = lines[::2], lines[1::2]
    (tmp_path / "served.txt").write_text("\n".join(served) + "\n")
    (tmp_path / "all.txt").write_text("\n".join(served + own) + "\n")
    flags = ["--chunk-size", "4", "--mode", "prefix_beam", "--beam", "4", "--hotwords-score",
             "3", "--no-endpoint"]  # fmt: skip
    ref_served = stream_reference(
        capsys, tiny.path, files, *flags, "--hotwords", str(tmp_path / "served.txt")
    )
    ref_all = stream_reference(
        capsys, tiny.path, files, *flags, "--hotwords", str(tmp_path / "all.txt")
    )
    assert ref_served != ref_all, "the session's phrases should change a transcript"
    s = start_server(tiny.path, *flags, "--hotwords", str(tmp_path / "served.txt"))

    async def run():
        names = list(files)
        return await asyncio.gather(
            *[sherpa_session(s.url, files[n], seed=i, pace=0.01) for i, n in enumerate(names)],
            *[wenet_session(s.url, files[n], seed=i, pace=0.01, hotwords=own)
              for i, n in enumerate(names)],
        )  # fmt: skip

    try:
        sessions = asyncio.run(run())
    finally:
        assert s.stop() == 0, s.log()
    for name, sherpa, wenet in zip(files, sessions[: len(files)], sessions[len(files) :]):
        assert sherpa_finals(sherpa.messages) == [r["text"] for r in ref_served[name]]
        assert [b["sentence"] for b in wenet_finals(wenet.messages)] == [
            r["text"] for r in ref_all[name]
        ]


async def _raw(url: str, *messages, expect_message: bool = False):
    """Send messages, return (the server's messages, close code, close reason)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(url, max_size=None) as ws:
        got = []
        try:
            for m in messages:
                await ws.send(m)
            async for m in ws:
                got.append(m)
        except ConnectionClosed:
            pass
        return got, ws.close_code, ws.close_reason


def test_bad_messages_close_only_their_connection(server: ServerProcess, files):
    name = next(iter(files))
    url = server.url
    big = np.zeros(30000, "<f4").tobytes()  # 120 kB > --max-message-size 100000
    nan = np.array([0.1, np.nan, 0.2], "<f4").tobytes()
    start = json.dumps({"signal": "start"})

    async def run():
        before = server.health()["errors"]
        good = sherpa_session(url, files[name], seed=3, pace=0.01)
        bad = [
            _raw(url, b"\x00" * 6),
            _raw(url, nan),
            _raw(url, "hello"),
            _raw(url, big),
            _raw(url + "/wenet", b"\x00\x00"),
            _raw(url + "/wenet", "not json"),
            _raw(url + "/wenet", json.dumps({"signal": "stop"})),
            _raw(url + "/wenet", start, start),
            _raw(url + "/wenet", json.dumps({"signal": "start", "hotwords": "HELLO"})),
            _raw(url + "/wenet", json.dumps({"signal": "start", "hotwords": ["HELLO"]})),
        ]  # fmt: skip
        return before, await asyncio.gather(good, *bad)

    before, (good, *bad) = asyncio.run(run())
    codes = [(code, reason) for _, code, reason in bad]
    assert codes[0][0] == 1007 and "6 bytes is not float32" in codes[0][1]
    assert codes[1][0] == 1007 and "sample 1" in codes[1][1] and "finite" in codes[1][1]
    assert codes[2][0] == 1003 and "'hello'" in codes[2][1] and "Done" in codes[2][1]
    assert codes[3][0] == 1009  # websockets: message too big
    assert codes[4][0] == 1008 and "Start signal is expected" in codes[4][1]
    assert json.loads(bad[4][0][0]) == {"status": "failed", "message": codes[4][1]}
    assert codes[5][0] == 1003 and "not JSON" in codes[5][1]
    assert codes[6][0] == 1003 and "'stop'" in codes[6][1]
    assert codes[7][0] == 1003 and "second start" in codes[7][1]
    assert json.loads(bad[7][0][0])["type"] == "server_ready"
    assert codes[8][0] == 1003 and "hotwords must be a list of strings" in codes[8][1]
    assert codes[9][0] == 1003 and "hotwords need a beam search" in codes[9][1]
    assert json.loads(bad[9][0][0])["status"] == "failed"
    assert good.messages[-1] == "Done!" and sherpa_finals(good.messages)
    assert server.health()["errors"] - before == 9  # the oversized message is websockets' own
    server.wait_log(r"error: a binary message of 6 bytes")


def test_vanished_and_silent_clients(server: ServerProcess, files):
    from websockets.asyncio.client import connect

    audio = next(iter(files.values()))

    async def vanish():
        ws = await connect(server.url)
        await ws.send(audio[:16000].astype("<f4").tobytes())
        await asyncio.sleep(0.3)
        ws.transport.abort()  # no close handshake: the client is just gone

    before = server.health()
    asyncio.run(vanish())
    server.wait_log(r"left mid-stream")
    # A client that never sends 'Done': after --idle-timeout 3 s its input is ended; it still
    # gets its results, 'Done!' and a close reason.
    silent = asyncio.run(sherpa_session(server.url, audio, end=False))
    assert silent.messages[-1] == "Done!" and silent.messages[-2]["is_eof"]
    assert silent.close_code == 1000 and "idle for 3 s" in silent.close_reason
    after = server.health()
    assert after["vanished"] == before["vanished"] + 1 and after["idle"] == before["idle"] + 1
    assert after["open_streams"] == 0


def test_connection_limit_health_and_pages(server: ServerProcess):
    import urllib.error
    import urllib.request

    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async def crowd():
        held = [await connect(server.url) for _ in range(24)]
        try:
            with pytest.raises(InvalidStatus) as refused:
                await connect(server.url)
            return refused.value.response
        finally:
            for ws in held:
                await ws.close()

    response = asyncio.run(crowd())
    assert response.status_code == 503 and b"limit of 24 connections" in response.body
    assert server.health()["refused"] >= 1
    page = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10)
    assert page.headers["Content-Type"].startswith("text/html") and b"app.js" in page.read()
    for path in ("/app.js", "/capture-worklet.js"):
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}").status == 200
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nothing")
    assert missing.value.code == 404

    async def wrong_path():
        with pytest.raises(InvalidStatus) as e:
            await connect(server.url + "/asr")
        return e.value.response

    assert asyncio.run(wrong_path()).status_code == 404


def test_the_log_says_what_loads_before_it_listens(server: ServerProcess, tiny):
    log = server.log()
    loading = log.index(f"loading {tiny.path} (chunk 4, left -1, engine torch, precision auto)")
    assert loading < _LISTENING.search(log).start()


def test_sigterm_finishes_open_streams(tiny, files):
    s = start_server(tiny.path, "--chunk-size", "4")
    audio = next(iter(files.values()))

    async def run():
        session = asyncio.create_task(sherpa_session(s.url, audio, end=False, pace=0.02))
        await asyncio.sleep(1.0)  # mid-stream
        s.proc.send_signal(signal.SIGTERM)
        return await session

    try:
        session = asyncio.run(run())
    finally:
        code = s.proc.wait(timeout=60)  # the SIGTERM was sent: it exits by itself
    assert code == 0, s.log()
    assert session.close_code == 1001 and session.close_reason == "server shutting down"
    assert session.messages[-1] == "Done!" and session.messages[-2]["is_eof"]
    assert "shutting down: finishing 1 open stream(s)" in s.log()


@pytest.mark.slow
def test_two_thousand_short_connections_keep_memory_flat(server: ServerProcess, files):
    audio = next(iter(files.values()))[:8000]

    async def run(n: int):
        for _ in range(n // 8):
            await asyncio.gather(*[sherpa_session(server.url, audio, seed=i) for i in range(8)])

    asyncio.run(run(200))  # warm: allocator pools, caches
    before = server.rss_kb()
    asyncio.run(run(2000))
    after = server.rss_kb()
    print(f"server RSS after 200 connections {before} kB, after 2,000 more {after} kB")
    assert after <= 1.10 * before
    assert server.health()["open_streams"] == 0


def test_two_workers_share_the_port(tiny, files, capsys):
    reference = stream_reference(capsys, tiny.path, files, "--chunk-size", "4")
    s = start_server(tiny.path, "--chunk-size", "4", "--jobs", "2", "--max-connections", "4",
                     "--max-connections-per-peer", "0")  # fmt: skip
    try:
        sherpa, wenet = asyncio.run(_all_sessions(s.url, dict(list(files.items())[:2])))
        _check_against_reference(sherpa, wenet, {n: reference[n] for n in sherpa})
        assert len(s.health()["workers"]) == 2
        s.wait_log(r"worker 1: listening")
    finally:
        code = s.stop()
    assert code == 0, s.log()
    assert "worker 0: stopped" in s.log() and "worker 1: stopped" in s.log()


def test_two_workers_take_connections_by_load(tiny):
    """Connections opened one after another alternate between the workers (each accepts while
    it holds no more than the other, serve/accept.py), and /health names each one's."""
    from websockets.asyncio.client import connect

    s = start_server(tiny.path, "--chunk-size", "4", "--jobs", "2")
    try:
        s.wait_log(r"worker 1: listening")
        s.wait_log(r"worker 0: listening")

        async def hold(n: int) -> List[int]:
            opened = []
            for _ in range(n):
                opened.append(await connect(s.url))
            counts = [w["open_connections"] for w in s.health()["workers"]]
            for c in opened:
                await c.close()
            return counts

        counts = asyncio.run(hold(16))  # and /health's own request, in one of them
        assert sum(counts) == 17 and max(counts) - min(counts) <= 1, counts
    finally:
        code = s.stop()
    assert code == 0, s.log()


def test_workers_that_make_their_own_recognizer_serve_the_transcripts(tiny, files, capsys):
    """serve() given a function that makes the recogniser (what `serve --device cuda --jobs
    N` gives it: a CUDA context cannot cross the fork, so each worker puts its own copy of the
    model on the GPU): each worker calls it after the fork, and serves what `stream` gives."""
    some = dict(list(files.items())[:2])
    reference = stream_reference(capsys, tiny.path, some, "--chunk-size", "4")
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, format='%(message)s'); "
        "from wenet_lite.model.chunking import Chunking; "
        "from wenet_lite.recognizer import open_recognizer; "
        "from wenet_lite.serve import ServerOptions, serve; "
        f"make = lambda: open_recognizer({str(tiny.path)!r}, Chunking(4, 4)); "
        "sys.exit(serve(make, ServerOptions(host='127.0.0.1', port=0, workers=2)))"
    )
    s = start_process([sys.executable, "-c", code])
    _two_workers_serve(s, some, reference)
    assert "worker 0: making its recognizer" in s.log()


def _two_workers_serve(s: ServerProcess, some, reference) -> None:
    """Both workers up, the files' sessions equal to ``reference``, a clean stop; each worker
    made its own recognizer."""
    try:
        s.wait_log(r"worker 1: listening")
        sherpa, wenet = asyncio.run(_all_sessions(s.url, some))
        _check_against_reference(sherpa, wenet, {n: reference[n] for n in sherpa})
    finally:
        assert s.stop() == 0, s.log()
    assert "worker 1: making its recognizer" in s.log()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_workers_on_a_gpu_serve_the_cpu_transcripts(tiny, files, capsys):
    """`serve --device cuda --jobs 2`: no CUDA in the parent, each worker's own on the GPU."""
    some = dict(list(files.items())[:2])
    reference = stream_reference(capsys, tiny.path, some, "--chunk-size", "4")
    s = start_server(tiny.path, "--chunk-size", "4", "--device", "cuda", "--jobs", "2")
    _two_workers_serve(s, some, reference)


def test_onnxruntime_engine_serves_the_torch_transcripts(tiny, files, capsys):
    flags = ["--chunk-size", "4", "--left-chunks", "2"]
    some = dict(list(files.items())[-2:])
    reference = stream_reference(capsys, tiny.path, some, *flags)
    s = start_server(tiny.path, *flags, "--engine", "onnxruntime", "--jobs", "2")
    try:
        sherpa, wenet = asyncio.run(_all_sessions(s.url, some))
    finally:
        assert s.stop() == 0, s.log()
    _check_against_reference(sherpa, wenet, reference)


def test_an_executorch_export_directory_serves_the_transcripts_of_stream(
    tiny, files, tmp_path, capsys
):
    """`serve --model DIR` (two forked workers) on the executorch engine, no model file."""
    pytest.importorskip("executorch")
    from wenet_lite.cli import main

    out = tmp_path / "et"
    flags = ["--chunk-size", "4", "--left-chunks", "2"]
    assert main(["export", "--model", str(tiny.path), "--format", "executorch", "--out",
                 str(out), *flags]) == 0  # fmt: skip
    some = dict(list(files.items())[-2:])
    reference = stream_reference(capsys, tiny.path, some, *flags)
    texts = {f: [r["text"] for r in records] for f, records in reference.items()}
    from_dir = stream_reference(capsys, out, some)
    assert {f: [r["text"] for r in records] for f, records in from_dir.items()} == texts
    s = start_server(out, "--workers", "2")
    try:
        sherpa, wenet = asyncio.run(_all_sessions(s.url, some))
    finally:
        assert s.stop() == 0, s.log()
    _check_against_reference(sherpa, wenet, reference)


def test_attention_rescoring_serves_the_transcripts_of_stream(tiny_u2, files, capsys):
    """Finals rescored by the decoder, with endpoints (two segments in the longest file)."""
    flags = ["--chunk-size", "4", "--mode", "attention_rescoring", "--beam", "4"]
    reference = stream_reference(capsys, tiny_u2.path, files, *flags)
    ctc = stream_reference(capsys, tiny_u2.path, files, *flags[:2], "--mode", "prefix_beam",
                           "--beam", "4")  # fmt: skip
    assert reference != ctc, "the random decoder should overturn some of CTC's choices"
    s = start_server(tiny_u2.path, *flags)
    try:
        sherpa, wenet = asyncio.run(_all_sessions(s.url, files))
    finally:
        assert s.stop() == 0, s.log()
    _check_against_reference(sherpa, wenet, reference)


def test_a_busy_port_is_one_line(tiny, capsys):
    import socket

    from wenet_lite.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(tiny.path), "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in err[0]
