"""`wenet-lite train-punct` and `wenet-lite punctuate`: a punctuation and casing model
trained from written text, and the words of stdin written with it."""

from __future__ import annotations

import argparse
import sys

from wenet_lite.cli.flags import output_dir, positive_int

__all__ = ["add_punctuate", "add_train_punct"]


def add_train_punct(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-punct",
        help="train a punctuation and casing model from written text",
        description="usage: wenet-lite train-punct --text books.txt [--text more.txt.gz] "
        "--out exp/punct [--epochs 4]\n\n"
        "Learns, from cased and punctuated text (a document or a sentence a line, UTF-8, "
        "gzipped if named .gz), to write a recogniser's words with the mark after each "
        "(none , . ? !) and its case (lower, Capitalised, UPPER, mixed as written). A share "
        "of the lines is held out and scored (F1 of each mark, case accuracy) beside a "
        "baseline that capitalises the first word and ends the text with a period, each line "
        "alone and 8 lines run together (where sentence ends inside a text count); "
        "DIR/metrics.json keeps the scores. Use it with `punctuate --model DIR`, and give DIR "
        "to transcribe, stream and serve (their punctuation flag).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--text", action="append", required=True, help="text file (repeatable)")
    p.add_argument("--out", type=output_dir, required=True, help="the model directory to write")
    p.add_argument("--epochs", type=float, default=4.0, help="passes over the text (4.0)")
    p.add_argument(
        "--max-steps", type=int, default=0, help="stop after this many steps (0: --epochs)"
    )
    p.add_argument("--held-out", type=float, default=0.05, help="share of lines scored (0.05)")
    p.add_argument(
        "--whole-lines", type=float, default=0.4,
        help="share of the training windows that hold one line alone, the rest running on "
        "across lines (0.4)",
    )  # fmt: skip
    p.add_argument(
        "--word-dropout", type=float, default=0.3,
        help="share of the known words each step sees as unknown, so that spelling and "
        "neighbours teach the marks too: what carries to text of another kind (0.3)",
    )  # fmt: skip
    p.add_argument("--dim", type=positive_int, default=192, help="model width (192)")
    p.add_argument("--layers", type=positive_int, default=4, help="convolution layers (4)")
    p.add_argument(
        "--right", type=int, default=2,
        help="words after a word each layer reads (2: a word's labels wait for 8 words)",
    )  # fmt: skip
    p.add_argument("--threads", type=positive_int, default=2, help="CPU threads (2)")
    p.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32",
        help="bf16: products in bf16 where the CPU has it natively (AMX, AVX-512 bf16; "
        "elsewhere fp32); weights stay fp32 (fp32)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="the held-out split and the weights (0)")
    p.add_argument("--no-progress", action="store_true", help="log lines instead of a bar")
    p.set_defaults(func=_run_train_punct)


def _run_train_punct(args: argparse.Namespace) -> int:
    import torch

    from wenet_lite.cli.flags import UsageError
    from wenet_lite.punct.model import PunctConfig
    from wenet_lite.punct.train import PunctTrainOptions, train_punct

    if not 0 <= args.held_out < 1:
        raise UsageError(f"--held-out {args.held_out}: give a share in [0, 1)")
    for flag, share in (("--whole-lines", args.whole_lines), ("--word-dropout", args.word_dropout)):
        if not 0 <= share < 1:
            raise UsageError(f"{flag} {share}: give a share in [0, 1)")
    if not 0 <= args.right <= 64:
        raise UsageError(f"--right {args.right}: give 0 to 64 words")
    if not 0 < args.epochs <= 10_000:  # inf and nan too
        raise UsageError(f"--epochs {args.epochs}: give a number of passes from 0 to 10000")
    if args.max_steps < 0:
        raise UsageError(f"--max-steps {args.max_steps}: give 0 (--epochs decides) or more")
    torch.set_num_threads(args.threads)
    try:
        cfg = PunctConfig(dim=args.dim, num_layers=args.layers, right=args.right)
    except ValueError as e:  # a size out of its range: the flag's words
        flag = {"dim": "--dim", "num_layers": "--layers"}.get(str(e).split()[0], "")
        raise UsageError(f"{flag or 'train-punct'}: {e}") from None
    options = PunctTrainOptions(epochs=args.epochs, held_out=args.held_out, seed=args.seed,
                                max_steps=args.max_steps, precision=args.precision,
                                whole_lines=args.whole_lines,
                                word_dropout=args.word_dropout)  # fmt: skip
    metrics = train_punct(args.text, args.out, cfg, options, progress=not args.no_progress)
    print(f"{args.out}: {metrics['training words']} words trained in {metrics['minutes']} min")
    _print_scores(metrics, "held out")
    return 0


def _print_scores(metrics: dict, what: str) -> None:
    for who in ("model", "baseline", "model, running text", "baseline, running text"):
        scores = metrics.get(who)
        if isinstance(scores, dict):
            shown = ", ".join(f"{k} {v}" for k, v in scores.items() if k != "words")
            print(f"{what} ({scores['words']} words), {who}: {shown}")


def add_punctuate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "punctuate",
        help="write lines of words from stdin cased and punctuated",
        description="usage: wenet-lite punctuate --model exp/punct < words.txt\n"
        "       echo 'HELLO WORLD HOW ARE YOU' | wenet-lite punctuate --model exp/punct\n\n"
        "       wenet-lite punctuate --model exp/punct --score written.txt\n\n"
        "Reads lines of words (a recogniser's output: any case, no marks) on stdin and writes "
        "each line cased and punctuated by a model of `wenet-lite train-punct`. With --score, "
        "reads written text instead (cased and punctuated, a paragraph or a sentence a line), "
        "strips it to a recogniser's words, punctuates them and prints the scores against the "
        "text beside the baseline's (first word capitalised, a period at the end): each line "
        "alone and 8 lines run together, as train-punct scores its held-out lines.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, metavar="DIR", help="the punctuation model")
    p.add_argument(
        "--score", action="append", metavar="TEXT",
        help="written text to score the model on instead of reading stdin (repeatable)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="with --score: the scores as JSON")
    p.set_defaults(func=_run_punctuate)


def _run_punctuate(args: argparse.Namespace) -> int:
    import torch

    from wenet_lite.punct.punctuator import Punctuator

    torch.set_num_threads(1)
    punctuator = Punctuator.load(args.model)
    if args.score:
        return _score(punctuator, args)
    with_errors = 0
    for number, line in enumerate(sys.stdin.buffer, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            print(f"wenet-lite punctuate: stdin line {number}: not UTF-8, skipped", file=sys.stderr)
            with_errors += 1
            print("")
            continue
        print(punctuator.text(text), flush=True)
    return 1 if with_errors else 0


def _score(punctuator, args: argparse.Namespace) -> int:
    import json

    from wenet_lite.punct.train import evaluate, read_training_text

    lines = read_training_text(args.score)
    scores = evaluate(punctuator, lines)
    if args.json:
        print(json.dumps({"texts": args.score, "lines": len(lines), **scores}, indent=2))
    else:
        _print_scores(scores, ", ".join(args.score))
    return 0
