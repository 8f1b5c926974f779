#!/usr/bin/env python3
"""`transcribe` of long files with long stretches without speech, with and without the VAD,
side by side: wall time and WER against the joined reference transcripts.

    python benchmarks/bench_vad_transcribe.py --model exp/synthetic/avg_5.pt \
        --data data/synthetic/test-clean [--files 4] [--utts 8] [--gap 20]

Each long file joins ``--utts`` utterances of a prepared set, with ``--gap`` seconds between
two of them, alternately silence with a little noise (-60 dBFS) and noise swelling at a
syllable's rhythm under a melody of tones (as loud as the speech). One thread, full context.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.signals

from tests.signals import noise_and_tones  # noqa: E402


def _gap(seconds: float, kind: int, rng: np.random.Generator) -> np.ndarray:
    if kind == 0:
        return rng.normal(0, 10 ** (-60 / 20), int(seconds * 16000)).astype(np.float32)
    return noise_and_tones(seconds, rng)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", type=Path, required=True, help="a prepared set (cuts.jsonl.gz)")
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--utts", type=int, default=8, help="utterances per file")
    p.add_argument("--gap", type=float, default=20.0, help="seconds between utterances")
    args = p.parse_args()
    torch.set_num_threads(1)
    from wenet_lite import Transcriber
    from wenet_lite.data.manifest import cut_text, load_cuts
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.evaluation.wer import sum_counts, word_errors
    from wenet_lite.features.audio import load_audio
    from wenet_lite.host.cpu import cpu_summary

    cuts = list(load_cuts(args.data))[: args.files * args.utts]
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files, refs, seconds, speech = [], [], 0.0, 0.0
        for f in range(args.files):
            part = cuts[f * args.utts : (f + 1) * args.utts]
            pieces = []
            for k, c in enumerate(part):
                audio = load_audio(c.recording.sources[0].source, 16000)
                speech += audio.size / 16000
                pieces += [audio] + ([_gap(args.gap, k % 2, rng)] if k + 1 < len(part) else [])
            x = np.concatenate(pieces)
            seconds += x.size / 16000
            path = Path(tmp) / f"long{f}.wav"
            sf.write(path, x, 16000, subtype="FLOAT")
            files.append(path)
            refs.append(normalize_text(" ".join(cut_text(c) for c in part)))
        for vad in (False, True):
            tr = Transcriber(args.model, vad=vad, progress=False)
            tr.file(files[0])  # warm-up
            t = time.perf_counter()
            hyps = [tr.file(path).text for path in files]
            wall = time.perf_counter() - t
            errors = sum_counts(word_errors(r, normalize_text(h)) for r, h in zip(refs, hyps))
            rows.append((vad, wall, 100 * errors.rate))
    print(cpu_summary().splitlines()[0])
    minutes, share = seconds / args.files / 60, 100 * speech / seconds
    print(f"{args.files} files of {minutes:.1f} min, {share:.0f} % speech ({args.utts} "
          f"utterances, {args.gap:g} s between them); model {args.model}")  # fmt: skip
    print("\n| VAD | wall s | x real time | WER % |\n|---|---|---|---|")
    for vad, wall, wer in rows:
        print(f"| {'on' if vad else 'off'} | {wall:.1f} | {seconds / wall:.0f} | {wer:.2f} |")


if __name__ == "__main__":
    main()
