#!/usr/bin/env python3
"""Plot training curves of a `wenet-lite train` experiment: loss and dev WER by step.

Usage:
    python tools/plot_training.py --exp exp/synthetic [--out exp/synthetic/training.png]

Reads the TensorBoard events in EXP/tensorboard (train/loss every log interval; dev/loss and
dev/wer_<setting> at each epoch end), falling back to EXP/train.log for the training loss when
there are no events. Writes one PNG with two panels: training and dev loss (log scale), and dev
WER per decoding setting (full context, chunk N), and prints the last dev WERs.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

Series = Dict[str, List[Tuple[int, float]]]

_TRAIN_LINE = re.compile(r"epoch \d+ step (\d+): loss ([-+.\deEnaif]+)")


def read_events(tb_dir: Path) -> Series:
    """{tag: [(step, value), ...]} of every scalar in the event files (sorted, last write wins)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: Series = {}
    for events in sorted(tb_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            series.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    # A resumed run repeats steps after its checkpoint; keep the newest value per step.
    return {tag: sorted(dict(points).items()) for tag, points in series.items()}


def read_log(log: Path) -> Series:
    points = [(int(m[1]), float(m[2])) for m in _TRAIN_LINE.finditer(log.read_text())]
    return {"train/loss": sorted(dict(points).items())} if points else {}


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
    args = p.parse_args(argv)
    series = read_events(args.exp / "tensorboard") if (args.exp / "tensorboard").is_dir() else {}
    if not series.get("train/loss") and (args.exp / "train.log").is_file():
        series.update(read_log(args.exp / "train.log"))
    if not series.get("train/loss"):
        raise SystemExit(f"error: no training loss in {args.exp}/tensorboard or train.log")
    out = args.out or args.exp / "training.png"
    plot(series, out, str(args.exp))
    for tag in sorted(t for t in series if t.startswith("dev/wer_")):
        step, value = series[tag][-1]
        print(f"{tag} at step {step}: {value:.2f}%")
    print(out)


if __name__ == "__main__":
    main()
