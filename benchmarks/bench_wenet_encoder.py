"""Our engines beside WeNet's own streaming encoder, one stream, one thread, encoder + CTC head
per chunk (no features, no search), the same windows for all.

    python benchmarks/bench_wenet_encoder.py --wenet DIR [--config conf/conformer_u2.yaml]

``--wenet`` is a checkout of github.com/wenet-e2e/wenet (its ``wenet/models/transformer``
package is imported from there; nothing of it is in this repository). WeNet's
``ConformerEncoder`` is built with our config's sizes (blocks, d_model, heads, FFN, conv
kernel, causal conv with layer norm, rel-pos self-attention, conv2d subsampling by 4) and run
with its ``forward_chunk(xs, offset, required_cache_size=C*N, att_cache, cnn_cache)``, its
runtime's streaming call, followed by a CTC projection + log-softmax of the same vocabulary.
Random weights (seed 0): speed does not depend on them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import torch


def _wenet(args: argparse.Namespace, cfg, vocab: int) -> Callable[[], Callable]:
    """A factory of fresh WeNet streams: each call returns a step over one window."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # wenet_golden
    import wenet_golden  # noqa: PLC0415 - WeNet's model code without its CLI's dependencies

    wenet_golden._stand_ins(Path(args.wenet).resolve())
    from wenet.models.transformer.encoder import ConformerEncoder  # noqa: PLC0415

    enc = cfg.encoder
    torch.manual_seed(0)
    model = ConformerEncoder(
        input_size=cfg.features.num_mel_bins, output_size=enc.d_model,
        attention_heads=enc.num_heads, linear_units=enc.ffn_dim, num_blocks=enc.num_blocks,
        cnn_module_kernel=enc.conv_kernel, causal=True, cnn_module_norm="layer_norm",
        pos_enc_layer_type="rel_pos", selfattention_layer_type="rel_selfattn",
        input_layer="conv2d", normalize_before=True, macaron_style=True, activation_type="swish",
    ).eval()  # fmt: skip
    ctc = torch.nn.Linear(enc.d_model, vocab)
    cached = args.chunk_size * args.left_chunks

    def new_stream() -> Callable[[torch.Tensor], None]:
        state = {"offset": 0, "att": torch.zeros(0, 0, 0, 0), "cnn": torch.zeros(0, 0, 0, 0)}

        def step(window: torch.Tensor) -> None:
            out, state["att"], state["cnn"] = model.forward_chunk(
                window, state["offset"], cached, state["att"], state["cnn"]
            )
            state["offset"] += out.size(1)
            torch.log_softmax(ctc(out), dim=-1)

        return step

    return new_stream


def _engine(engine) -> Callable[[], Callable]:
    """A factory of fresh streams on one of our engines."""

    def new_stream() -> Callable[[torch.Tensor], None]:
        state = [engine.init_state(1)]

        def step(window: torch.Tensor) -> None:
            _, state[0] = engine.run(window, torch.tensor([window.size(1)]), state[0])

        return step

    return new_stream


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wenet", required=True, help="a wenet-e2e/wenet checkout")
    p.add_argument("--config", default="conf/conformer_u2.yaml")
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--left-chunks", type=int, default=4)
    p.add_argument("--chunks", type=int, default=40, help="chunks streamed per pass")
    p.add_argument("--repeats", type=int, default=3, help="best of")
    args = p.parse_args()
    torch.set_num_threads(1)
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, make_engine

    cfg = load_config(args.config)
    torch.manual_seed(0)
    model = build_model(cfg, args.vocab).eval()
    chunking = Chunking(args.chunk_size, args.left_chunks)
    window = model.encoder.subsampling.window_size(args.chunk_size)
    gen = torch.Generator().manual_seed(1)
    windows = [torch.randn(1, window, cfg.features.num_mel_bins, generator=gen)
               for _ in range(args.chunks)]  # fmt: skip
    streams: Dict[str, Callable[[], Callable]] = {  # built first: the exports take minutes
        "WeNet ConformerEncoder.forward_chunk (eager)": _wenet(args, cfg, args.vocab),
        **{name: _engine(make_engine(EngineSpec(kind, "int8" if int8 else "fp32"), model, chunking))
           for name, kind, int8 in (("torch", "torch", False), ("torch int8", "torch", True),
                                    ("onnxruntime", "onnxruntime", False),
                                    ("executorch", "executorch", False),
                                    ("executorch int8", "executorch", True))},
    }  # fmt: skip
    times: Dict[str, float] = {}
    for name, new_stream in streams.items():
        best = float("inf")
        for _ in range(args.repeats):
            step = new_stream()
            with torch.inference_mode():
                step(windows[0])  # warm-up
                start = time.perf_counter()
                for w in windows:
                    step(w)
            best = min(best, time.perf_counter() - start)
        times[name] = 1000 * best / len(windows)
        print(f"{name}: {times[name]:.1f} ms", file=sys.stderr)
    base = times["WeNet ConformerEncoder.forward_chunk (eager)"]
    ours = times["torch"]
    print(f"{args.config}, vocab {args.vocab}, C={args.chunk_size}, N={args.left_chunks}, one "
          f"stream, one thread, {args.chunks} chunks, best of {args.repeats}")  # fmt: skip
    print("| runs the chunk | ms a chunk | x WeNet | x our eager |\n|---|---|---|---|")
    for name, ms in times.items():
        print(f"| {name} | {ms:.1f} | {ms / base:.2f}x | {ms / ours:.2f}x |")


if __name__ == "__main__":
    main()
