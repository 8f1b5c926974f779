"""Server fixtures: `wenet-lite serve` in a subprocess on a free port of 127.0.0.1, over the
decode tests' rigged tiny model (tests/tiny_models.py), and websocket clients written to
each protocol."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest

_LISTENING = re.compile(r"listening on wss?://[\d.]+:(\d+)")


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    port: int
    lines: List[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def health(self) -> Dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=10) as r:
            return json.loads(r.read())

    def log(self) -> str:
        return "".join(self.lines)

    def wait_log(self, pattern: str, timeout: float = 20) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log())
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} in the server's log:\n{self.log()}")

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=60)


def start_server(model: Path, *flags: str) -> ServerProcess:
    cmd = [sys.executable, "-m", "wenet_lite", "serve", "--model", str(model), "--port", "0"]
    return start_process([*cmd, *flags])


def start_process(cmd: Sequence[str]) -> ServerProcess:
    """A server started by ``cmd``, once its log says where it listens."""
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    lines: List[str] = []
    threading.Thread(
        target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True
    ).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = _LISTENING.search("".join(lines))
        if found:
            return ServerProcess(proc, int(found.group(1)), lines)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server did not start:\n" + "".join(lines))


@pytest.fixture(scope="module")
def server(tiny) -> ServerProcess:  # noqa: F811
    """Greedy search, chunk 4, endpointing on; small limits for the misuse tests."""
    s = start_server(
        tiny.path, "--chunk-size", "4", "--left-chunks", "-1", "--idle-timeout", "3",
        "--max-connections", "24", "--max-message-size", "100000", "--log-interval", "1",
        "--max-connections-per-peer", "0",
    )  # fmt: skip
    yield s
    assert s.stop() == 0, s.log()


def pieces(audio: np.ndarray, seed: int, largest: float = 0.25) -> List[np.ndarray]:
    """The audio cut in random sizes from 1 sample to ``largest`` seconds."""
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while i < len(audio):
        n = int(rng.integers(1, int(largest * 16000)))
        out.append(audio[i : i + n])
        i += n
    return out


@dataclass
class Session:
    messages: List[object]
    close_code: Optional[int]
    close_reason: str


async def sherpa_session(
    url: str, audio: np.ndarray, seed: int = 0, pace: float = 0.0, end: bool = True, **connect_args
) -> Session:
    """sherpa-onnx's protocol: float32 pieces, 'Done', results until 'Done!' and the close
    (``connect_args``: websockets' ``connect``, e.g. ``ssl`` and ``additional_headers``)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(url, max_size=None, **connect_args) as ws:
        for piece in pieces(audio, seed):
            await ws.send(piece.astype("<f4").tobytes())
            if pace:
                await asyncio.sleep(pace)
        if end:
            await ws.send("Done")
        messages: List[object] = []
        try:
            async for m in ws:
                messages.append(m if m == "Done!" else json.loads(m))
        except ConnectionClosed:
            pass
        return Session(messages, ws.close_code, ws.close_reason or "")


async def wenet_session(
    url: str,
    audio: np.ndarray,
    seed: int = 0,
    continuous: bool = True,
    pace: float = 0.0,
    hotwords: Sequence[str] = (),
    **connect_args,
) -> Session:
    """WeNet's protocol: start, int16 pieces, end; every message until the close."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    base, _, query = url.partition("?")
    async with connect(base + "/wenet" + (f"?{query}" if query else ""), **connect_args) as ws:
        start = {"signal": "start", "nbest": 1, "continuous_decoding": continuous}
        await ws.send(json.dumps({**start, **({"hotwords": list(hotwords)} if hotwords else {})}))
        assert json.loads(await ws.recv()) == {"status": "ok", "type": "server_ready"}
        pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype("<i2")
        for piece in pieces(pcm, seed):
            await ws.send(piece.tobytes())
            if pace:
                await asyncio.sleep(pace)
        await ws.send(json.dumps({"signal": "end"}))
        messages: List[object] = []
        try:
            async for m in ws:
                messages.append(json.loads(m))
        except ConnectionClosed:
            pass
        return Session(messages, ws.close_code, ws.close_reason or "")


def sherpa_finals(messages: Sequence[object]) -> List[str]:
    """The text of each closed segment, in order (sherpa's client keys results by segment)."""
    segments: Dict[int, str] = {}
    for m in messages:
        if isinstance(m, dict) and m["is_final"]:
            segments[m["segment"]] = m["text"]
    return [segments[k] for k in sorted(segments) if segments[k]]


def wenet_finals(messages: Sequence[object]) -> List[dict]:
    """The best path of each final_result with a sentence."""
    found = []
    for m in messages:
        if isinstance(m, dict) and m.get("type") == "final_result":
            best = json.loads(m["nbest"])[0]
            if best["sentence"]:
                found.append(best)
    return found


class RawClient:
    """A websocket client on a bare socket, for the fault tests: it sends the frames it is told
    to (masked, as a client must) and reads only when asked, so it can flood, drip or never
    read. ``status`` is the HTTP status of the upgrade (101 when it was accepted)."""

    def __init__(self, port: int, path: str = "/", headers: Sequence[str] = (),
                 rcvbuf: int = 0) -> None:  # fmt: skip
        import base64
        import socket

        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13", *headers]  # fmt: skip
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            got = self.sock.recv(1)
            if not got:
                break
            head += got
        self.response = head.decode("latin-1")
        self.status = int(self.response.split()[1]) if self.response else 0

    def frame(self, opcode: int, payload: bytes) -> bytes:
        n = len(payload)
        if n < 126:
            size = bytes([0x80 | n])
        elif n < 1 << 16:
            size = bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            size = bytes([0x80 | 127]) + n.to_bytes(8, "big")
        mask = os.urandom(4)
        data = np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)
        return bytes([0x80 | opcode]) + size + mask + data.tobytes()

    def send(self, opcode: int, payload: bytes) -> None:
        self.sock.sendall(self.frame(opcode, payload))

    def read_close(self, timeout: float = 10) -> Optional[int]:
        """Read until the server's close frame (its code) or the end of the connection (None)."""
        self.sock.settimeout(timeout)
        data = b""
        try:
            while True:
                got = self.sock.recv(65536)
                if not got:
                    return None
                data += got
                while len(data) >= 2:
                    n, start = data[1] & 0x7F, 2
                    if n == 126:
                        n, start = int.from_bytes(data[2:4], "big"), 4
                    elif n == 127:
                        n, start = int.from_bytes(data[2:10], "big"), 10
                    if len(data) < start + n:
                        break
                    if data[0] & 0x0F == 8:
                        return int.from_bytes(data[start : start + 2], "big")
                    data = data[start + n :]
        except OSError:
            return None

    def close(self) -> None:
        self.sock.close()
