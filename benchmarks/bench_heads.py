#!/usr/bin/env python3
"""Decoding cost of the heads side by side: CTC greedy, transducer greedy and transducer
modified beam search, streaming N streams in lockstep (as bench_streaming.py), one model.

    python benchmarks/bench_heads.py [--config conf/synthetic_small.yaml] [--chunk 16]
        [--left 4] [--streams 1 16] [--seconds 20] [--beam 4] [--blank-bias 0.72]

Random weights with a transducer head (``model.transducer_weight`` 0.75); the joiner's blank
logit is raised by ``--blank-bias`` so that it emits about as often as a trained head (the
``tokens/s`` column says how often it did: a trained English model emits a few pieces a
second). CTC greedy's cost does not depend on what it emits; the transducer's grows with it
(one joiner call per emitted token, per hypothesis for the beam).
"""

from __future__ import annotations

import argparse

import torch
from bench_streaming import _run  # the same lockstep driver, run from benchmarks/


def _recognizer(config: str, chunk: int, left: int, mode: str, beam: int, bias: float):
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_streaming
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.search.options import SearchOptions

    cfg = load_config(config, ("model.transducer_weight=0.75",))
    torch.manual_seed(0)
    model = build_model(cfg, cfg.tokenizer.vocab_size).eval()
    assert model.transducer is not None
    with torch.no_grad():
        model.transducer.joiner.out.bias[0] += bias
    search = SearchOptions(mode=mode, beam_size=beam if mode == "transducer_beam" else None)
    return open_streaming((model, None, cfg), Chunking(chunk, left), search,
                          EndpointConfig(enabled=False))  # fmt: skip


def _tokens(stream) -> int:
    """Tokens a stream emitted (its hypotheses: without a tokenizer results are not spelled)."""
    closed = sum(h.num_tokens for h, _, _ in stream._closed)
    return closed + stream._hyp.num_tokens


def _keep_streams(rec) -> list:
    """The streams ``rec`` creates from now on (the driver does not return them)."""
    kept: list = []
    create = type(rec).create_stream

    def create_and_keep(*args, **kwargs):
        stream = create(rec, *args, **kwargs)
        kept.append(stream)
        return stream

    rec.create_stream = create_and_keep
    return kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="conf/synthetic_small.yaml")
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--left", type=int, default=4)
    p.add_argument("--streams", type=int, nargs="+", default=[1, 16])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--blank-bias", type=float, default=0.72)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from wenet_lite.host.cpu import cpu_summary

    print(f"{args.config}, chunk {args.chunk}, left {args.left}, {args.seconds:g} s a stream, "
          f"{args.threads} thread(s)\n{cpu_summary()}")  # fmt: skip
    print("| search | streams | step ms (mean / p95) | RTF per stream | x realtime | "
          "tokens/s a stream |\n|---|---|---|---|---|---|")  # fmt: skip
    for mode in ("greedy", "transducer_greedy", "transducer_beam"):
        rec = _recognizer(args.config, args.chunk, args.left, mode, args.beam, args.blank_bias)
        for n in args.streams:
            captured = _keep_streams(rec)
            r = _run(rec, n, args.seconds)
            tokens = sum(_tokens(s) for s in captured) / n / args.seconds
            print(f"| {mode} | {n} | {r['step_ms']:.1f} / {r['p95_ms']:.1f} | {r['rtf']:.4f} | "
                  f"{r['throughput']:.1f} | {tokens:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
