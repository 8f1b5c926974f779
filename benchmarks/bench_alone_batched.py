"""Streams one at a time against all in one batch, per precision of the torch engine: the time
each takes and whether every stream's tokens are the same both ways (batched == alone).

    python benchmarks/bench_alone_batched.py --model exp/u2/avg_5.pt --data data/test-clean \\
        --streams 16 --precisions fp32,bf16,int8
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, List

import numpy as np


def _run(rec, audios: List[np.ndarray], groups: List[List[int]]) -> Dict[int, List[int]]:
    out = {}
    for group in groups:
        streams = []
        for i in group:
            s = rec.create_stream()
            s.accept_waveform(16000, audios[i])
            s.input_finished()
            streams.append(s)
        rec.decode_until_done(streams)
        out.update({i: s.result().token_ids for i, s in zip(group, streams)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="prepared set whose audio is streamed")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--left-chunks", type=int, default=4)
    args = p.parse_args()

    from wenet_lite.data.manifest import cut_samples, load_cuts
    from wenet_lite.host.cpu import cpu_summary
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, open_recognizer

    audios = [cut_samples(c, 16000) for c in list(load_cuts(args.data))[: args.streams]]
    n = len(audios)
    print(cpu_summary())
    print(f"{n} streams of {sum(a.size for a in audios) / 16000:.0f} s in all, chunk "
          f"{args.chunk_size}, {args.left_chunks} left chunks, one thread\n")  # fmt: skip
    print("| precision | one at a time s | all at once s | streams equal both ways |")
    print("|---|---:|---:|---:|")
    for precision in args.precisions.split(","):
        rec = open_recognizer(args.model, Chunking(args.chunk_size, args.left_chunks),
                              engine=EngineSpec(precision=precision))  # fmt: skip
        start = time.perf_counter()
        alone = _run(rec, audios, [[i] for i in range(n)])
        middle = time.perf_counter()
        batched = _run(rec, audios, [list(range(n))])
        end = time.perf_counter()
        equal = sum(alone[i] == batched[i] for i in range(n))
        print(f"| {precision} | {middle - start:.2f} | {end - middle:.2f} | {equal} of {n} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
