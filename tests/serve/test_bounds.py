"""What a client can hold of the server, and for how long: a request head must arrive whole
within --head-timeout however it trickles, a refused connection is answered at its first bytes
and closed, one address keeps a tenth of the connections free for the others by default, and
an upload's audio is refused from its header when it holds more minutes than allowed. Each
with its control: the setting lifted, the same clients hold the server."""

from __future__ import annotations

import socket
import threading
import time
from typing import List

import numpy as np
import pytest

from tests.serve.conftest import start_server
from wenet_lite.serve.options import ServerOptions

FLAGS = ("--chunk-size", "4", "--left-chunks", "-1", "--log-interval", "0")


def _trickle(port: int, stop: threading.Event, answers: List[bytes]) -> None:
    """A slow client: its request head a byte every 0.2 s until it is answered or stopped."""
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.settimeout(0.2)
        for byte in head:
            if stop.is_set():
                return
            try:
                c.sendall(bytes([byte]))
                got = c.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                answers.append(b"closed")
                return
            answers.append(got or b"closed")
            return


def _slow_clients(port: int, n: int):
    stop, answers = threading.Event(), []
    threads = [threading.Thread(target=_trickle, args=(port, stop, answers), daemon=True)
               for _ in range(n)]  # fmt: skip
    for t in threads:
        t.start()
    return stop, answers, threads


def _get(port: int, path: str = "/health") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("head_timeout", [1.0, 600.0])
def test_slow_heads_are_cut_at_the_deadline(tiny, head_timeout: float) -> None:
    """Four clients trickling their heads fill --max-connections 4: with a 1 s deadline each is
    answered 408 and closed and the server takes others again; with 600 s (the control) a
    fifth client is refused while they trickle."""
    s = start_server(tiny.path, *FLAGS, "--max-connections", "4", "--head-timeout",
                     str(head_timeout), "--max-connections-per-peer", "0")  # fmt: skip
    stop, answers, threads = _slow_clients(s.port, 4)
    try:
        time.sleep(2.5)
        fifth = _get(s.port)
        if head_timeout < 10:
            assert len(answers) == 4 and all(a.startswith(b"HTTP/1.1 408") for a in answers)
            assert fifth.startswith(b"HTTP/1.1 200")
        else:
            assert not answers and fifth.startswith(b"HTTP/1.1 503")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        assert s.stop() == 0, s.log()


def test_refused_connections_are_answered_and_closed_at_once(tiny) -> None:
    """Past the limit, 60 connections that send ``POST `` and nothing more each get 503 and the
    server's end within the linger; the server's open count comes back to what it holds."""
    s = start_server(tiny.path, *FLAGS, "--max-connections", "2", "--head-timeout", "60",
                     "--max-connections-per-peer", "0")  # fmt: skip
    held = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(2)]
    try:
        for c in held:
            c.sendall(b"GET /he")  # incomplete: they hold their slots
        time.sleep(0.5)
        refused = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(60)]
        for c in refused:
            c.sendall(b"POST ")
        started = time.monotonic()
        for c in refused:
            reply = b""
            while chunk := c.recv(65536):  # returns b"" at the server's end
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 503") and b"limit of 2 connections" in reply
            c.close()
        assert time.monotonic() - started < 15
        time.sleep(2.5)  # the linger
        for c in held:
            c.close()
        time.sleep(0.5)
        assert _get(s.port).startswith(b"HTTP/1.1 200")  # nothing left counted
        assert s.health()["refused"] >= 60
    finally:
        for c in held:
            c.close()
        assert s.stop() == 0, s.log()


def test_one_address_keeps_a_tenth_free_by_default() -> None:
    assert ServerOptions().peer_limit == 900
    assert ServerOptions(max_connections=24).peer_limit == 22
    assert ServerOptions(max_connections=1).peer_limit == 1
    assert ServerOptions(max_connections_per_peer=0).peer_limit == 0  # no limit
    assert ServerOptions(max_connections_per_peer=5).peer_limit == 5
    for bad in ({"head_timeout": 0}, {"head_timeout": float("inf")},
                {"max_upload_minutes": -1}, {"max_connections_per_peer": -1}):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServerOptions(**bad)


def test_an_upload_longer_than_allowed_is_refused_from_its_header(tiny, tmp_path) -> None:
    """A FLAC of 2 minutes of silence (a few KB) with --max-upload-minutes 1: 400 in OpenAI's
    shape naming its minutes, before it is decoded; with 3 minutes allowed (the control) it is
    transcribed."""
    openai = pytest.importorskip("openai")
    import soundfile as sf

    path = tmp_path / "quiet.flac"
    sf.write(path, np.zeros(16000 * 120, np.float32), 16000, format="FLAC")
    assert path.stat().st_size < 200_000
    for minutes, refused in (("1", True), ("3", False)):
        s = start_server(tiny.path, *FLAGS, "--max-upload-minutes", minutes)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="x",
                                   max_retries=0)  # fmt: skip
            model = client.models.list().data[0].id
            if refused:
                with pytest.raises(openai.BadRequestError) as e:
                    client.audio.transcriptions.create(model=model, file=path)
                body = e.value.body
                assert body["code"] == "audio_too_long" and body["param"] == "file"
                assert "2.0 min of audio, over this server's limit of 1 min" in body["message"]
            else:
                assert client.audio.transcriptions.create(model=model, file=path).text == ""
        finally:
            assert s.stop() == 0, s.log()
