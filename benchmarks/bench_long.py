#!/usr/bin/env python3
"""Hours of audio: streaming cost and decode memory against length (a benchmark, not a test).

Usage:
    python benchmarks/bench_long.py --model exp/synthetic/avg_5.pt \
        --data data/synthetic/test-clean \
        [--lm exp/synthetic/lm.json] [--minutes 1 10 60] [--out exp/synthetic/bench_long]

Builds long files of 1, 10 and 60 minutes from the test set's utterances, one after another
(the set repeated as needed), and measures, each configuration in a fresh process:

- ``stream`` (chunk 16, ``--left-chunks`` 4: the encoder's cache has a fixed size; with -1
  it grows with the stream until an endpoint), with endpointing on and off, greedy and prefix
  beam 10 (and with the word LM): median CPU ms of decoding per 640 ms chunk in the first and in
  the last minute of the longest file, and the process's resident memory at the end of the
  first minute and at the end;
- ``decode`` of each file in full context, chunk-masked and simulated streaming (chunk 16,
  the same left chunks): wall seconds, peak RSS, and the WER of the long file against the WER
  of the same utterances (in the same order, repeats included) decoded one by one;
- full-context ``decode`` of the file of the middle length by ``--max-window-seconds``
  (``--windows``, seconds): how the window trades WER against memory.

Prints markdown tables (and writes them to OUT/bench_long.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

CHUNK, RATE = 16, 16000


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(data: Path, out: Path, minutes: List[int]) -> Dict[int, Path]:
    """OUT/long_<m>min/{audio.wav, cuts.jsonl.gz}: the set's utterances end to end, and the
    same utterances one by one (OUT/utterances) for the per-utterance WER."""
    import soundfile as sf
    from lhotse import Recording, SupervisionSegment

    from wenet_lite.data.manifest import cut_samples, cut_text, from_pairs, load_cuts, save_cuts

    cuts = sorted(load_cuts(data), key=lambda c: c.id)
    made = {}
    for m in minutes:
        folder = out / f"long_{m}min"
        wav = folder / "audio.wav"
        if not (folder / "utterances.txt").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            pieces, texts, total, i = [], [], 0, 0
            while total < m * 60 * RATE:
                cut = cuts[i % len(cuts)]
                samples = cut_samples(cut, RATE)
                pieces.append(samples)
                texts.append(cut_text(cut))
                total += samples.size
                i += 1
            sf.write(wav, np.concatenate(pieces), RATE, subtype="PCM_16")
            rec = Recording.from_file(str(wav), recording_id=f"long{m}")
            sup = SupervisionSegment(f"long{m}", rec.id, 0.0, rec.duration, text=" ".join(texts))
            save_cuts(from_pairs([(rec, sup)]), folder / "cuts.jsonl.gz")
            ids = [cuts[k % len(cuts)].id for k in range(i)]
            (folder / "utterances.txt").write_text("\n".join(ids) + "\n")
        made[m] = folder
    return made


def stream_worker(args: argparse.Namespace) -> Dict[str, Any]:
    """One streaming run over the longest file, in this process."""
    import soundfile as sf
    import torch

    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.search.options import SearchOptions

    torch.set_num_threads(1)
    beam = args.mode == "prefix_beam"
    search = SearchOptions(
        mode=args.mode,
        beam_size=10 if beam else None,
        lm=args.lm_file,
        hotwords=args.hotwords_file,
        token_min_logp=-5 if beam else None,
    )
    rec = open_recognizer(
        args.model,
        Chunking(CHUNK, args.left_chunks),
        search,
        endpoint=EndpointConfig(enabled=args.endpoint == "on"),
    )
    audio, rate = sf.read(args.audio, dtype="float32")
    step = CHUNK * 4 * 160  # one chunk of audio per call, as a live source delivers it
    stream = rec.create_stream()
    times: List[float] = []
    rss_1min = None
    for start in range(0, len(audio), step):
        stream.accept_waveform(rate, audio[start : start + step])
        t0 = time.thread_time()  # CPU time: what the search costs, not what a neighbour took
        while rec.decode_streams([stream]):
            pass
        times.append(time.thread_time() - t0)
        if rss_1min is None and start + step >= 60 * rate:
            rss_1min = _rss_mb()
    stream.input_finished()
    rec.decode_until_done([stream])
    per_min = int(60 * rate / step)
    return {
        "first_ms": 1000 * float(np.median(times[:per_min])),
        "last_ms": 1000 * float(np.median(times[-per_min:])),
        "rss_1min": rss_1min,
        "rss_end": _rss_mb(),
        "peak": _peak_mb(),
        "segments": stream.num_final_results,
        "minutes": len(audio) / rate / 60,
    }


def decode_worker(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_cuts
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer

    torch.set_num_threads(1)
    chunk = Chunking(CHUNK, args.left_chunks) if args.dmode != "full" else Chunking()
    opts = DecodeOptions(
        chunking=chunk,
        simulate_streaming=args.dmode == "simulated",
        max_window_seconds=args.max_window,
    )
    start = time.perf_counter()
    report = decode_cuts(open_recognizer(args.model, offline=opts), args.data_file, args.dout)
    wall = time.perf_counter() - start
    per_utt = {r.utt_id: [r.score.words.errors, r.score.words.ref_len] for r in report.results}
    errors, words = (sum(v[k] for v in per_utt.values()) for k in (0, 1))
    return {"wall": wall, "peak": _peak_mb(), "wer": 100 * errors / max(words, 1), "utts": per_utt}


def same_utterances_wer(single: Dict[str, Any], folder: Path) -> float:
    """WER of the utterances in a long file (in its order, repeats included), decoded one by
    one."""
    ids = (folder / "utterances.txt").read_text().split()
    errors = sum(single["utts"][i][0] for i in ids)
    words = sum(single["utts"][i][1] for i in ids)
    return 100 * errors / max(words, 1)


def _run(argv: List[str]) -> Dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"worker {argv} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True)
    p.add_argument("--data", type=Path, help="prepared test set")
    p.add_argument("--lm", help="word LM for a prefix beam + LM row")
    p.add_argument("--hotwords", help="hotword list for a prefix beam + hotwords row")
    p.add_argument("--minutes", type=int, nargs="+", default=[1, 10, 60])
    p.add_argument("--left-chunks", type=int, default=4, help="history of the chunked runs (4)")
    p.add_argument("--out", type=Path, default=Path("exp/bench_long"))
    p.add_argument(
        "--windows", type=float, nargs="*", default=[10, 20, 30, 60, 120],
        help="full-context window sweep (seconds) over the file of the middle length",
    )  # fmt: skip
    p.add_argument("--max-window", type=float, default=30.0)
    p.add_argument(
        "--parts", nargs="+", choices=["stream", "decode", "windows"],
        default=["stream", "decode", "windows"], help="which tables (all three)",
    )  # fmt: skip
    # worker modes
    p.add_argument("--worker", choices=["stream", "decode"])
    p.add_argument("--audio")
    p.add_argument("--mode", default="greedy")
    p.add_argument("--endpoint", default="off")
    p.add_argument("--lm-file")
    p.add_argument("--hotwords-file")
    p.add_argument("--dmode")
    p.add_argument("--data-file")
    p.add_argument("--dout")
    args = p.parse_args(argv)
    if args.worker == "stream":
        print(json.dumps(stream_worker(args)))
        return
    if args.worker == "decode":
        print(json.dumps(decode_worker(args)))
        return
    if args.data is None:
        p.error("--data is required")
    common = ["--model", args.model, "--left-chunks", str(args.left_chunks)]
    files = build(args.data, args.out, args.minutes)
    longest = files[max(files)]
    lines = [
        f"`stream` of {max(files)} minutes ({longest}/audio.wav) with `{args.model}`, chunk "
        f"{CHUNK}, left chunks {args.left_chunks}, one thread, 640 ms of audio per call:",
        "",
        "| search | endpointing | CPU ms/chunk, first minute | CPU ms/chunk, last minute "
        "| last/first | RSS MB at 1 min | RSS MB at end | growth MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines = lines if "stream" in args.parts else []
    configs = [("greedy", "off", None, None), ("prefix_beam", "off", None, None)]
    configs += [("prefix_beam", "off", args.lm, None)] if args.lm else []
    configs += [("prefix_beam", "off", None, args.hotwords)] if args.hotwords else []
    configs += [("greedy", "on", None, None), ("prefix_beam", "on", None, None)]
    for mode, endpoint, lm, hot in configs if "stream" in args.parts else []:
        wav = str(longest / "audio.wav")
        extra = (["--lm-file", lm] if lm else []) + (["--hotwords-file", hot] if hot else [])
        r = _run(["--worker", "stream", *common, "--audio", wav, "--mode", mode,
                  "--endpoint", endpoint, *extra])  # fmt: skip
        lines.append(
            f"| {mode + (' + LM' if lm else '') + (' + hotwords' if hot else '')} | {endpoint} | "
            f"{r['first_ms']:.1f} | "
            f"{r['last_ms']:.1f} | {r['last_ms'] / r['first_ms']:.2f} | {r['rss_1min']:.0f} | "
            f"{r['rss_end']:.0f} | {r['rss_end'] - r['rss_1min']:+.0f} |"
        )
        print(lines[-1], flush=True)
    lines += (
        []
        if "decode" not in args.parts
        else [
            "",
            f"`decode` of the long files (greedy, one thread; chunked modes chunk {CHUNK}, left "
            f"chunks {args.left_chunks}) against the same utterances decoded one by one:",
            "",
            "| mode | minutes | wall s | s per minute | peak RSS MB | WER long | WER one by one |",
            "|---|---|---|---|---|---|---|",
        ]
    )
    for dmode in ("full", "chunk-masked", "simulated") if "decode" in args.parts else ():
        single = _run(["--worker", "decode", *common, "--dmode", dmode, "--data-file",
                       str(args.data), "--dout", str(args.out / f"one_{dmode}")])  # fmt: skip
        for m, folder in sorted(files.items()):
            cuts, dout = str(folder / "cuts.jsonl.gz"), str(folder / f"decode_{dmode}")
            r = _run(["--worker", "decode", *common, "--dmode", dmode, "--data-file", cuts,
                      "--dout", dout])  # fmt: skip
            lines.append(
                f"| {dmode} | {m} | {r['wall']:.1f} | {r['wall'] / m:.2f} | {r['peak']:.0f} | "
                f"{r['wer']:.2f} | {same_utterances_wer(single, folder):.2f} |"
            )
            print(lines[-1], flush=True)
    if args.windows and "windows" in args.parts:
        m = sorted(files)[len(files) // 2]
        lines += [
            "",
            f"`decode` in full context of the {m}-minute file, by `--max-window-seconds` "
            "(windows overlap by 4 s):",
            "",
            "| window s | wall s | peak RSS MB | WER long | WER one by one |",
            "|---|---|---|---|---|",
        ]
        single = _run(["--worker", "decode", *common, "--dmode", "full", "--data-file",
                       str(args.data), "--dout", str(args.out / "one_full")])  # fmt: skip
        for w in args.windows:
            dout = str(files[m] / f"decode_full_window{w:g}")
            r = _run(["--worker", "decode", *common, "--dmode", "full", "--max-window", str(w),
                      "--data-file", str(files[m] / "cuts.jsonl.gz"), "--dout", dout])  # fmt: skip
            lines.append(
                f"| {w:g} | {r['wall']:.1f} | {r['peak']:.0f} | {r['wer']:.2f} | "
                f"{same_utterances_wer(single, files[m]):.2f} |"
            )
            print(lines[-1], flush=True)
    (args.out / "bench_long.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
