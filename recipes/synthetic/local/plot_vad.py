#!/usr/bin/env python3
"""Picture how a live stream's segments end: by the VAD (endpoint rule "vad") or by the CTC
blanks (rules 1 and 2), on utterances joined by pauses of quiet and of noise.

Usage:
    python recipes/synthetic/local/plot_vad.py --model exp/synthetic/avg_5.pt \
        --data data/synthetic/test-clean [--utts 3] [--vad-silence 0.5] [--out vad.png]

Three panels sharing the time axis: the waveform, with where each utterance really is; Silero
VAD's speech probability with its threshold and the quiet level below it, and the turns the
stream's VAD reports (speech started to speech stopped); and the segments `wenet-lite stream`
closes with `--vad-silence` and without it (the blank rules), each with its first words.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Tuple

import numpy as np

RATE = 16000


def signal(data: Path, utts: int) -> Tuple[np.ndarray, List[Tuple[float, float]]]:
    """Utterances of a prepared part joined by pauses (quiet and noise in turn); their spans."""
    from wenet_lite.data.manifest import load_cuts
    from wenet_lite.features.audio import load_audio

    rng = np.random.default_rng(0)
    parts, spans, at = [], [], 0
    for k, cut in enumerate(list(load_cuts(data))[:utts]):
        x = load_audio(str(cut.recording.sources[0].source), RATE)
        parts.append(x)
        spans.append((at / RATE, (at + x.size) / RATE))
        at += x.size
        if k + 1 < utts:
            n = int((1.0 if k % 2 == 0 else 2.5) * RATE)
            t = np.arange(n) / RATE
            noisy = rng.normal(0, 0.05, n) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
            pause = noisy if k % 2 else rng.normal(0, 1e-3, n)
            parts.append(pause.astype(np.float32))
            at += n
    return np.concatenate(parts).astype(np.float32), spans


def segments(model: Path, x: np.ndarray, vad_silence: float):
    """(start, end, text) of the final segments, and the VAD's events (rule "vad" only)."""
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer
    from wenet_lite.runtime.endpoint import EndpointConfig

    rec = open_recognizer(model, Chunking(16, 4), endpoint=EndpointConfig(vad_silence=vad_silence))
    s = rec.create_stream()
    s.accept_waveform(RATE, x)
    s.input_finished()
    rec.decode_until_done([s])
    return [(r.start, r.end, r.text) for r in s.final_results], s.take_speech_events()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True, help="a prepared part (its first --utts)")
    p.add_argument("--utts", type=int, default=3)
    p.add_argument("--vad-silence", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=Path("vad.png"))
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wenet_lite.vad.silero import WINDOW, SileroVad, VadOptions

    x, spans = signal(args.data, args.utts)
    probs = SileroVad().probabilities(x)
    by_vad, events = segments(args.model, x, args.vad_silence)
    by_blanks, _ = segments(args.model, x, 0.0)
    t = np.arange(x.size) / RATE
    fig, axes = plt.subplots(3, 1, figsize=(12, 6.5), sharex=True,
                             gridspec_kw={"height_ratios": [1, 1, 1.2]})  # fmt: skip
    axes[0].plot(t[::8], x[::8], lw=0.4, color="0.3")
    for a, b in spans:
        axes[0].axvspan(a, b, color="tab:green", alpha=0.15)
    axes[0].set_ylabel("audio")
    axes[0].set_title("utterances (green) joined by 1 s of quiet and 2.5 s of noise")
    tw = (np.arange(probs.size) + 0.5) * WINDOW / RATE
    axes[1].plot(tw, probs, color="tab:blue", lw=1)
    o = VadOptions()
    axes[1].axhline(o.threshold, color="tab:red", lw=0.8, ls="--", label="threshold")
    axes[1].axhline(o.end_threshold, color="tab:orange", lw=0.8, ls=":", label="quiet below")
    starts = [e.seconds for e in events if e.kind == "started"]
    stops = [e.seconds for e in events if e.kind == "stopped"]
    for k, a in enumerate(starts):
        b = stops[k] if k < len(stops) else x.size / RATE
        axes[1].axvspan(a, b, color="tab:blue", alpha=0.12)
    axes[1].set_ylim(0, 1.05)
    axes[1].set_ylabel("P(speech)")
    axes[1].legend(loc="upper right", fontsize=8)
    axes[1].set_title("Silero VAD, and the turns a stream's VAD reports (shaded)")
    for row, (name, segs) in enumerate(((f"rule vad ({args.vad_silence:g} s)", by_vad),
                                        ("blank rules", by_blanks))):  # fmt: skip
        y = 1 - row
        for a, b, text in segs:
            axes[2].plot([a + 0.08, b - 0.08], [y, y], lw=6, solid_capstyle="butt",
                         color="tab:purple" if row == 0 else "tab:gray")  # fmt: skip
            axes[2].axvline(b, ymin=0.1 + 0.45 * (1 - row), ymax=0.45 + 0.45 * (1 - row),
                            color="k", lw=0.6)  # fmt: skip
            axes[2].text(a, y + 0.18, " ".join(text.split()[:3]), fontsize=7)
        axes[2].text(-0.02, y, name, ha="right", va="center", fontsize=8,
                     transform=axes[2].get_yaxis_transform())  # fmt: skip
    axes[2].set_ylim(-0.6, 1.6)
    axes[2].set_yticks([])
    axes[2].set_xlabel("seconds")
    axes[2].set_title("final segments of `wenet-lite stream` (chunk 16, left 4)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"{args.out}: {len(by_vad)} segments by the VAD, {len(by_blanks)} by the blanks")


if __name__ == "__main__":
    main()
