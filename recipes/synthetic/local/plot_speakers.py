#!/usr/bin/env python3
"""Picture who spoke when: a recording's reference speaker turns (RTTM) above the turns
`transcribe --speakers` finds, with the diarization error rate of each row.

Usage:
    python recipes/synthetic/local/plot_speakers.py --audio sample.wav --rttm sample.rttm \
        [--stm sample.stm] [--model exp/synthetic/avg_5.pt] [--speakers auto] [--out speakers.png]

Rows: the reference; with ``--stm``, our labels over the STM's utterances as the speech (the
speaker assignment alone, as the tests score it); with ``--model``, `transcribe --speakers`
end to end (the model's words and the VAD decide where the speech is). pyannote-audio's wheel
ships a two-speaker telephone call with all three files (``pyannote/audio/sample/``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Tuple

Turns = List[Tuple[float, float, str]]


def rows(args: argparse.Namespace) -> List[Tuple[str, Turns]]:
    import soundfile as sf

    from wenet_lite.speakers.der import diarization_error_rate, read_rttm, stm_transcript
    from wenet_lite.speakers.diarize import Diarizer, SpeakerOptions, speaker_turns

    reference = read_rttm(args.rttm)
    wav, rate = sf.read(args.audio, dtype="float32", always_2d=True)
    wav = wav.mean(axis=1)
    count = None if args.speakers == "auto" else int(args.speakers)
    options = SpeakerOptions(num_speakers=count)
    out: List[Tuple[str, Turns]] = [("reference (RTTM)", reference)]
    if args.stm:
        diarizer = Diarizer(options)
        transcript = stm_transcript(args.stm, args.audio.name, len(wav) / rate)
        labelled = diarizer.label(transcript, wav, rate)
        out.append(("ours, the STM's utterances as speech",
                    [(t.start, t.end, t.speaker) for t in speaker_turns(labelled)]))  # fmt: skip
    if args.model:
        from wenet_lite.transcription import Transcriber

        tr = Transcriber(args.model, speakers=options, vad=True)
        labelled = tr.file(str(args.audio))
        out.append((f"ours end to end (`transcribe --speakers {args.speakers} --vad on`)",
                    [(t.start, t.end, t.speaker) for t in speaker_turns(labelled)]))  # fmt: skip
    for label, turns in out[1:]:
        r = diarization_error_rate(reference, turns)
        print(
            f"{label}: DER {100 * r.rate:.1f} % (missed {r.missed:.2f} s, false alarm "
            f"{r.false_alarm:.2f} s, confusion {r.confusion:.2f} s of {r.speech:.2f} s)"
        )
    return out


def plot(out: List[Tuple[str, Turns]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wenet_lite.speakers.der import diarization_error_rate

    reference = out[0][1]
    fig, axes = plt.subplots(len(out), 1, figsize=(11, 1.2 + 1.1 * len(out)), sharex=True)
    colours = plt.get_cmap("tab10")
    end = max(e for _, turns in out for _, e, _ in turns)
    ref_names = sorted({w for _, _, w in reference})
    for k, (ax, (label, turns)) in enumerate(zip(axes, out)):
        names = sorted({w for _, _, w in turns})
        if k:  # our labels drawn in the colour of the reference speaker they map to
            report = diarization_error_rate(reference, turns)
            mapping = report.mapping
            label += f": DER {100 * report.rate:.1f} %"
        else:
            mapping = {n: n for n in names}
        for row, name in enumerate(names):
            colour = colours(ref_names.index(mapping[name]) if name in mapping else 7)
            spans = [(s, e - s) for s, e, w in turns if w == name]
            ax.broken_barh(spans, (row - 0.4, 0.8), color=colour)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_title(label, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlim(0, end + 0.5)
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audio", type=Path, required=True)
    p.add_argument("--rttm", type=Path, required=True, help="the reference speaker turns")
    p.add_argument("--stm", type=Path, help="the reference utterances (their times as speech)")
    p.add_argument("--model", help="an ASR model: adds transcribe --speakers end to end")
    p.add_argument("--speakers", default="auto", help="a number of speakers, or auto")
    p.add_argument("--out", type=Path, default=Path("speakers.png"))
    args = p.parse_args()
    plot(rows(args), args.out)


if __name__ == "__main__":
    main()
