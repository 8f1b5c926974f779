#!/usr/bin/env python3
"""Picture where the attention decoder looks: one utterance's cross-attention map, output token
by encoder frame, with the CTC spike of each token marked.

Usage:
    python recipes/synthetic/local/plot_cross_attention.py --model exp/synthetic/avg_5.pt \
        --data data/test-clean \
        [--index 0] [--chunk-size 16] [--layer -1] [--out exp/synthetic/cross_attention.png]
    python recipes/synthetic/local/plot_cross_attention.py --model M --audio a.flac ...

The utterance is decoded as `decode --mode attention_rescoring` does (prefix beam 10, its
n-best rescored) over the encoder output of --chunk-size (0: full context). The left panel is
the left-to-right decoder's cross-attention of block --layer, averaged over heads: row u is
the step that predicts token u (the last row predicts the end of sentence), column t encoder
frame t, so a good alignment runs from top left to bottom right. White dots: the frame where
CTC emits the same token (its timestamp), which the decoder was never told. The right panel
is the same for the right-to-left decoder (tokens read backwards), when the model has one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import load_model
from wenet_lite.model.asr import describe_model
from wenet_lite.model.decoder import decoder_io
from wenet_lite.model.mask import valid_mask


@torch.no_grad()
def cross_attention(model, feats: torch.Tensor, chunk_size: int, layer: int):
    """(tokens, CTC frames, [per direction: (U+1, T) head-averaged weights]) of the rescored
    best hypothesis of ``feats`` (T_in, F)."""
    from wenet_lite.search.ctc_search import ctc_prefix_beam_search
    from wenet_lite.search.rescore import Segment, rescore

    out, lens = model.encoder(feats[None], torch.tensor([feats.size(0)]), chunk_size, -1)
    nbest = ctc_prefix_beam_search(model.ctc(out)[0], 10, 10)
    best = rescore(model.decoder, [Segment(nbest, out[0])], 0.5, 0.3)[0][0]
    tokens = torch.tensor([best.tokens])
    token_lens = torch.tensor([best.num_tokens])
    memory_mask = valid_mask(lens, out.size(1)).unsqueeze(1)  # (1, 1, T)
    maps = []
    nets = [model.decoder.l2r, *model.decoder.r2l]
    for reverse, net in zip((False, True), nets):
        ys_in, _ = decoder_io(tokens, token_lens, model.decoder.sos_eos, reverse)
        weights = net.cross_attention(ys_in, token_lens + 1, out, memory_mask)[layer]
        maps.append(weights[0].mean(0).float().numpy())  # (U+1, T)
    return best.tokens, best.timestamps, maps


def plot(
    pieces: List[str], frames: List[int], maps: List[np.ndarray], out: Path, title: str,
    frame_s: float,
) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(pieces) + 1
    fig, axes = plt.subplots(
        1, len(maps), figsize=(7.5 * len(maps), 1.2 + 0.22 * rows), squeeze=False
    )
    for col, weights in enumerate(maps):
        reverse = col == 1
        labels = (pieces[::-1] if reverse else pieces) + ["</s>"]
        marks = frames[::-1] if reverse else frames
        ax = axes[0, col]
        t = weights.shape[1]
        extent = (0, t * frame_s, rows - 0.5, -0.5)
        image = ax.imshow(weights, aspect="auto", cmap="viridis", extent=extent, vmin=0)
        ax.scatter([(f + 0.5) * frame_s for f in marks], range(len(marks)), s=9, c="white",
                   label="CTC emits the token")  # fmt: skip
        ax.set_yticks(range(rows))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel("encoder frame time (s)")
        ax.set_ylabel("predicted token")
        direction = "right-to-left decoder" if reverse else "left-to-right decoder"
        ax.set_title(f"{direction}: cross-attention (mean over heads)", fontsize=9)
        ax.legend(loc="upper right", fontsize=7)
        fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
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
    p.add_argument("--layer", type=int, default=-1, help="decoder block (-1: the last)")
    p.add_argument("--out", type=Path, help="PNG (default: MODEL_DIR/cross_attention.png)")
    args = p.parse_args(argv)
    model, tokenizer, cfg = load_model(args.model)
    if model.decoder is None:
        p.error(f"{args.model} has no attention decoder (decoder.type none)")
    blocks = len(model.decoder.l2r.blocks)
    if not -blocks <= args.layer < blocks:
        p.error(f"--layer {args.layer}: the decoder has {blocks} blocks")
    rate = cfg.features.sample_rate
    if args.data is not None:
        from wenet_lite.data.manifest import cut_samples, nth_cut

        try:
            cut = nth_cut(args.data, args.index)
        except ValueError as e:
            p.error(f"--index: {e}")
        samples, name = cut_samples(cut, rate), cut.id
    else:
        samples, name = load_audio(args.audio, rate), Path(args.audio).name
    feats = compute_fbank(samples, rate, cfg.features)  # (T_in, F)
    tokens, frames, maps = cross_attention(model, feats, args.chunk_size, args.layer)
    if not tokens:
        p.error(f"{name}: the model recognises nothing in it: no tokens to draw")
    frame_s = model.encoder.subsampling.rate * cfg.features.frame_shift_ms / 1000
    how = "full context" if args.chunk_size <= 0 else f"chunk {args.chunk_size}"
    title = (
        f"{name}: {describe_model(cfg)}; encoder {how}; decoder block {args.layer % blocks}\n"
        f"rescored: {tokenizer.decode(tokens)}"
    )
    out = args.out or args.model.parent / "cross_attention.png"
    plot([tokenizer.id_to_piece(t) for t in tokens], frames, maps, out, title, frame_s)
    print(out)
    return title


if __name__ == "__main__":
    main()
