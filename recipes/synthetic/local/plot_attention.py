#!/usr/bin/env python3
"""Picture what chunked relative-position self-attention attends to, for one utterance.

Usage:
    python recipes/synthetic/local/plot_attention.py --model exp/synthetic/avg_5.pt \
        --data data/test-clean \
        [--index 0] [--chunk-size 16] [--left-chunks 2] [--layers 0 -1] [--head 0] \
        [--max-frames 96] [--out exp/synthetic/attention.png]
    python recipes/synthetic/local/plot_attention.py --model M --audio a.flac ...

Self-attention is a matrix one can look at (seed 001): for every query frame i, a distribution
over key frames j. Decoded in chunks of C frames with N chunks of history, query i sees the keys
of its own chunk and the N before it, never a later one: the matrix is block lower-triangular,
with a band N chunks wide. Each score is the sum of two terms (Transformer-XL, seeds 003/004):
the content term (q_i + u)·k_j, which depends on what the frames hold, and the position term
(q_i + v)·p(i - j), which depends only on their distance; both divided by sqrt(d_k). One row
of panels per chosen layer: the attention weights softmax(content + position), the content
term and the position term, for one head, over the first --max-frames encoder frames (grey:
keys the chunk mask hides; lines: chunk boundaries). The position term depends on the query
and on the distance i - j only: it draws diagonal bands, the picture of relative positions.

The utterance is encoded with the chunk mask in one forward, which gives exactly what streaming
chunk by chunk with caches computes (tested); the terms come from the layers' own projections
(``RelPositionAttention.score_terms``), captured at each block's attention input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import load_model
from wenet_lite.model.asr import describe_model

Terms = Tuple[np.ndarray, np.ndarray, np.ndarray]  # weights, content, position: (T, T) each


@torch.no_grad()
def attention_terms(
    model, feats: torch.Tensor, chunk: int, left: int, layers: Sequence[int], head: int
) -> Dict[int, Terms]:
    """{layer: (weights, content, position)} of one head for a (T_in, F) utterance."""
    captured: Dict[int, tuple] = {}
    hooks = []
    for index in layers:
        attn = model.encoder.blocks[index].attn

        def keep(module, args, index=index) -> None:
            captured[index] = args  # (x (1, T, D), pos, mask, cache)

        hooks.append(attn.register_forward_pre_hook(keep))
    try:
        model.encoder(feats[None], torch.tensor([feats.size(0)]), chunk, left)
    finally:
        for hook in hooks:
            hook.remove()
    out: Dict[int, Terms] = {}
    for index in layers:
        attn = model.encoder.blocks[index].attn
        content, position, weights = attn.score_terms(*captured[index])  # (1, H, T, T) each
        out[index] = tuple(t[0, head].float().numpy() for t in (weights, content, position))
    return out


def plot(
    terms: Dict[int, Terms], out: Path, title: str, chunk: int, max_frames: int, frame_s: float
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ("weights softmax(content + position)", "content (q+u)·k / √d_k",
             "position (q+v)·p(i−j) / √d_k")  # fmt: skip
    fig, axes = plt.subplots(len(terms), 3, figsize=(15, 4.6 * len(terms)), squeeze=False)
    for row, (layer, arrays) in enumerate(terms.items()):
        t = min(max_frames, arrays[0].shape[0])
        hidden = ~np.isfinite(arrays[1][:t, :t])  # the content term is -inf where masked
        for col, (name, values) in enumerate(zip(names, arrays)):
            shown = values[:t, :t].copy()
            shown[hidden] = np.nan
            ax = axes[row, col]
            cmap = plt.get_cmap("viridis" if col == 0 else "coolwarm").with_extremes(bad="0.85")
            if col == 0:
                image = ax.imshow(shown, cmap=cmap, vmin=0, interpolation="nearest")
            else:
                bound = np.nanmax(np.abs(shown)) or 1.0
                image = ax.imshow(
                    shown, cmap=cmap, vmin=-bound, vmax=bound, interpolation="nearest"
                )
            if chunk > 0:
                for edge in range(chunk, t, chunk):
                    ax.axhline(edge - 0.5, color="white", lw=0.4)
                    ax.axvline(edge - 0.5, color="white", lw=0.4)
            ax.set_title(f"layer {layer}: {name}", fontsize=9)
            ax.set_xlabel(f"key frame j ({frame_s * 1000:.0f} ms each)")
            ax.set_ylabel("query frame i")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> str:
    """Returns the figure's title."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, required=True, help="checkpoint or averaged model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--audio", help="an audio file")
    src.add_argument("--data", type=Path, help="a prepared part; see --index")
    p.add_argument("--index", type=int, default=0, help="with --data: which cut (by id order)")
    p.add_argument("--chunk-size", type=int, default=16, help="encoder frames, 0: full (16)")
    p.add_argument("--left-chunks", type=int, default=2, help="history chunks, -1: all (2)")
    p.add_argument("--layers", type=int, nargs="+", default=[0, -1], help="blocks (0 -1)")
    p.add_argument("--head", type=int, default=0, help="attention head (0)")
    p.add_argument("--max-frames", type=int, default=96, help="encoder frames shown (96)")
    p.add_argument("--out", type=Path, help="PNG (default: MODEL_DIR/attention.png)")
    args = p.parse_args(argv)
    model, _, cfg = load_model(args.model)
    blocks = model.encoder.num_blocks
    layers = []
    for layer in args.layers:
        if not -blocks <= layer < blocks:
            p.error(f"--layers {layer}: the model has {blocks} blocks")
        layers.append(layer % blocks)
    if not 0 <= args.head < model.encoder.num_heads:
        p.error(f"--head {args.head}: the model has {model.encoder.num_heads} heads")
    rate = cfg.features.sample_rate
    if args.data is not None:
        from wenet_lite.data.manifest import cut_samples, nth_cut

        try:
            cut = nth_cut(args.data, args.index)
        except ValueError as e:
            p.error(f"--index: {e}")
        samples, name = cut_samples(cut, rate), cut.id  # the cut's span (Kaldi segments too)
    else:
        samples, name = load_audio(args.audio, rate), Path(args.audio).name
    feats = compute_fbank(samples, rate, cfg.features)  # (T_in, F)
    terms = attention_terms(model, feats, args.chunk_size, args.left_chunks, layers, args.head)
    frame_s = model.encoder.subsampling.rate * cfg.features.frame_shift_ms / 1000
    how = "full context" if args.chunk_size <= 0 else (
        f"chunk {args.chunk_size} ({args.chunk_size * frame_s:.2f} s), "
        + ("all history" if args.left_chunks < 0 else f"{args.left_chunks} left chunks")
    )  # fmt: skip
    title = f"{name}: {describe_model(cfg)}; {how}; head {args.head}"
    out = args.out or args.model.parent / "attention.png"
    plot(terms, out, title, args.chunk_size, args.max_frames, frame_s)
    print(out)
    return title


if __name__ == "__main__":
    main()
