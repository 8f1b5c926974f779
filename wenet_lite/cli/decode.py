"""`wenet-lite decode | score | train-lm`: decoding and scoring sets, and the word LM."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wenet_lite.cli.flags import (
    DEVICE_HELP,
    UsageError,
    add_chunking,
    add_engine,
    add_options,
    chunking_from,
    file_in,
    offline_from,
    options_from,
    output_dir,
    rule_error,
)

if TYPE_CHECKING:  # imported where used: `wenet-lite --help` stays instant
    pass


def add_decode(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.search.options import SearchOptions

    p = sub.add_parser(
        "decode",
        help="decode a test set and score WER/CER",
        description="usage: wenet-lite decode --model exp/u2/avg_5.pt --data data/test-clean "
        "[--mode greedy|prefix_beam|attention_rescoring|transducer_greedy|transducer_beam] "
        "[--beam 10] [--lm lm.json] "
        "[--chunk-size 16 --left-chunks -1 [--simulate-streaming]] [--out DIR]\n\n"
        "Writes DIR/hyp.txt (id text), details.txt (alignments, token times, confidence), "
        "summary.txt (WER, CER with S/D/I, failures, RTF), summary.json (the same, for "
        "tools) and errors.txt. --chunk-size alone "
        "decodes with the streaming attention mask in one forward; --simulate-streaming runs "
        "the encoder chunk by chunk with caches (what `stream` computes). --lm fuses a word "
        "n-gram LM (`wenet-lite train-lm` JSON, or an ARPA file) into prefix beam search. "
        "Exit code 1 if some audio could not be read (each file named; the rest is decoded).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model file (checkpoint or averaged)")
    p.add_argument("--data", required=True, help="dir holding cuts.jsonl.gz, or the file")
    add_options(p, SearchOptions)
    add_chunking(p, 0, 4, full=True)
    p.add_argument("--simulate-streaming", action="store_true", help="chunk by chunk, cached")
    p.add_argument(
        "--batch-seconds",
        type=float,
        default=100.0,
        help="seconds of padded audio per batch (100.0)",
    )
    p.add_argument(
        "--max-window-seconds", type=float, default=30.0,
        help="longer utterances: chunked modes chunk by chunk, full context in overlapping "
        "windows of this many seconds, in bounded memory (30.0)",
    )  # fmt: skip
    p.add_argument(
        "--window-overlap-seconds", type=float, default=4.0,
        help="full-context windows share this much; each keeps its middle (4.0)",
    )  # fmt: skip
    p.add_argument(
        "--out", type=output_dir, help="output dir (default: MODEL_DIR/decode_<data>_<settings>)"
    )
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_engine(p, "--simulate-streaming: ")
    p.set_defaults(func=_run_decode)


def _run_decode(args: argparse.Namespace) -> int:
    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_cuts, default_out_dir
    from wenet_lite.search.options import SearchOptions

    try:
        options = DecodeOptions(
            search=options_from(SearchOptions, args), chunking=chunking_from(args),
            simulate_streaming=args.simulate_streaming, batch_seconds=args.batch_seconds,
            max_window_seconds=args.max_window_seconds,
            window_overlap_seconds=args.window_overlap_seconds,
            window_progress=not args.no_progress and sys.stderr.isatty(),
        )  # fmt: skip
    except ValueError as e:
        raise rule_error(e) from None
    out = args.out or default_out_dir(args.model, args.data, options)
    recognizer = offline_from(args, options)
    progress = not args.no_progress and sys.stderr.isatty()
    report = decode_cuts(recognizer, args.data, out, progress)
    print("\n".join(report.summary_lines()))
    print(f"results in {out}")
    for utt, message in report.failures:
        print(f"wenet-lite decode: error: {utt}: {message}", file=sys.stderr)
    return 1 if report.failures else 0


def add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="WER/CER of a transcript file against a prepared set",
        description="usage: wenet-lite score --hyp exp/x/ts16.txt --data data/test-clean "
        "--out exp/x/decode/ts16 [--compare exp/x/decode/chunk16_sim]\n\n"
        "--hyp: `id text` lines (hyp.txt), `PATH text` lines (examples/run_exported.py, "
        "examples/run_sherpa.py) or the JSON lines of `stream --json`. Writes hyp.txt, "
        "details.txt, summary.txt and summary.json to --out. --compare DIR counts the "
        "transcripts identical to DIR/hyp.txt (--require-identical: exit code 1 on a "
        "difference). Exit code 1 also when an utterance failed to decode.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--hyp", required=True, help="transcripts (see above)")
    p.add_argument("--data", required=True, help="prepared set: dir holding cuts.jsonl.gz")
    p.add_argument("--out", type=output_dir, required=True, help="output dir")
    p.add_argument("--compare", help="a decode/score dir whose hyp.txt to compare with")
    p.add_argument("--require-identical", action="store_true", help="exit 1 on any difference")
    p.set_defaults(func=_run_score)


def _run_score(args: argparse.Namespace) -> int:

    from wenet_lite.evaluation.score import References, read_transcripts, score_transcripts

    refs = References(args.data)
    transcripts = read_transcripts(args.hyp, refs.audio)
    if not transcripts.texts and not transcripts.failed:
        raise ValueError(f"{args.hyp}: no transcripts in it (WER over nothing would read 0 %)")
    inputs = {"hyp": args.hyp, "data": args.data}
    record = score_transcripts(transcripts, refs.texts, args.out, inputs, args.compare)
    print(Path(args.out, "summary.txt").read_text(encoding="utf-8"), end="")
    same = record.get("identical", {})
    if args.require_identical and same and same["same"] != same["compared"]:
        return 1
    return 1 if record["failed"] else 0


def add_train_lm(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-lm",
        help="train the word n-gram LM that decode/stream --lm fuse into prefix beam search",
        description="usage: wenet-lite train-lm --data data/train-clean-100 [--text lm.txt.gz] "
        "--out exp/u2/lm.json [--order 2]\n\n"
        "Counts words of the transcripts of prepared sets and/or text files (a sentence a "
        "line, gzipped if named .gz), normalised as the tokenizer normalises text, into an "
        "interpolated absolute-discounting n-gram. --out lm.json, or lm.arpa[.gz] for the same "
        "model as an ARPA back-off LM. Counting is in memory (millions of words); for "
        "LibriSpeech's 800 M-word LM text use KenLM or openslr.org/11's ARPA files. Train on "
        "training text only: test transcripts in the LM make the WER meaningless.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", action="append", default=[], help="prepared set (repeatable)")
    p.add_argument("--text", action="append", default=[], help="text file (repeatable)")
    p.add_argument(
        "--out", type=file_in("lm.json"), required=True,
        help="lm.json, or lm.arpa[.gz] (a directory: DIR/lm.json)",
    )  # fmt: skip
    p.add_argument("--order", type=int, choices=[2, 3], default=2, help="bigram or trigram (2)")
    p.add_argument("--discount", type=float, default=0.75, help="absolute discount (0.75)")
    p.set_defaults(func=_run_train_lm)


def _run_train_lm(args: argparse.Namespace) -> int:
    from wenet_lite.search.lm import train_lm_file

    if not args.data and not args.text:
        raise UsageError("give --data and/or --text")
    print(train_lm_file(args.data, args.text, args.out, args.order, args.discount))
    return 0
