"""`wenet-lite stream`: streaming recognition of files, stdin or a prepared set's audio."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wenet_lite.cli.flags import (
    DEVICE_HELP,
    UsageError,
    add_chunking,
    add_endpoint,
    add_engine,
    add_itn,
    add_options,
    add_punct,
    add_upsample,
    endpoint_from,
    options_from,
    output_dir,
    positive_int,
    recognizer_from,
    settings_record,
)

if TYPE_CHECKING:  # imported where used: `wenet-lite --help` stays instant
    from wenet_lite.cli.stream_files import StreamReport
    from wenet_lite.evaluation.score import References
    from wenet_lite.runtime.streaming import StreamingRecognizer


def add_stream(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.search.options import SearchOptions

    p = sub.add_parser(
        "stream",
        help="streaming recognition of audio files or live PCM on stdin",
        description="usage: wenet-lite stream --model exp/u2/avg_5.pt [--chunk-size 16] "
        "[--left-chunks -1] [--json] a.wav b.flac ...\n"
        "       arecord -f S16_LE -r 16000 -c 1 | wenet-lite stream --model M -\n"
        "       wenet-lite stream --model M --ref data/test-clean [--out DIR]\n\n"
        "Files: WAV/FLAC/... at any sample rate, mono or stereo, read piece by piece. '-': an "
        "audio file on stdin (a 16-bit WAV streams as it arrives), or with --raw RATE raw "
        "16-bit little-endian mono PCM at RATE Hz. Audio below the model's sample rate is "
        "upsampled with a warning (--no-upsample: refused). Partial hypotheses go to "
        "stderr as they change, final segments (split by endpointing) with word times to "
        "stdout; --json prints JSON lines of type partial/final/error instead, and a last "
        "summary line. --mode attention_rescoring: partials stay CTC, each final segment's "
        "n-best is re-ranked by the model's attention decoder. --ref PART scores the "
        "transcripts against a prepared set (its audio files are streamed when no AUDIO is "
        "given) and writes hyp.txt, details.txt, summary.txt and summary.json to --out, as "
        "`decode` does. Exit code 1 if an input failed (each named; the others are decoded).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="*", metavar="AUDIO", help="audio files, or - for stdin")
    p.add_argument(
        "--model", required=True,
        help="model file (checkpoint or averaged), or an export directory (`wenet-lite export "
        "--format executorch|onnx`: its engine and chunking, no model file needed)",
    )  # fmt: skip
    add_chunking(p, 16, 4)
    add_options(p, SearchOptions, skip=("nbest",))
    p.add_argument("--json", action="store_true", help="JSON lines on stdout")
    add_endpoint(p)
    p.add_argument(
        "--raw", type=positive_int, metavar="RATE",
        help="'-' is raw 16-bit mono PCM at RATE Hz (default: an audio file with a header)",
    )  # fmt: skip
    p.add_argument("--sample-rate", type=positive_int, dest="raw", help=argparse.SUPPRESS)
    add_upsample(p)
    p.add_argument(
        "--max-streams",
        type=positive_int,
        default=1,
        help="inputs decoded concurrently, in one batch (1)",
    )
    p.add_argument("--ref", help="prepared set (dir holding cuts.jsonl.gz) to score against")
    p.add_argument(
        "--out", type=output_dir,
        help="--ref: output dir (default: MODEL_DIR/stream_<ref>_<settings>)",
    )  # fmt: skip
    p.add_argument("--compare", help="--ref: count transcripts identical to DIR/hyp.txt")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    add_engine(p)
    add_punct(p, "final results cased and punctuated (partial ones as recognised)")
    add_itn(p, "final results (partial ones as recognised)")
    p.set_defaults(func=_run_stream)


def _run_stream(args: argparse.Namespace) -> int:
    from wenet_lite.cli.stream_files import stream_inputs
    from wenet_lite.evaluation.score import References
    from wenet_lite.search.options import SearchOptions

    endpoint = endpoint_from(args)
    options = options_from(SearchOptions, args)
    if not args.inputs and not args.ref:
        raise UsageError("give AUDIO files (or - for stdin), or --ref PART to stream its audio")
    if (args.out or args.compare) and not args.ref:
        raise UsageError("--out and --compare need --ref (the references to score against)")
    refs = References(args.ref) if args.ref else None
    recognizer = recognizer_from(args, options, endpoint)
    report = stream_inputs(
        recognizer, args.inputs or list(refs.audio if refs else []), json_lines=args.json,
        max_streams=args.max_streams, raw_rate=args.raw, upsample=args.upsample,
    )  # fmt: skip
    if refs is not None:
        _score_stream(args, refs, recognizer, report)
    return 1 if report.failed else 0


def _score_stream(
    args: argparse.Namespace,
    refs: References,
    recognizer: StreamingRecognizer,
    report: StreamReport,
) -> None:
    """`stream --ref`: decode's four files for the streamed transcripts, in --out."""

    from wenet_lite.evaluation.score import Transcripts, score_transcripts

    settings = {**settings_record(recognizer), **report.record()}
    texts = {refs.utterance(name): text for name, text in report.texts.items()}
    failed = [refs.utterance(name) for name in report.failures]
    chunking = recognizer.chunking
    tag = f"{Path(args.ref).name}_{recognizer.options.mode}_chunk{chunking.chunk_size}"
    out = args.out or Path(args.model).parent / f"stream_{tag}_left{chunking.left_chunks}"
    record = score_transcripts(
        Transcripts(texts, failed, settings), refs.texts, out,
        {"model": args.model, "data": args.ref}, args.compare,
    )  # fmt: skip
    same = record.get("identical")
    note = f", identical to --compare: {same['same']}/{same['compared']}" if same else ""
    wer, cer = record["wer"]["percent"], record["cer"]["percent"]
    print(f"WER {wer:.2f} %, CER {cer:.2f} %{note}: results in {out}", file=sys.stderr)
