#!/usr/bin/env python3
"""The HTTP side of `wenet-lite serve`'s port: what a request costs before any decoding.

    python benchmarks/bench_http.py --model MODEL [--requests 500] [--upload-mb 50]

Two rows: ``refused`` sends N small POST requests one after another to a path the server
answers 404 (its head read, routed and answered: the cost of a request), and ``upload`` sends a
multipart upload of M MB of a file field with a model name the server does not serve (the
whole body read and parsed to its spool file, then answered 404 before decoding: the cost per
MB of an upload). Each row gives the wall time and the rate; the server's peak memory shows
that no upload-sized buffer is held. Websocket messages do not pass this code (websockets
reads them; only a connection's first bytes are looked at to tell a POST from an upgrade).
"""

from __future__ import annotations

import argparse
import platform
import socket
import time
from pathlib import Path

from bench_openai import _start as start_server  # the same server start, run from benchmarks/


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as c:
        c.sendall(data)
        reply = b""
        while True:
            piece = c.recv(65536)
            if not piece:
                return reply
            reply += piece


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--upload-mb", type=int, default=50)
    args = p.parse_args()
    proc, port = start_server(args.model, "--max-upload-mb 2000")
    try:
        head = b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        assert _exchange(port, head).startswith(b"HTTP/1.1 404")
        start = time.perf_counter()
        for _ in range(args.requests):
            _exchange(port, head)
        refused = time.perf_counter() - start
        before = _peak_mb(proc.pid)
        size = args.upload_mb * 1_000_000
        part = (
            b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nnone\r\n'
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.wav"\r\n\r\n'
        )
        body = part + b"\0" * size + b"\r\n--b--\r\n"
        upload = (
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        start = time.perf_counter()
        reply = _exchange(port, upload + body)
        took = time.perf_counter() - start
        assert b"model_not_found" in reply, reply[:300]
        grown = _peak_mb(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(30)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    print(f"CPU: {cpu}")
    print("| row | what | wall s | rate | server peak memory growth |")
    print("|---|---|---|---|---|")
    print(
        f"| refused | {args.requests} POST requests answered 404 | {refused:.2f} | "
        f"{1000 * refused / args.requests:.2f} ms/request | |"
    )
    print(
        f"| upload | {args.upload_mb} MB multipart upload, parsed and spooled | {took:.2f} | "
        f"{args.upload_mb / took:.0f} MB/s | {grown:.0f} MB |"
    )


if __name__ == "__main__":
    main()
