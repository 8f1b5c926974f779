#!/usr/bin/env python3
"""One row per trained head set: the training run (steps, wall minutes, audio-s/s) and the
test WER of every search the model has, full context and simulated streaming, with how many
of the test words never seen in training each search spelled right.

Usage:
    python recipes/common/heads_table.py --data data/synthetic \
        --exp ctc=exp/heads/ctc --exp hybrid=exp/heads/hybrid [--test test-clean ...] \
        [--note "text"] [--out exp/heads/HEADS.md]

Reads NAME's EXP/decode/<test>/<mode>/summary.json and hyp.txt (``full``, ``chunk16_sim``,
``full_tgreedy``, ``full_tbeam``, ``chunk16_sim_tgreedy``, and with a blank penalty
``full_bp``, ``full_tgreedy_bp``) and EXP/tensorboard, as
recipes/synthetic/run.sh's stages 3-5 leave them (recipes/synthetic/compare_heads.sh);
one table per --test.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_table import _words  # noqa: E402

COLUMNS: Tuple[Tuple[str, str], ...] = (
    ("full", "CTC greedy, full"),
    ("chunk16_sim", "CTC greedy, chunk 16"),
    ("full_tgreedy", "transducer greedy, full"),
    ("full_tbeam", "transducer beam 4, full"),
    ("chunk16_sim_tgreedy", "transducer greedy, chunk 16"),
    ("full_bp", "CTC greedy with blank penalty, full"),
    ("full_tgreedy_bp", "transducer greedy with blank penalty, full"),
)


def training(exp: Path) -> Tuple[int, float, float]:
    """(steps, wall minutes from the first logged step to the last, mean audio-s/s); a
    curriculum's first part (EXP/first, run.sh --heads hybrid) counts with the rest. A part's
    steps are its last checkpoint's (the log only every train.log_interval steps)."""
    from wenet_lite.files.checkpoint import list_checkpoints
    from wenet_lite.train.events import read_scalars

    steps, minutes, speeds = 0, 0.0, []
    for part in (exp / "first", exp):
        if part != exp and not (part / "tensorboard").is_dir():
            continue
        scalars = read_scalars(part / "tensorboard")
        loss, speed = scalars.get("train/loss"), scalars.get("train/audio_seconds_per_second")
        if not loss or not speed:
            raise SystemExit(f"{part / 'tensorboard'}: no training scalars (train it first)")
        saved = list_checkpoints(part)
        steps += max(loss[-1].step, int(saved[-1].stem[len("step_") :]) if saved else 0)
        minutes += (loss[-1].wall_time - loss[0].wall_time) / 60
        speeds += [s.value for s in speed]
    return steps, minutes, sum(speeds) / len(speeds)


def wer_cell(summary: dict) -> str:
    """WER with its share of deletions among the errors: ``55.67 (12 % del)``."""
    wer = summary["wer"]
    errors = wer["substitutions"] + wer["deletions"] + wer["insertions"]
    share = 100 * wer["deletions"] / errors if errors else 0.0
    return f"{wer['percent']:.2f} ({share:.0f} % del)"


def unseen_right(
    refs: Dict[str, List[str]], vocab: Set[str], hyp: Path
) -> Optional[Tuple[int, int]]:
    """(test words never in the training text spelled right, their count) for one decode."""
    from wenet_lite.evaluation.score import read_hyps
    from wenet_lite.evaluation.wer import EPS, align_tokens

    if not hyp.is_file():
        return None
    hyps = {uid: text.split() for uid, text in read_hyps(hyp).items()}
    pairs = [
        (r, h) for uid, words in refs.items() for r, h in align_tokens(words, hyps.get(uid, []))
    ]
    unseen = [(r, h) for r, h in pairs if r != EPS and r not in vocab]
    return sum(r == h for r, h in unseen), len(unseen)


def table_lines(runs: Sequence[Tuple[str, Path]], data: Path, test: str) -> List[str]:
    from wenet_lite.data.manifest import cut_text, load_cuts

    vocab = {w for c in load_cuts(data / "train-clean-100") for w in _words(cut_text(c))}
    refs = {c.id: _words(cut_text(c)) for c in load_cuts(data / test)}
    head = ["heads", "steps", "train min", "audio s/s"] + [f"{t} WER" for _, t in COLUMNS]
    lines = [
        "| " + " | ".join(head) + " | unseen words right |",
        "|" + "---|" * (len(head) + 1),
    ]
    for name, exp in runs:
        steps, minutes, speed = training(exp)
        cells = [name, str(steps), f"{minutes:.1f}", f"{speed:.0f}"]
        best: Optional[Tuple[int, int, str]] = None
        for mode, title in COLUMNS:
            summary = exp / "decode" / test / mode / "summary.json"
            if not summary.is_file():
                cells.append("-")
                continue
            cells.append(wer_cell(json.loads(summary.read_text())))
            got = unseen_right(refs, vocab, summary.parent / "hyp.txt")
            if got is not None and mode.startswith("full") and (best is None or got[0] > best[0]):
                best = (got[0], got[1], title.rsplit(",", 1)[0])
        cells.append(f"{best[0]}/{best[1]} ({best[2]})" if best else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="prepared data (with train-clean-100)")
    p.add_argument("--exp", action="append", required=True, help="NAME=EXP, one per head set")
    p.add_argument("--test", action="append", help="a decoded part (repeatable; test-clean)")
    p.add_argument("--note", action="append", default=[], help="a line to add (repeatable)")
    p.add_argument("--out", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    runs = []
    for item in args.exp:
        name, sep, exp = item.partition("=")
        if not sep or not name or not exp:
            p.error(f"--exp {item!r}: give NAME=EXP")
        runs.append((name, Path(exp)))
    from wenet_lite.host.cpu import cpu_summary

    lines: List[str] = []
    for test in args.test or ["test-clean"]:
        lines += [f"WER in % on {test}:", "", *table_lines(runs, args.data, test), ""]
    lines += [f"{cpu_summary().splitlines()[0]}."]
    lines += ["", *args.note] if args.note else []
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
