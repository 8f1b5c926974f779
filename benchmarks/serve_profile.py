"""Where a streaming server's time goes: py-spy's samples of it sorted into the parts of a
stream step.

``py-spy record --pid PID --subprocesses --idle --nonblocking --format raw -o FILE`` samples
every Python thread of the server (and of its workers) at a fixed rate, idle or not, and writes
one line per distinct stack: ``frame;frame;...;leaf COUNT``, a frame ``function (file:line)``.
Each stack is put in one part:

- idle: a thread waiting for work (the event loop in ``select``, the decode thread between
  steps), not CPU;
- the decode thread's parts: encoder (the model's forward through the engine), features
  (fbank of the new audio), states (gathering and scattering the streams' encoder states and
  batching their feature windows), search, results (each touched stream's results rendered as
  its protocol's messages), and feeding (queued audio moved into the streams) with the rest
  of the step;
- the event loop's: protocol (websocket frames and HTTP read and written, messages parsed) and
  event loop (asyncio's own work and the server's coroutines).

``bench_serve.py --profile DIR`` records one file per server and N and prints this table;
``python benchmarks/serve_profile.py FILE...`` prints it for files recorded by hand.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

__all__ = ["PARTS", "part_of", "read_raw", "read_raw_lines", "shares", "table"]

PARTS = ("encoder", "features", "states", "search", "results", "feeding and step",
         "protocol", "event loop", "other", "idle")  # fmt: skip
"""busy parts first, in the order of a stream step, then idle"""

_IDLE_LEAVES = (
    re.compile(r"\.select \(selectors\.py"),  # the event loop waiting on its sockets
    re.compile(r"^_worker \(concurrent/futures/thread\.py"),  # an executor thread between items
    re.compile(r"^(Condition\.)?wait \(threading\.py"),
    re.compile(r"^_wait_for_tstate_lock|^Thread\.join"),
    re.compile(r"^(Queue\.)?get \(queue\.py"),
    re.compile(r"^supervise \(wenet_lite/serve/workers\.py"),  # `--jobs`' parent in waitpid
)
_DECODE = ("serve/decode_thread.py", "runtime/streaming.py")
_RESULTS = ("serve/protocols.py", "runtime/result.py", "runtime/cursor.py", "runtime/segments.py",
            "DecodeThread._messages")  # fmt: skip
_RULES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("features", ("wenet_lite/features/", "wenet_lite/vad/")),
    ("states", ("wenet_lite/model/state.py", "_batch_windows", "Stream.next_window")),
    ("encoder", ("wenet_lite/model/", "runtime/engines.py")),
    ("search", ("wenet_lite/search/", "Stream.advance")),
    ("results", _RESULTS),
)
"""the decode thread's parts: the first whose pattern is in a stack's frames"""


def _strip(frame: str) -> str:
    """``fn (/long/path/site-packages/pkg/file.py:12)`` -> ``fn (pkg/file.py:12)``."""
    return re.sub(r"\((?:[^()]*/)?(site-packages|dist-packages|python3\.\d+)/", "(", frame)


def read_raw(paths: Iterable[Path]) -> List[Tuple[List[str], int]]:
    """(frames root first, sample count) of every stack in py-spy's raw files."""
    return [stack for path in paths for stack in read_raw_lines(
        Path(path).read_text(encoding="utf-8", errors="replace").splitlines())]  # fmt: skip


def read_raw_lines(lines: Iterable[str]) -> List[Tuple[List[str], int]]:
    """(frames root first, sample count) of each raw line (others skipped); the process label
    ``process N:"cmd"`` that ``--subprocesses`` puts first is dropped."""
    stacks = []
    for line in lines:
        head, _, count = line.rpartition(" ")
        if not head or not count.isdigit():
            continue
        frames = [f for f in head.split(";") if f and not f.startswith("process ")]
        stacks.append(([_strip(f) for f in frames], int(count)))
    return stacks


def part_of(frames: Sequence[str]) -> str:
    """The part of a stack (root first): see the module's docstring."""
    if not frames:
        return "other"  # a thread in native code py-spy could not name
    leaf = frames[-1]
    if any(p.search(leaf) for p in _IDLE_LEAVES):
        return "idle"
    joined = ";".join(frames)
    if any(d in joined for d in _DECODE):
        for part, patterns in _RULES:
            if any(p in joined for p in patterns):
                return part
        return "feeding and step"
    if "websockets/" in joined or "serve/http_front.py" in joined or "json/" in joined:
        return "protocol"
    if "asyncio/" in joined:
        return "event loop"
    return "other"


def shares(stacks: Iterable[Tuple[List[str], int]]) -> Dict[str, int]:
    """Samples per part."""
    counts: Counter = Counter()
    for frames, n in stacks:
        counts[part_of(frames)] += n
    return {part: counts.get(part, 0) for part in PARTS}


def table(columns: Dict[str, Dict[str, int]], rate: float, seconds: Dict[str, float]) -> str:
    """A markdown table: per part, each column's share of the busy samples and the threads it
    kept busy (samples / rate / wall seconds: a sampler of wall time counts a thread waiting
    for the GIL or a core as busy, so these add up to more than the cores the server used);
    idle likewise."""
    names = list(columns)
    busy = {n: sum(v for k, v in columns[n].items() if k != "idle") for n in names}
    per_s = {n: 1.0 / rate / max(seconds[n], 1e-9) for n in names}  # samples -> threads busy
    lines = ["| part | " + " | ".join(f"{n}: share of busy, threads" for n in names) + " |",
             "|---|" + "---|" * len(names)]  # fmt: skip
    for part in PARTS:
        cells = []
        for n in names:
            samples = columns[n][part]
            threads = samples * per_s[n]
            cells.append(f"{threads:.2f} threads" if part == "idle" else
                         f"{100.0 * samples / (busy[n] or 1):.1f} %, {threads:.2f}")  # fmt: skip
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines.append("| busy in all | " + " | ".join(f"100 %, {busy[n] * per_s[n]:.2f}"
                                                 for n in names) + " |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="py-spy --format raw files")
    p.add_argument("--rate", type=float, default=100.0, help="py-spy's --rate")
    p.add_argument("--seconds", type=float, required=True, help="how long each was recorded")
    args = p.parse_args()
    if not (0 < args.rate < float("inf")):
        p.error(f"--rate {args.rate}: give py-spy's samples a second, a number > 0")
    if not (0 < args.seconds < float("inf")):
        p.error(f"--seconds {args.seconds}: give how long the files were recorded, > 0")
    for f in args.files:
        if not f.is_file():
            p.error(f"{f}: no such py-spy file")
    columns = {f.stem: shares(read_raw([f])) for f in args.files}
    print(table(columns, args.rate, {n: args.seconds for n in columns}))


if __name__ == "__main__":
    main()
