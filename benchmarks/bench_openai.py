#!/usr/bin/env python3
"""OpenAI API requests on `wenet-lite serve`: N requests of S seconds each sent one after
another, then all at once, with live real-time websocket streams beside the concurrent ones.

    python benchmarks/bench_openai.py --model exp/u2/avg_5.pt --data data/test-clean \\
        [--requests 16] [--seconds 10] [--live 2] [--serve-flags "--chunk-size 16 --left-chunks 4"]

The requests go through the official ``openai`` client. The server decodes them in full
context (its default; uploads waiting together in one batch) or, with ``--upload-context
streamed`` in ``--serve-flags``, as streams of its decode loop: the table gives the wall time of
the sequential and the concurrent round and their ratio, and the live streams' final latency
(last audio sent to the final result) during the concurrent round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List

import numpy as np
import soundfile as sf


def _start(model: str, flags: str) -> tuple:
    cmd = [sys.executable, "-m", "wenet_lite", "serve", "--model", model, "--port", "0",
           "--log-interval", "0", *shlex.split(flags)]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    lines: List[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")),
                     daemon=True).start()  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"listening on ws://[\d.]+:(\d+)", "".join(lines))
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start:\n" + "".join(lines))


def _files(data: str, n: int, seconds: float, out: Path) -> List[Path]:
    from wenet_lite.data.manifest import cut_samples, load_cuts

    cuts = list(load_cuts(data))
    paths = []
    for i in range(n):
        pieces, total, k = [], 0, i
        while total < seconds * 16000:
            x = cut_samples(cuts[k % len(cuts)], 16000)
            pieces.append(x)
            total += x.size
            k += n
        path = out / f"req{i}.wav"
        sf.write(path, np.concatenate(pieces)[: int(seconds * 16000)], 16000, subtype="PCM_16")
        paths.append(path)
    return paths


async def _live(port: int, audio: np.ndarray) -> float:
    """One real-time sherpa-protocol stream; seconds from its last audio to its last final."""
    from websockets.asyncio.client import connect

    async with connect(f"ws://127.0.0.1:{port}/", max_size=None) as ws:

        async def receive() -> float:
            async for m in ws:
                if m != "Done!" and json.loads(m).get("is_eof"):
                    return time.monotonic()
            return time.monotonic()

        task = asyncio.create_task(receive())
        start = time.monotonic()
        block = 1600
        for k in range(0, audio.size, block):
            await asyncio.sleep(max(0.0, start + k / 16000 - time.monotonic()))
            await ws.send(audio[k : k + block].astype("<f4").tobytes())
        sent = time.monotonic()
        await ws.send("Done")
        return await task - sent


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(field + r":\s+(\d+)", status).group(1)) / 1024


def _long_upload(client, model_id: str, pid: int, paths: List[Path], minutes: float,
                 tmp: str) -> tuple:  # fmt: skip
    """(peak RSS growth in MB while the server transcribes one long upload, its size in MB)."""
    one = np.concatenate([sf.read(x, dtype="float32")[0] for x in paths])
    reps = int(np.ceil(minutes * 60 * 16000 / one.size))
    path = Path(tmp) / "long.flac"
    with sf.SoundFile(path, "w", 16000, 1, subtype="PCM_16") as f:
        for _ in range(reps):
            f.write(one)
    base, done = _rss_mb(pid), threading.Event()
    peak = [_rss_mb(pid, "VmHWM")]  # the high-water mark so far (from start and the rounds)

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb(pid))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with open(path, "rb") as f:
        client.audio.transcriptions.create(model=model_id, file=f)
    done.set()
    watcher.join()
    peak[0] = max(peak[0], _rss_mb(pid, "VmHWM"))  # the kernel's high-water mark
    return peak[0] - base, path.stat().st_size / 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="prepared set whose audio makes the requests")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--live", type=int, default=2, help="real-time websocket streams beside")
    p.add_argument("--serve-flags", default="--chunk-size 16 --left-chunks 4")
    p.add_argument(
        "--long-minutes", type=float, default=0.0,
        help="also send one upload this long and report the server's peak RSS growth",
    )  # fmt: skip
    args = p.parse_args()
    import openai

    from wenet_lite.host.cpu import cpu_model

    proc, port = _start(args.model, args.serve_flags)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-",
                               max_retries=0, timeout=600)  # fmt: skip
        model_id = client.models.list().data[0].id
        with tempfile.TemporaryDirectory() as tmp:
            paths = _files(args.data, args.requests, args.seconds, Path(tmp))

            def one(path: Path) -> str:
                with open(path, "rb") as f:
                    return client.audio.transcriptions.create(model=model_id, file=f).text

            one(paths[0])  # warm up
            start = time.monotonic()
            alone = [one(x) for x in paths]
            sequential = time.monotonic() - start
            live_audio = [sf.read(x, dtype="float32")[0] for x in paths[: args.live]]

            async def together() -> tuple:
                loop = asyncio.get_running_loop()
                pool = ThreadPoolExecutor(len(paths))
                lives = [asyncio.create_task(_live(port, a)) for a in live_audio]
                t0 = time.monotonic()
                texts = await asyncio.gather(*[loop.run_in_executor(pool, one, x) for x in paths])
                took = time.monotonic() - t0
                return took, texts, await asyncio.gather(*lives)

            concurrent, texts, latencies = asyncio.run(together())
            growth = None
            if args.long_minutes > 0:
                growth = _long_upload(client, model_id, proc.pid, paths, args.long_minutes, tmp)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    same = sum(a == b for a, b in zip(texts, alone))
    print(f"{same} of {len(alone)} texts equal alone and together")
    print(
        f"\n{cpu_model()}; {args.requests} requests of {args.seconds:g} s; serve "
        f"{args.serve_flags}; {args.live} live real-time stream(s) beside the concurrent round"
    )
    print("\n| round | wall s | vs sequential | live final latency max s |\n|---|---:|---:|---:|")
    print(f"| one after another | {sequential:.2f} | 1.00x | - |")
    print(
        f"| all at once | {concurrent:.2f} | {concurrent / sequential:.2f}x | "
        f"{max(latencies) if latencies else float('nan'):.2f} |"
    )
    if growth is not None:
        print(f"\nA {args.long_minutes:g}-minute upload ({growth[1]:.0f} MB FLAC): the server's "
              f"RSS grew by {growth[0]:.0f} MB at its peak")  # fmt: skip


if __name__ == "__main__":
    main()
