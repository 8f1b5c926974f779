#!/usr/bin/env python3
"""Plot training curves of a `wenet-lite train` experiment: loss and dev WER by step.

Usage:
    python recipes/common/plot_training.py --exp exp/synthetic [--out exp/synthetic/training.png]

Reads the TensorBoard events in EXP/tensorboard (train/loss every log interval; dev/loss and
dev/wer_<setting> at each epoch end). Writes one PNG with two panels: training and dev loss
(log scale), and dev WER per decoding setting (full context, chunk N), and prints the last dev
WERs. The title names the model (from EXP/config.yaml), or --title.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Tuple

Series = Dict[str, List[Tuple[int, float]]]


def read_events(tb_dir: Path) -> Series:
    """{tag: [(step, value), ...]} of every scalar in the event files."""
    from wenet_lite.train.events import read_scalars

    return {
        tag: [(s.step, s.value) for s in points] for tag, points in read_scalars(tb_dir).items()
    }


def model_title(exp: Path) -> str:
    """What was trained (from the experiment's resolved config), not where."""
    from wenet_lite.config import load_config
    from wenet_lite.model.asr import describe_model

    return f"training of {describe_model(load_config(exp / 'config.yaml'))}"


def plot(series: Series, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_wer) = plt.subplots(1, 2, figsize=(11, 4))
    for tag, label, style in (("train/loss", "train", "-"), ("dev/loss", "dev", "o-")):
        if series.get(tag):
            steps, values = zip(*series[tag])
            ax_loss.plot(steps, values, style, label=label, markersize=4)
    ax_loss.set(xlabel="step", ylabel="CTC loss per utterance", yscale="log", title="loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    wer_tags = sorted(t for t in series if t.startswith("dev/wer_"))
    for tag in wer_tags:
        steps, values = zip(*series[tag])
        ax_wer.plot(steps, values, "o-", label=tag[len("dev/wer_") :], markersize=4)
    ax_wer.set(xlabel="step", ylabel="WER %", title="dev WER (greedy)")
    ax_wer.set_ylim(0, max([100.0] + [v for t in wer_tags for _, v in series[t]]) * 1.02)
    ax_wer.grid(alpha=0.3)
    if wer_tags:
        ax_wer.legend()
    else:
        ax_wer.text(0.5, 0.5, "no validation yet", ha="center", transform=ax_wer.transAxes)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--exp", type=Path, required=True, help="experiment dir of `wenet-lite train`")
    p.add_argument("--out", type=Path, help="PNG to write (default EXP/training.png)")
    p.add_argument("--title", help="figure title (default: the model, from EXP/config.yaml)")
    args = p.parse_args(argv)
    series = read_events(args.exp / "tensorboard") if (args.exp / "tensorboard").is_dir() else {}
    if not series.get("train/loss"):
        raise SystemExit(f"error: no training loss in {args.exp}/tensorboard")
    out = args.out or args.exp / "training.png"
    title = args.title or (model_title(args.exp) if (args.exp / "config.yaml").is_file() else "")
    plot(series, out, title)
    for tag in sorted(t for t in series if t.startswith("dev/wer_")):
        step, value = series[tag][-1]
        print(f"{tag} at step {step}: {value:.2f}%")
    print(out)


if __name__ == "__main__":
    main()
