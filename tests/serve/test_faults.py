"""`wenet-lite serve` under hostile and unlucky clients: a real server process on 127.0.0.1 and
clients on bare sockets that flood, drip, ping without reading or never start their protocol,
a worker killed with SIGKILL, TLS, origins and tokens. Good sessions streaming beside each
probe must keep `wenet-lite stream`'s exact transcript."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from tests.serve.conftest import (
    RawClient,
    ServerProcess,
    sherpa_finals,
    sherpa_session,
    start_server,
    wenet_finals,
    wenet_session,
)
from tests.serve.test_server import files  # noqa: F401 - the module fixture

TEXT, BINARY, CLOSE, PING = 1, 2, 8, 9


@pytest.fixture(scope="module")
def reference(tiny, files) -> Dict[str, List[str]]:  # noqa: F811
    """`wenet-lite stream --json --chunk-size 4` of the files: each file's final texts."""
    from wenet_lite.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["stream", "--model", str(tiny.path), "--json", "--chunk-size", "4",
                     *files]) == 0  # fmt: skip
    finals: Dict[str, List[str]] = defaultdict(list)
    for line in out.getvalue().splitlines():
        record = json.loads(line)
        if record["type"] == "final" and record["text"]:
            finals[record["file"]].append(record["text"])
    return finals


async def _good(url: str, files, pace: float = 0.03, **connect) -> Dict[str, list]:  # noqa: F811
    """One sherpa-onnx and one WeNet session per file, paced; each file's final texts."""
    names = list(files)[:2]
    sessions = await asyncio.gather(
        *[sherpa_session(url, files[n], seed=i, pace=pace, **connect) for i, n in
          enumerate(names)],
        *[wenet_session(url, files[n], seed=5 + i, pace=pace, **connect) for i, n in
          enumerate(names)],
    )  # fmt: skip
    texts = {}
    for n, s in zip(names, sessions[: len(names)]):
        texts[("sherpa", n)] = sherpa_finals(s.messages)
    for n, s in zip(names, sessions[len(names) :]):
        texts[("wenet", n)] = [b["sentence"] for b in wenet_finals(s.messages)]
    return texts


def _check(texts: Dict, reference: Dict[str, List[str]]) -> None:
    for (protocol, name), got in texts.items():
        assert got == reference[name], (protocol, name)


def _wait_health(s: ServerProcess, check, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        h = s.health()
        if check(h) or time.monotonic() > deadline:
            return h
        time.sleep(0.1)


def _stop_within(s: ServerProcess, seconds: float) -> float:
    start = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=seconds) == 0, s.log()
    return time.monotonic() - start


def test_a_client_that_never_starts_its_protocol_harms_no_one(tiny, files, reference):  # noqa: F811
    """A /wenet client that upgrades and never sends its start signal is closed after the idle
    timeout (1008) while good sessions stream; later sessions work; SIGTERM ends promptly."""
    s = start_server(tiny.path, "--chunk-size", "4", "--idle-timeout", "1.5")
    try:
        silent = RawClient(s.port, "/wenet")
        gone = RawClient(s.port, "/wenet")
        assert silent.status == gone.status == 101
        gone.close()  # ends before its protocol started

        async def run():
            closed = asyncio.to_thread(silent.read_close, 20)
            return await asyncio.gather(closed, _good(s.url, files, pace=0.08))

        code, during = asyncio.run(run())
        assert code == 1008
        s.wait_log(r"no start signal within 1.5 s")
        _check(during, reference)
        _check(asyncio.run(_good(s.url, files)), reference)  # the server still decodes
        h = _wait_health(s, lambda h: h["open_streams"] == 0)
        assert h["open_streams"] == 0 and h["status"] == "ok" and h["failed"] == 0, h
        print(f"SIGTERM to exit: {_stop_within(s, 10):.2f} s")
    finally:
        s.proc.kill()


@pytest.mark.slow
def test_a_flooding_client_is_held_back_by_tcp(tiny, files, reference):  # noqa: F811
    """A client sending audio as fast as it can for 10 s: reading its socket pauses, memory
    stays bounded, good sessions keep their transcripts, and the flood itself is decoded to
    the end at the server's speed."""
    s = start_server(tiny.path, "--chunk-size", "4", "--idle-timeout", "30")
    audio = np.concatenate(list(files.values())).astype("<f4")
    sent = [0]

    def flood(seconds: float) -> int:
        c = RawClient(s.port, "/")
        c.sock.settimeout(0.5)
        frames = [c.frame(BINARY, audio[i : i + 8000].tobytes()) for i in
                  range(0, len(audio), 8000)]  # fmt: skip
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for f in frames:
                try:
                    c.sock.sendall(f)
                    sent[0] += len(f)
                except TimeoutError:
                    break
        c.sock.settimeout(None)
        c.send(TEXT, b"Done")
        return c.read_close(120)

    try:
        before = s.rss_kb()

        async def run():
            flooding = asyncio.create_task(asyncio.to_thread(flood, 10.0))
            await asyncio.sleep(1.0)
            start = time.monotonic()
            good = await _good(s.url, files, pace=0.05)
            took = time.monotonic() - start
            peak = s.rss_kb()
            return await flooding, good, took, peak

        code, good, took, peak = asyncio.run(run())
        h = s.health()
    finally:
        s.stop()
    print(f"flood sent {sent[0] / 64000:.0f} s of audio; RSS {before} -> {peak} kB; good "
          f"sessions took {took:.1f} s; {h['throttled']} pauses")  # fmt: skip
    _check(good, reference)
    assert code == 1000  # the flood's audio was decoded to its end
    assert h["throttled"] > 0 and (peak - before) < 100 * 1024


def test_a_client_that_pings_and_never_reads_is_closed(tiny, files, reference):  # noqa: F811
    s = start_server(tiny.path, "--chunk-size", "4", "--max-unsent", "50000")
    try:
        # The good clients once first: the memory their batches take is not the flood's.
        _check(asyncio.run(_good(s.url, files)), reference)
        before = s.rss_kb()

        def pings() -> float:
            c = RawClient(s.port, "/", rcvbuf=4096)
            ping = c.frame(PING, b"p" * 125) * 64
            c.sock.settimeout(5)
            start = time.monotonic()
            try:
                while time.monotonic() - start < 30:
                    c.sock.sendall(ping)
            except OSError:  # reset or timed out: the server dropped us
                pass
            c.close()
            return time.monotonic() - start

        async def run():
            return await asyncio.gather(asyncio.to_thread(pings), _good(s.url, files))

        took, good = asyncio.run(run())
        h = _wait_health(s, lambda h: h["unread"] >= 1)
        after = s.rss_kb()
    finally:
        s.stop()
    _check(good, reference)
    assert h["unread"] == 1 and took < 30, (h, took)
    assert "not reading" in s.log() and after - before < 50 * 1024


def test_slow_drips_deep_json_and_long_hotword_lists(server: ServerProcess, tiny):
    """4 bytes a second do not hold a slot (the idle clock counts audio, 3 s here); JSON
    nested too deep and over-long hotword lines are refused with the reason (1003)."""
    drip = RawClient(server.port, "/")
    start = time.monotonic()
    one_sample = np.zeros(1, "<f4").tobytes()

    def dripping():
        try:
            while time.monotonic() - start < 20:
                drip.send(BINARY, one_sample)
                time.sleep(1.0)
        except OSError:
            pass

    threading.Thread(target=dripping, daemon=True).start()
    assert drip.read_close(20) == 1000
    assert time.monotonic() - start < 10

    async def refused(text: str):
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        async with connect(server.url + "/wenet") as ws:
            await ws.send(text)
            with pytest.raises(ConnectionClosed):
                while True:
                    await ws.recv()
            return ws.close_code, ws.close_reason

    code, reason = asyncio.run(refused("[" * 40_000 + "]" * 40_000))
    assert code == 1003 and "nested 40000 deep" in reason
    long_line = json.dumps({"signal": "start", "hotwords": ["A" * 201]})
    code, reason = asyncio.run(refused(long_line))
    assert code == 1003 and "201 characters" in reason


def test_unspellable_hotwords_are_one_short_log_line(tiny, corpus):
    from wenet_lite.data.manifest import cut_text, load_cuts

    word = cut_text(next(iter(load_cuts(corpus / "test-clean")))).split()[0]
    s = start_server(tiny.path, "--chunk-size", "4", "--mode", "prefix_beam", "--beam", "4")
    lines = [word] + [f"\u00c6\u00d8\u00c5 {i} " + "\u00e6" * 150 for i in range(999)]

    async def run():
        from websockets.asyncio.client import connect

        async with connect(s.url + "/wenet") as ws:
            await ws.send(json.dumps({"signal": "start", "hotwords": lines}))
            return json.loads(await ws.recv())

    try:
        assert asyncio.run(run())["type"] == "server_ready"
        found = s.wait_log(r"999 hotword line\(s\) skipped.*and 996 more")
    finally:
        s.stop()
    line = s.log()[found.start() :].splitlines()[0]
    assert len(line) < 1000, line


def test_a_failing_stream_closes_only_its_connection(tiny, files, reference):  # noqa: F811
    """An exception in one stream's decoding, or in handling one connection's messages
    (injected), closes that connection with 1011 and the reason; the batch it shared is
    decoded stream by stream and the others go on."""
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer
    from wenet_lite.serve import Server, ServerOptions

    rec = open_recognizer((tiny.model, tiny.tokenizer, tiny.cfg), Chunking(4, 4))
    poisoned = []
    create, decode = rec.create_stream, rec.decode_streams

    def create_stream(*args, **kwargs):
        stream = create(*args, **kwargs)
        if len(poisoned) == 0:
            poisoned.append(stream)  # the first connection's stream
        return stream

    def decode_streams(streams):
        if any(s is poisoned[0] for s in streams):
            raise RuntimeError("injected")
        return decode(streams)

    server = Server(rec, ServerOptions(port=0, log_interval=0))
    loop = asyncio.new_event_loop()
    ready = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.run(ready),))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        rec.create_stream, rec.decode_streams = create_stream, decode_streams
        url = f"ws://127.0.0.1:{server.port}"
        name = next(iter(files))

        async def closed_on(audio: np.ndarray):
            from websockets.asyncio.client import connect
            from websockets.exceptions import ConnectionClosed

            async with connect(url) as ws:
                try:
                    for i in range(0, len(audio), 1600):
                        await ws.send(audio[i : i + 1600].astype("<f4").tobytes())
                        await asyncio.sleep(0.02)
                    await ws.send("Done")
                    while True:
                        await ws.recv()
                except ConnectionClosed:
                    return ws.close_code, ws.close_reason

        async def start_fails():
            from websockets.asyncio.client import connect
            from websockets.exceptions import ConnectionClosed

            async with connect(url + "/wenet") as ws:
                await ws.send(json.dumps({"signal": "start", "hotwords": ["A"]}))
                with pytest.raises(ConnectionClosed):
                    while True:
                        await ws.recv()
                return ws.close_code, ws.close_reason

        def hotwords_graph(*args):
            raise KeyError("injected")

        async def run():
            victim = asyncio.create_task(closed_on(files[name]))
            await asyncio.sleep(0.05)
            return await asyncio.gather(victim, start_fails(), _good(url, files, pace=0.02))

        rec.hotwords_graph = hotwords_graph  # fails on the event loop's side
        victim, handler, good = asyncio.run(run())
        h = server.health()
    finally:
        loop.call_soon_threadsafe(server.stop)
        thread.join(60)
    assert victim[0] == 1011 and "server error while decoding" in victim[1]
    assert handler == (1011, "server error while handling it: KeyError")
    _check(good, reference)
    assert h["failed"] == 2 and h["step_failures"] >= 1 and h["status"] == "failing"


@pytest.mark.slow
def test_a_killed_worker_is_restarted(tiny, files, reference):  # noqa: F811
    s = start_server(tiny.path, "--chunk-size", "4", "--jobs", "2", "--log-interval", "0")
    try:
        h = _wait_health(s, lambda h: all(w["pid"] for w in h["workers"]))
        victim = h["workers"][1]["pid"]

        async def run():
            sessions = asyncio.create_task(_good_or_lost(s.url, files))
            await asyncio.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            return await sessions

        survived = asyncio.run(run())
        s.wait_log(rf"worker 1 \(pid {victim}\) was killed by SIGKILL")
        s.wait_log(r"worker 1 restarted \(pid (\d+)\)")
        h = _wait_health(s, lambda h: h["status"] == "ok" and h["open_streams"] == 0)
        assert h["status"] == "ok" and h["open_streams"] == 0, h
        assert all(w["alive"] for w in h["workers"]) and h["workers"][1]["pid"] != victim
        for name, texts in survived:  # sessions on the survivor finished exactly
            assert texts == reference[name]
        _check(asyncio.run(_good(s.url, files)), reference)  # and the restarted one serves
        print(f"SIGTERM to exit with 2 workers: {_stop_within(s, 10):.2f} s")
    finally:
        s.proc.kill()


async def _good_or_lost(url: str, files) -> List[tuple]:  # noqa: F811
    """Sessions of which some may be on a worker that dies: the finished ones' texts."""
    from websockets.exceptions import ConnectionClosed

    async def one(name, i):
        try:
            session = await sherpa_session(url, files[name], seed=i, pace=0.05)
        except (ConnectionClosed, OSError):
            return None
        if session.close_code != 1000:
            return None
        return name, sherpa_finals(session.messages)

    names = [n for n in files for _ in range(3)]
    found = await asyncio.gather(*[one(n, i) for i, n in enumerate(names)])
    return [f for f in found if f is not None]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> Path:
    """A self-signed certificate for localhost and its key (openssl)."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    return d


def test_tls_token_origins_methods_and_per_peer_limit(tiny, files, reference, certificate):  # noqa: F811
    (certificate / "token").write_text("s3cret-token\n")
    s = start_server(
        tiny.path, "--chunk-size", "4", "--certfile", str(certificate / "cert.pem"),
        "--keyfile", str(certificate / "key.pem"), "--token-file", str(certificate / "token"),
        "--allowed-origins", "https://app.example", "--max-connections-per-peer", "4", "-v",
    )  # fmt: skip
    tls = ssl.create_default_context(cafile=str(certificate / "cert.pem"))
    url = f"wss://127.0.0.1:{s.port}"
    bearer = {"Authorization": "Bearer s3cret-token"}
    try:
        assert s.log().count("listening on wss://")
        good = asyncio.run(_good(url, files, ssl=tls, additional_headers=bearer))
        _check(good, reference)
        by_query = asyncio.run(
            sherpa_session(url + "/?token=s3cret-token", files[next(iter(files))], ssl=tls)
        )
        assert by_query.messages[-1] == "Done!"

        def status(**headers) -> int:
            from websockets.exceptions import InvalidStatus
            from websockets.sync.client import connect

            try:
                with connect(url, ssl=tls, additional_headers=headers):
                    return 101
            except InvalidStatus as e:
                return e.response.status_code

        assert status() == 401 and status(Authorization="Bearer wrong") == 401
        assert status(**bearer, Origin="https://evil.example") == 403
        assert status(**bearer, Origin="http://localhost:8000") == 403  # a list is given
        assert status(**bearer, Origin="https://app.example") == 101
        assert status(**bearer, Origin=f"https://127.0.0.1:{s.port}") == 101  # same origin

        from websockets.sync.client import connect

        with contextlib.ExitStack() as held:
            for _ in range(4):
                held.enter_context(connect(url, ssl=tls, additional_headers=bearer))
            assert status(**bearer) == 503

        page = urllib.request.urlopen(f"https://127.0.0.1:{s.port}/", context=tls, timeout=10)
        assert b"page served by worker 0 of 1" in page.read()
        assert page.headers.get("Server") is None
        head = urllib.request.urlopen(
            urllib.request.Request(f"https://127.0.0.1:{s.port}/", method="HEAD"),
            context=tls,
            timeout=10,
        )
        assert head.status == 200 and head.read() == b"" and int(head.headers["Content-Length"])
        for method, path, code in (("POST", "/", 405), ("GET", "/<script>x", 404)):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(
                    urllib.request.Request(f"https://127.0.0.1:{s.port}{path}", method=method),
                    context=tls,
                    timeout=10,
                )
            assert e.value.code == code and b"script" not in e.value.read()
    except BaseException:
        print(f"the server's log so far:\n{s.log()}")  # shown with the failure
        raise
    finally:
        assert s.stop() == 0, s.log()


def test_default_origins_admit_localhost_pages_only(server: ServerProcess):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    def status(origin: str) -> int:
        try:
            with connect(server.url, origin=origin):
                return 101
        except InvalidStatus as e:
            return e.response.status_code

    assert status("http://localhost:3000") == 101
    assert status(f"http://127.0.0.1:{server.port}") == 101
    assert status("https://evil.example") == 403


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--certfile", "nowhere.pem"], "error: --certfile and --keyfile go together"),
        (["--certfile", "nowhere.pem", "--keyfile", "nokey.pem"], "nowhere.pem: no such file"),
        (["--token-file", "missing-token"], "missing-token: no such token file"),
        (["--max-queued-audio", "0"], "error: --max-queued-audio must be > 0"),
        (["--max-connections-per-peer", "-1"], "error: --max-connections-per-peer must be >= 0"),
    ],
)
def test_bad_server_flags_are_one_line(tiny, capsys, flags, message):
    from wenet_lite.cli import main

    assert main(["serve", "--model", str(tiny.path), "--port", "0", *flags]) in (1, 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
