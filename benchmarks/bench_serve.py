"""Load benchmark of streaming servers that speak sherpa-onnx's websocket protocol.

N clients on loopback each stream a different test file (looped to --seconds) at real-time pace
in 0.1 s messages, then 'Done'. Per N and per server: final latency (last audio sent -> the
last result; p50 / p95 / max), partial-result lag (a chunk's result received -> the time its
audio was complete: the k-th chunk result of a stream waits for k * --chunk-seconds of audio),
errors (refused, dropped, or no result), the server's CPU (cores, from /proc), how late the
clients themselves sent (they share this machine) and the server's peak RSS growth (its
processes, sampled every 0.5 s). ``--flood K`` adds K clients that send as fast as the server
lets them, beside the real-time ones. The servers are measured in turns at each N,
so both see the same machine. The last line names each server's largest N whose p95 final
latency stays under 1 s with no errors.

    python benchmarks/bench_serve.py --data exp/data/test-clean --clients 40,80,160,240 \\
        --serve ours=exp/u2/avg_5.pt --url sherpa=ws://127.0.0.1:6007@PID

``--serve NAME=MODEL[::FLAGS]`` starts `wenet-lite serve` on a free port (with --serve-flags and
FLAGS); with ``--realtime`` each such server is also measured over OpenAI's Realtime API (row
NAME-realtime: the same clients as Realtime transcription sessions sending base64 16-bit PCM at
``--realtime-rate`` Hz in 0.1 s ``input_audio_buffer.append`` events, without turn detection,
then a commit; final latency is the last audio sent -> the ``completed`` transcript; no partial
lag column, its deltas come as text grows);
``--url NAME=ws://HOST:PORT@PID`` drives a server already running (PID: its process, for the
CPU column; sherpa-onnx's own ``python-api-examples/streaming_server.py``, for example).
``--profile DIR`` samples each server with a PID through every round with py-spy (its Python
threads and its workers', idle included; DIR/NAME-N.raw) and prints where its time went, part
by part (``serve_profile.py``: encoder, features, states, search, results, protocol, event
loop, idle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Dict, List, Optional, Tuple

import numpy as np

BLOCK_S = 0.1
RATE = 16000


@dataclass
class Target:
    name: str
    url: str
    pid: Optional[int]
    proc: Optional[subprocess.Popen] = None
    realtime_rate: int = 0
    """> 0: its clients speak OpenAI's Realtime API at this rate"""


@dataclass
class ClientResult:
    final_latency: Optional[float] = None
    lags: List[float] = field(default_factory=list)
    late_send: float = 0.0
    error: Optional[str] = None


def _load_audio(data: str, limit: int) -> List[np.ndarray]:
    from wenet_lite.data.manifest import cut_samples, load_cuts

    cuts = list(load_cuts(data))[:limit]
    if not cuts:
        raise SystemExit(f"bench_serve: no utterances in {data}")
    return [cut_samples(c, RATE) for c in cuts]


def _looped(audio: np.ndarray, seconds: float) -> np.ndarray:
    n = int(seconds * RATE)
    return np.resize(audio, n).astype("<f4")


async def _paced(
    samples: np.ndarray,
    rate: int,
    send: Callable[[np.ndarray], Awaitable[None]],
    result: ClientResult,
) -> None:
    """``samples`` sent in BLOCK_S pieces at real-time pace from now; how late the client
    itself fell goes to ``result.late_send``."""
    block = int(BLOCK_S * rate)
    start = time.perf_counter()
    for k, i in enumerate(range(0, len(samples), block)):
        wait = start + k * BLOCK_S - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            result.late_send = max(result.late_send, -wait)
        await send(samples[i : i + block])


async def _client(url: str, audio: np.ndarray, delay: float, chunk_s: float) -> ClientResult:
    from websockets.asyncio.client import connect

    result = ClientResult()
    await asyncio.sleep(delay)
    try:
        async with connect(url, max_size=None, open_timeout=60, ping_interval=None) as ws:
            received: List[Tuple[float, str]] = []

            async def receive() -> None:
                async for m in ws:
                    received.append((time.perf_counter(), m))
                    if m == "Done!":
                        return

            reader = asyncio.create_task(receive())
            start = time.perf_counter()
            await _paced(audio, RATE, lambda piece: ws.send(piece.tobytes()), result)
            last_sent = time.perf_counter()
            await ws.send("Done")
            await asyncio.wait_for(reader, 120)
    except Exception as e:  # noqa: BLE001 - every failure is counted and named
        result.error = f"{type(e).__name__}: {e}"[:120]
        return result
    results = [(t, json.loads(m)) for t, m in received if m != "Done!"]
    if not results:
        result.error = "no result"
        return result
    result.final_latency = results[-1][0] - last_sent
    chunk_results = [t for t, m in results if not m.get("is_final", False) and t < last_sent]
    audio_s = len(audio) / RATE
    for k, t in enumerate(chunk_results):
        complete = start + min((k + 1) * chunk_s, audio_s)
        result.lags.append(t - complete)
    return result


async def _realtime_client(url: str, audio: np.ndarray, delay: float, rate: int) -> ClientResult:
    """One Realtime transcription session: the audio at ``rate`` in 0.1 s append events at
    real-time pace, a commit, the completed transcript."""
    import base64

    from websockets.asyncio.client import connect

    from wenet_lite.features.audio import resample

    result = ClientResult()
    pcm = np.round(np.clip(resample(audio, RATE, rate), -1, 32767 / 32768) * 32768).astype("<i2")
    await asyncio.sleep(delay)
    try:
        async with connect(f"{url}/v1/realtime?intent=transcription", max_size=None,
                           open_timeout=60, ping_interval=None) as ws:  # fmt: skip
            await ws.send(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {
                            "type": "transcription",
                            "audio": {
                                "input": {
                                    "format": {"type": "audio/pcm", "rate": rate},
                                    "turn_detection": None,
                                }
                            },
                        },
                    }
                )
            )
            done = asyncio.get_running_loop().create_future()

            async def receive() -> None:
                async for m in ws:
                    event = json.loads(m)
                    if event["type"] == "error":
                        done.set_exception(RuntimeError(event["error"]["message"]))
                        return
                    if event["type"].endswith("transcription.completed"):
                        done.set_result(time.perf_counter())
                        return

            reader = asyncio.create_task(receive())

            def append(piece: np.ndarray) -> Awaitable[None]:
                data = base64.b64encode(piece.tobytes()).decode()
                return ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": data}))

            await _paced(pcm, rate, append, result)
            last_sent = time.perf_counter()
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            result.final_latency = await asyncio.wait_for(done, 120) - last_sent
            reader.cancel()
    except Exception as e:  # noqa: BLE001 - every failure is counted and named
        result.error = f"{type(e).__name__}: {e}"[:120]
    return result


async def _flood(url: str, audio: np.ndarray, stop: asyncio.Event) -> float:
    """A client that sends audio as fast as the server lets it (reading its results) until
    ``stop``, then leaves; returns the seconds of audio it got through."""
    from websockets.asyncio.client import connect

    sent = 0
    block = int(0.5 * RATE)
    async with connect(url, max_size=None, open_timeout=60, ping_interval=None) as ws:
        reader = asyncio.create_task(_drain(ws))
        while not stop.is_set():
            for i in range(0, len(audio), block):
                await ws.send(audio[i : i + block].tobytes())
                sent += min(block, len(audio) - i)
                if stop.is_set():
                    break
        reader.cancel()
    return sent / RATE


async def _drain(ws) -> None:
    async for _ in ws:
        pass


def _rss_mb(pid: Optional[int]) -> Optional[float]:
    """Resident memory of the process and its children (MB)."""
    if pid is None:
        return None
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        parent = re.search(r"PPid:\s+(\d+)", text)
        if status.parent.name == str(pid) or (parent and parent.group(1) == str(pid)):
            found = re.search(r"VmRSS:\s+(\d+)", text)
            total += int(found.group(1)) if found else 0
    return total / 1024


async def _peak_rss(pid: Optional[int], stop: asyncio.Event, peak: List[float]) -> None:
    while not stop.is_set():
        now = _rss_mb(pid)
        if now is not None:
            peak[0] = max(peak[0], now)
        await asyncio.sleep(0.5)


def _cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """CPU seconds of the process and its children (the workers of `serve --workers`)."""
    if pid is None:
        return None
    total, found = 0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # itself, or its child
            total += int(fields[11]) + int(fields[12])
            found = True
    return total / os.sysconf("SC_CLK_TCK") if found else None


def _start_profile(target: Target, n: int, args) -> Optional[subprocess.Popen]:
    """py-spy sampling ``target`` and its workers into DIR/NAME-N.raw until stopped."""
    if not args.profile or target.pid is None:
        return None
    out = Path(args.profile) / f"{target.name}-{n}.raw"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [args.py_spy, "record", "--pid", str(target.pid), "--subprocesses", "--idle",
           "--nonblocking", "--format", "raw", "--rate", str(args.profile_rate),
           "-o", str(out)]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop_profile(spy: Optional[subprocess.Popen], target: Target, n: int) -> None:
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
    try:
        _, err = spy.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    if spy.returncode not in (0, -signal.SIGINT):
        lines = (err or "").strip().splitlines()
        print(f"bench_serve: py-spy on {target.name} at N={n} failed: "
              f"{lines[-1] if lines else spy.returncode}", file=sys.stderr)  # fmt: skip


async def _round(target: Target, audios: List[np.ndarray], n: int, args) -> Dict[str, object]:
    rng = np.random.default_rng(n)
    clips = [_looped(audios[i % len(audios)], args.seconds) for i in range(n)]
    delays = rng.uniform(0, args.ramp, n)
    rss0 = _rss_mb(target.pid)
    stop, peak = asyncio.Event(), [rss0 or 0.0]
    watch = asyncio.create_task(_peak_rss(target.pid, stop, peak))
    floods = [asyncio.create_task(_flood(target.url, clips[i % n], stop)) for i in
              range(args.flood)]  # fmt: skip
    spy = _start_profile(target, n, args)
    cpu0, wall0 = _cpu_seconds(target.pid), time.perf_counter()
    if target.realtime_rate:
        clients = [_realtime_client(target.url, clip, d, target.realtime_rate)
                   for clip, d in zip(clips, delays)]  # fmt: skip
    else:
        clients = [
            _client(target.url, clip, d, args.chunk_seconds) for clip, d in zip(clips, delays)
        ]
    results = await asyncio.gather(*clients)
    cpu1, wall1 = _cpu_seconds(target.pid), time.perf_counter()
    _stop_profile(spy, target, n)
    stop.set()
    flooded = sum(await asyncio.gather(*floods, return_exceptions=False)) if floods else 0.0
    await watch
    finals = sorted(r.final_latency for r in results if r.final_latency is not None)
    lags = sorted(x for r in results for x in r.lags)
    errors = [r.error for r in results if r.error]
    row = {
        "server": target.name, "clients": n, "errors": len(errors),
        "p50": _pct(finals, 50), "p95": _pct(finals, 95), "max": finals[-1] if finals else None,
        "lag_p50": _pct(lags, 50), "lag_p95": _pct(lags, 95),
        "cpu": (cpu1 - cpu0) / (wall1 - wall0) if cpu0 is not None and cpu1 is not None else None,
        "late_send": max(r.late_send for r in results),
        "first_error": errors[0] if errors else "",
        "rss_growth_mb": None if rss0 is None else peak[0] - rss0, "flooded_s": flooded,
        "seconds": wall1 - wall0,
    }  # fmt: skip
    return row


def _pct(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    return float(np.percentile(values, q))


def _start_ours(name: str, model: str, flags: str) -> Target:
    cmd = [sys.executable, "-m", "wenet_lite", "serve", "--model", model, "--port", "0"]
    cmd += ["--log-interval", "0", *shlex.split(flags)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"listening on (wss?://[\d.]+:\d+)", line)
        if found:
            # Keep draining its log so that the server never blocks on a full pipe.
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return Target(name, found.group(1), proc.pid, proc)
    raise SystemExit(f"bench_serve: {name}: the server did not start ({' '.join(cmd)})")


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="prepared set whose audio the clients stream")
    p.add_argument("--clients", default="20,40,80", help="comma-separated N to try")
    p.add_argument("--seconds", type=float, default=20.0, help="audio each client streams")
    p.add_argument("--ramp", type=float, default=2.0, help="clients start within this many s")
    p.add_argument("--chunk-seconds", type=float, default=0.64, help="audio per chunk result")
    p.add_argument("--serve", action="append", default=[], metavar="NAME=MODEL[::FLAGS]")
    p.add_argument("--serve-flags", default="--chunk-size 16 --left-chunks 4")
    p.add_argument("--url", action="append", default=[], metavar="NAME=URL[@PID]")
    p.add_argument("--json", help="also write the rows as JSON lines to this file")
    p.add_argument(
        "--flood", type=int, default=0,
        help="clients that send audio as fast as they can beside the real-time ones (their "
        "latency is not counted; the table gives the server's RSS growth and the audio they "
        "got through)",
    )  # fmt: skip
    p.add_argument("--profile", metavar="DIR",
                   help="sample each server with a PID during every round (py-spy) and print "
                   "where its time went, part by part")  # fmt: skip
    p.add_argument("--profile-rate", type=int, default=100, help="py-spy samples a second")
    p.add_argument("--py-spy", default="py-spy", help="the py-spy program (pip install py-spy)")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="also measure each --serve server over OpenAI's Realtime API",
    )
    p.add_argument(
        "--realtime-rate",
        type=int,
        default=24000,
        choices=(16000, 24000),
        help="the Realtime sessions' audio/pcm rate (24000, OpenAI's default)",
    )
    args = p.parse_args()
    if args.profile_rate < 1:
        p.error(f"--profile-rate {args.profile_rate}: give py-spy's samples a second, at least 1")
    if args.profile and shutil.which(args.py_spy) is None:
        raise SystemExit(f"bench_serve: --profile needs py-spy ({args.py_spy} not found; "
                         "pip install py-spy)")  # fmt: skip
    targets: List[Target] = []
    for spec in args.url:
        name, _, rest = spec.partition("=")
        url, _, pid = rest.partition("@")
        targets.append(Target(name, url, int(pid) if pid else None))
    for spec in args.serve:
        name, _, rest = spec.partition("=")
        model, _, extra = rest.partition("::")
        ours = _start_ours(name, model, f"{args.serve_flags} {extra}")
        targets.append(ours)
        if args.realtime:
            targets.append(Target(f"{name}-realtime", ours.url, ours.pid,
                                  realtime_rate=args.realtime_rate))  # fmt: skip
    if not targets:
        raise SystemExit("bench_serve: give --serve NAME=MODEL or --url NAME=URL")
    audios = _load_audio(args.data, 200)
    from wenet_lite.host.cpu import cpu_summary

    print(cpu_summary())
    rows = []
    head = ("| server | N | p50 final s | p95 final s | max final s | partial lag p50/p95 s "
            "| errors | server CPU cores | clients late by s | server RSS growth MB |")  # fmt: skip
    if args.flood:
        head += " flood's audio s |"
    print(head + "\n|" + "---|" * (11 if args.flood else 10), flush=True)
    try:
        for n in [int(x) for x in args.clients.split(",")]:
            for t in targets:
                row = asyncio.run(_round(t, audios, n, args))
                rows.append(row)
                print(
                    f"| {t.name} | {n} | {_fmt(row['p50'])} | {_fmt(row['p95'])} | "
                    f"{_fmt(row['max'])} | {_fmt(row['lag_p50'])} / {_fmt(row['lag_p95'])} | "
                    f"{row['errors']} | {_fmt(row['cpu'])} | {_fmt(row['late_send'])} | "
                    f"{_fmt(row['rss_growth_mb'], 0)} |"
                    + (f" {row['flooded_s']:.0f} |" if args.flood else "")
                    + (f" {row['first_error']}" if row["errors"] else ""),
                    flush=True,
                )  # fmt: skip
                time.sleep(2)  # let the server settle between rounds
    finally:
        for t in targets:
            if t.proc is not None:
                t.proc.terminate()
                t.proc.wait(30)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    for t in targets:
        ok = [r["clients"] for r in rows if r["server"] == t.name and not r["errors"]
              and r["p95"] is not None and r["p95"] < 1.0]  # fmt: skip
        print(f"{t.name}: largest N with p95 final latency < 1 s and no errors: "
              f"{max(ok) if ok else 'none'}")  # fmt: skip
    if args.profile:
        _print_profiles(rows, args)


def _print_profiles(rows: List[Dict[str, object]], args) -> None:
    """Per N, each profiled server's time by part (serve_profile.py), side by side."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serve_profile import read_raw, shares, table

    for n in sorted({int(r["clients"]) for r in rows}):
        columns, seconds = {}, {}
        for r in rows:
            path = Path(args.profile) / f"{r['server']}-{n}.raw"
            if int(r["clients"]) == n and path.is_file():
                columns[str(r["server"])] = shares(read_raw([path]))
                seconds[str(r["server"])] = float(r["seconds"])  # type: ignore[arg-type]
        if columns:
            print(f"\nWhere each server's time went at N={n} (py-spy, {args.profile_rate} samples "
                  "a second per thread; threads busy: samples / rate / seconds):")  # fmt: skip
            print(table(columns, args.profile_rate, seconds))


if __name__ == "__main__":
    main()
