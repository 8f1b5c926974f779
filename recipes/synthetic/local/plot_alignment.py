#!/usr/bin/env python3
"""Picture one utterance's CTC posteriors: fbank, per-frame log-probabilities, greedy tokens.

Usage:
    python recipes/synthetic/local/plot_alignment.py --model exp/synthetic/avg_5.pt --audio a.flac \
        [--chunk-size 16] [--ref "THE REFERENCE"] [--out exp/synthetic/alignment.png]
    python recipes/synthetic/local/plot_alignment.py --model M --data data/test-clean \
        [--index 0] ...

Three panels sharing the time axis (encoder frames, converted to seconds): the log-mel fbank;
a heatmap of log P(token | frame) for the blank and every token the greedy path emits (rows
in order of first emission, so the alignment reads as a staircase); and the blank probability
with each emitted token written at the frame where the greedy path emits it. With --data the
utterance is the --index-th of the prepared part (sorted by id) and its transcript is the ref.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import numpy as np
import torch

from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import load_model

if TYPE_CHECKING:
    from lhotse import Cut

MAX_ROWS = 40  # token rows in the heatmap; the rest of a long utterance is left out


def pick_utterance(data: Path, index: int) -> Tuple[Cut, str, str]:
    """(cut, utterance id, transcript) of the index-th cut of a prepared part."""
    from wenet_lite.data.manifest import cut_text, nth_cut

    try:
        cut = nth_cut(data, index)
    except ValueError as e:
        raise SystemExit(f"error: --index: {e}") from None
    return cut, cut.id, cut_text(cut)


@torch.no_grad()
def posteriors(model_path: Path, audio: Union[str, Cut], chunk_size: int):
    """(fbank (T_in, F), log-probs (T, V), greedy (frame, token id) pairs, tokenizer,
    subsampling rate, config) of an audio file or of a cut's span (Kaldi segments too)."""
    from wenet_lite.data.manifest import cut_samples

    model, tokenizer, cfg = load_model(model_path)
    rate = cfg.features.sample_rate
    samples = load_audio(audio, rate) if isinstance(audio, str) else cut_samples(audio, rate)
    feats = compute_fbank(samples, cfg.features.sample_rate, cfg.features)  # (T_in, F)
    lens = torch.tensor([feats.size(0)])
    log_probs, _ = model.ctc_log_probs(feats[None], lens, chunk_size, -1)  # (1, T, V)
    log_probs = log_probs[0]  # (T, V)
    best = log_probs.argmax(-1).tolist()
    emitted = [(t, k) for t, k in enumerate(best) if k != 0 and (t == 0 or best[t - 1] != k)]
    rate = model.encoder.subsampling.rate
    return feats.numpy(), log_probs.numpy(), emitted, tokenizer, rate, cfg


def plot(args: argparse.Namespace, audio: Union[str, Cut], title: str, ref: Optional[str]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wenet_lite.model.asr import describe_model

    feats, log_probs, emitted, tok, rate, cfg = posteriors(args.model, audio, args.chunk_size)
    shift_ms = cfg.features.frame_shift_ms
    frame_s = rate * shift_ms / 1000  # seconds per encoder frame
    rows: List[int] = [0]
    for _, k in emitted:
        if k not in rows and len(rows) < MAX_ROWS:
            rows.append(k)
    labels = ["<blk>"] + [tok.id_to_piece(k) for k in rows[1:]]
    hyp = tok.decode([k for _, k in emitted])
    t_end = log_probs.shape[0] * frame_s
    fig, axes = plt.subplots(3, 1, figsize=(12, 9), sharex=True,
                             gridspec_kw={"height_ratios": [1, 2.2, 1]})  # fmt: skip
    axes[0].imshow(feats.T, origin="lower", aspect="auto", extent=(0, feats.shape[0] * shift_ms
                   / 1000, 0, feats.shape[1]), cmap="magma")  # fmt: skip
    axes[0].set_ylabel("mel bin")
    image = axes[1].imshow(log_probs[:, rows].T, aspect="auto", interpolation="nearest",
                           extent=(0, t_end, len(rows) - 0.5, -0.5), vmin=-15, vmax=0,
                           cmap="viridis")  # fmt: skip
    axes[1].set_yticks(range(len(rows)), labels, fontsize=7)
    axes[1].set_ylabel("token (first-emission order)")
    fig.colorbar(image, ax=axes[1], pad=0.01, label="log P")
    times = np.arange(log_probs.shape[0]) * frame_s
    axes[2].plot(times, np.exp(log_probs[:, 0]), color="gray", lw=1, label="P(blank)")
    for t, k in emitted:
        axes[2].axvline(t * frame_s, color="tab:red", lw=0.5, alpha=0.5)
        axes[2].text(t * frame_s, 1.02, tok.id_to_piece(k), rotation=90, fontsize=7,
                     va="bottom", ha="center")  # fmt: skip
    axes[2].set(ylim=(0, 1.0), xlabel="time (s)", ylabel="P(blank)")
    mode = f"chunk {args.chunk_size}" if args.chunk_size > 0 else "full context"
    lines = [f"{title}: {describe_model(cfg)}, {mode}, greedy CTC", f"hyp: {hyp}"]
    if ref:
        lines.append(f"ref: {ref}")
    fig.suptitle("\n".join(lines), fontsize=9, ha="left", x=0.01)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    return hyp


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, required=True, help="checkpoint or averaged model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--audio", help="an audio file")
    src.add_argument("--data", type=Path, help="a prepared part; see --index")
    p.add_argument("--index", type=int, default=0, help="with --data: which cut (by id order)")
    p.add_argument("--ref", help="reference transcript to print (with --audio)")
    p.add_argument("--chunk-size", type=int, default=0, help="encoder frames, 0: full context")
    p.add_argument("--out", type=Path, help="PNG (default: MODEL_DIR/alignment.png)")
    args = p.parse_args(argv)
    args.out = args.out or args.model.parent / "alignment.png"
    if args.data is not None:
        audio, title, ref = pick_utterance(args.data, args.index)
    else:
        audio, title, ref = args.audio, Path(args.audio).name, args.ref
    hyp = plot(args, audio, title, ref)
    print(f"{title}: {hyp}")
    print(args.out)


if __name__ == "__main__":
    main()
