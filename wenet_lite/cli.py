"""`wenet-lite <subcommand>`: thin argparse shims over plain functions that tests call directly.

Each subcommand has an ``_add_<name>`` that declares its flags and a ``_run_<name>`` that
imports its module lazily (so `--help` is instant) and calls the typed function. Exit codes:
0 success, 1 some inputs failed (each named on stderr), 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import typing
from typing import Any, Callable, List, Literal, Optional, Sequence, Union

from wenet_lite.config import ConfigError

__all__ = ["main"]


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="override a config value, e.g. train.max_steps=1000 (repeatable)",
    )  # fmt: skip


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="write lhotse cuts manifests for a corpus",
        description="usage: wenet-lite prepare librispeech --root /data/LibriSpeech --out data\n"
        "       wenet-lite prepare list --src data.list|kaldi_dir|cuts.jsonl.gz --out data/NAME\n\n"
        "librispeech: one data/<part>/cuts.jsonl.gz per part found (or --parts). list: a WeNet "
        "data.list (JSON lines key/wav/txt), a Kaldi dir (wav.scp + text) or lhotse manifests.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("corpus", choices=["librispeech", "list"])
    p.add_argument("--root", help="librispeech: dir holding LibriSpeech/<part>/...")
    p.add_argument("--parts", help="librispeech: comma-separated parts (default: all found)")
    p.add_argument("--src", help="list: the manifest to convert")
    p.add_argument("--out", required=True, help="output dir")
    p.add_argument("--jobs", type=int, default=4, help="threads reading audio headers")
    p.set_defaults(func=_run_prepare)


def _run_prepare(args: argparse.Namespace) -> int:
    if args.corpus == "librispeech":
        from wenet_lite.data.librispeech import prepare_librispeech

        if not args.root:
            raise _UsageError("prepare librispeech needs --root")
        parts = args.parts.split(",") if args.parts else None
        results = prepare_librispeech(args.root, parts, args.out, num_jobs=args.jobs)
        for part, result in results.items():
            print(result.summary(f"{args.out}/{part}"))
        return 0
    from wenet_lite.data.manifest import prepare_cuts

    if not args.src:
        raise _UsageError("prepare list needs --src")
    print(prepare_cuts(args.src, args.out).summary(args.out))
    return 0


def _add_compute_cmvn(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compute-cmvn",
        help="global feature mean/istd of a training set",
        description="usage: wenet-lite compute-cmvn --config conf/conformer_u2.yaml "
        "--data data/train-clean-100 --out data/cmvn.json\n\n"
        "fbank as in training, without speed perturbation or dither; unusable utterances are\n"
        "skipped and counted. `train` reads DATA/cmvn.json by default.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="experiment YAML (its features section)")
    p.add_argument("--data", required=True, nargs="+", help="prepared part dir(s) or cuts files")
    p.add_argument("--out", required=True, help="output JSON")
    _add_set(p)
    p.add_argument("--jobs", type=int, help="DataLoader workers (default: data.num_workers)")
    p.add_argument(
        "--max-utts", type=int, default=0, metavar="N",
        help="use N utterances spread evenly over the set (default 0: all)",
    )  # fmt: skip
    p.set_defaults(func=_run_compute_cmvn)


def _run_compute_cmvn(args: argparse.Namespace) -> int:
    from wenet_lite.config import load_config
    from wenet_lite.data.compute_cmvn import compute_cmvn_file

    cfg = load_config(args.config, args.overrides)
    jobs = cfg.data.num_workers if args.jobs is None else args.jobs
    stats, skipped = compute_cmvn_file(
        args.data, cfg.features, args.out, num_workers=jobs, max_utterances=args.max_utts
    )
    note = f", skipped {sum(skipped.values())}" if skipped else ""
    print(f"{args.out}: {stats.count} frames{note}")
    return 0


def _add_compute_fbank(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compute-fbank",
        help="compute and store a training set's fbank once (faster training on few cores)",
        description="usage: wenet-lite compute-fbank --config conf/synthetic_small.yaml "
        "--data data/synthetic/train-clean-100 --jobs 2\n\n"
        "Training features as in training (speed 1.0, dither drawn once per utterance), stored\n"
        "as float16 in PART/fbank/ and attached to PART/cuts.jsonl.gz. `train` uses them when\n"
        "its features config is the same, and computes from audio what it cannot take from\n"
        "them (other speed factors). Run it again after `prepare` or a features change.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="experiment YAML (features, train.seed)")
    p.add_argument("--data", required=True, nargs="+", help="prepared part dir(s)")
    _add_set(p)
    p.add_argument("--jobs", type=int, help="DataLoader workers (default: data.num_workers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_compute_fbank)


def _run_compute_fbank(args: argparse.Namespace) -> int:
    from wenet_lite.config import load_config
    from wenet_lite.data.store_fbank import store_fbank

    cfg = load_config(args.config, args.overrides)
    jobs = cfg.data.num_workers if args.jobs is None else args.jobs
    for part in args.data:
        result = store_fbank(part, cfg.features, cfg.train.seed, jobs, not args.no_progress)
        note = ", ".join(f"{n} {r}" for r, n in result.skipped.items())
        print(f"{part}: stored fbank of {result.stored} of {result.total} utterances"
              + (f" (unusable audio: {note})" if note else ""))  # fmt: skip
    return 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (also under torchrun)",
        description="usage: wenet-lite train --config conf/conformer_u2.yaml --data data "
        "--exp exp/u2 [--set train.max_steps=1000] [--resume]\n"
        "       torchrun --nproc_per_node 4 -m wenet_lite train --config ... (same flags)\n\n"
        "Reads DATA/<part>/cuts.jsonl.gz for --train-part (comma-separated parts are joined)\n"
        "and --dev-part, and DATA/cmvn.json (see compute-cmvn). Trains the tokenizer on the\n"
        "training transcripts unless --tokenizer is given. Writes EXP/config.yaml, train.log,\n"
        "tensorboard/, tokenizer.model, skipped.json and step_N.pt checkpoints (only rank 0).\n"
        "--resume continues the newest checkpoint exactly (model, optimizer, sampler, RNG).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="experiment YAML")
    p.add_argument("--data", required=True, help="prepared data dir (holding <part>/cuts...)")
    p.add_argument("--exp", required=True, help="experiment dir for checkpoints and logs")
    _add_set(p)
    p.add_argument("--train-part", default="train-clean-100", help="comma-separated parts")
    p.add_argument("--dev-part", default="dev-clean", help="comma-separated; '' for none")
    p.add_argument("--cmvn", help="CMVN JSON (default: DATA/cmvn.json)")
    p.add_argument("--tokenizer", help="use this sentencepiece model instead of training one")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wenet_lite.train.trainer import TrainOptions, train

    def parts(text: str) -> tuple:
        return tuple(p for p in text.split(",") if p)

    if not parts(args.train_part):
        raise _UsageError("--train-part is empty")
    opts = TrainOptions(
        config=Path(args.config),
        data=Path(args.data),
        exp=Path(args.exp),
        overrides=tuple(args.overrides),
        train_parts=parts(args.train_part),
        dev_parts=parts(args.dev_part),
        cmvn=Path(args.cmvn) if args.cmvn else None,
        tokenizer=Path(args.tokenizer) if args.tokenizer else None,
        resume=args.resume,
        progress_bar=not args.no_progress,
    )
    result = train(opts)
    if result.is_main:
        print(f"{args.exp}: trained to step {result.step} (epoch {result.epoch - 1} done)")
    return 0


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "average",
        help="average checkpoints into one model file",
        description="usage: wenet-lite average --exp exp/u2 --num 5 [--best] "
        "[--out exp/u2/avg_5.pt]\n\n"
        "Averages the newest N step_N.pt of EXP (--best: the N kept checkpoints with the\n"
        "lowest dev loss) into a model file that decode, stream and export read.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--exp", required=True, help="experiment dir")
    p.add_argument("--num", type=int, default=5, help="checkpoints to average (default 5)")
    p.add_argument("--best", action="store_true", help="lowest dev loss instead of newest")
    p.add_argument("--out", help="output (default EXP/avg_N.pt or EXP/avg_best_N.pt)")
    p.set_defaults(func=_run_average)


def _run_average(args: argparse.Namespace) -> int:
    from wenet_lite.train.average import average_checkpoints

    print(average_checkpoints(args.exp, args.num, args.out, best=args.best))
    return 0


def _add_options(p: argparse.ArgumentParser, cls: type, skip: Sequence[str] = ()) -> None:
    """One flag per field of the options dataclass ``cls`` that declares one in its metadata
    (see ``decode/options.py``): type, choices and default come from the field."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "flag" not in f.metadata or f.name in skip:
            continue
        extra = {k: v for k, v in f.metadata.items() if k not in ("flag", "help")}
        kind = hints[f.name]
        if typing.get_origin(kind) is Union:  # Optional[X]
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if typing.get_origin(kind) is Literal:
            extra.setdefault("choices", typing.get_args(kind))
            kind = str
        default = f.default
        help_text = f.metadata["help"] + ("" if default is None else f" ({default})")
        p.add_argument(
            f.metadata["flag"], dest=f.name, type=kind, default=default, help=help_text, **extra
        )


def _options(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """``cls`` from the flags :func:`_add_options` declared; a refused value is a usage error."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name in args}
    try:
        return cls(**{**values, **given})
    except ValueError as e:
        raise _UsageError(str(e)) from None


def _add_chunking(p: argparse.ArgumentParser, chunk: int, left: int, full: str = "") -> None:
    p.add_argument(
        "--chunk-size", type=int, default=chunk,
        help=f"encoder frames per chunk{full} ({chunk})",
    )  # fmt: skip
    p.add_argument(
        "--left-chunks", type=int, default=left, help=f"history chunks, -1: all ({left})"
    )


def _chunking(args: argparse.Namespace) -> Any:
    from wenet_lite.model.chunking import Chunking

    try:
        return Chunking(args.chunk_size, args.left_chunks)
    except ValueError as e:
        raise _UsageError(str(e)) from None


def _add_decode(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.decode.options import SearchOptions

    p = sub.add_parser(
        "decode",
        help="decode a test set and score WER/CER",
        description="usage: wenet-lite decode --model exp/u2/avg_5.pt --data data/test-clean "
        "[--mode greedy|prefix_beam] [--beam 10] [--lm lm.json] [--chunk-size 16 "
        "--left-chunks -1 [--simulate-streaming]] [--out DIR]\n\n"
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
    _add_options(p, SearchOptions)
    _add_chunking(p, 0, -1, full=", 0: full context")
    p.add_argument("--simulate-streaming", action="store_true", help="chunk by chunk, cached")
    p.add_argument("--batch-seconds", type=float, default=100.0, help="padded audio per batch")
    p.add_argument("--out", help="output dir (default: MODEL_DIR/decode_<data>_<settings>)")
    p.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    p.set_defaults(func=_run_decode)


def _run_decode(args: argparse.Namespace) -> int:
    from wenet_lite.decode.options import SearchOptions
    from wenet_lite.decode.recognize import DecodeOptions, decode_cuts, default_out_dir

    try:
        options = DecodeOptions(
            search=_options(SearchOptions, args), chunking=_chunking(args),
            simulate_streaming=args.simulate_streaming, batch_seconds=args.batch_seconds,
        )  # fmt: skip
    except ValueError as e:
        raise _UsageError(str(e)) from None
    out = args.out or default_out_dir(args.model, args.data, options)
    report = decode_cuts(args.model, args.data, out, options, _device(args.device))
    print("\n".join(report.summary_lines()))
    print(f"results in {out}")
    for utt, message in report.failures:
        print(f"wenet-lite decode: error: {utt}: {message}", file=sys.stderr)
    return 1 if report.failures else 0


def _device(name: Optional[str]) -> str:
    import torch

    return name or ("cuda" if torch.cuda.is_available() else "cpu")


def _add_stream(sub: argparse._SubParsersAction) -> None:
    from wenet_lite.decode.options import SearchOptions

    p = sub.add_parser(
        "stream",
        help="streaming recognition of audio files or live PCM on stdin",
        description="usage: wenet-lite stream --model exp/u2/avg_5.pt [--chunk-size 16] "
        "[--left-chunks -1] [--json] a.wav b.flac ...\n"
        "       arecord -t raw -f S16_LE -r 16000 -c 1 - | wenet-lite stream --model M -\n"
        "       wenet-lite stream --model M --ref data/test-clean [--out DIR]\n\n"
        "Files: WAV/FLAC/... at any sample rate, mono or stereo, read piece by piece. '-': raw "
        "16-bit little-endian mono PCM on stdin at --sample-rate. Partial hypotheses go to "
        "stderr as they change, final segments (split by endpointing) with word times to "
        "stdout; --json prints JSON lines of type partial/final/error instead, and a last "
        "summary line. --ref PART scores the transcripts against a prepared set (its audio "
        "files are streamed when no AUDIO is given) and writes hyp.txt, details.txt, "
        "summary.txt and summary.json to --out, as `decode` does. Exit code 1 if an input "
        "failed (each named; the others are decoded).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="*", metavar="AUDIO", help="audio files, or - for stdin")
    p.add_argument("--model", required=True, help="model file (checkpoint or averaged)")
    _add_chunking(p, 16, -1)
    _add_options(p, SearchOptions, skip=("nbest",))
    p.add_argument("--json", action="store_true", help="JSON lines on stdout")
    p.add_argument("--no-endpoint", action="store_true", help="one segment per input")
    p.add_argument("--rule1-silence", type=float, default=2.4, help="s, nothing decoded (2.4)")
    p.add_argument("--rule2-silence", type=float, default=1.2, help="s, after speech (1.2)")
    p.add_argument("--max-segment", type=float, default=20.0, help="s, rule 3 (20)")
    p.add_argument("--sample-rate", type=int, default=16000, help="of PCM on stdin (16000)")
    p.add_argument("--max-streams", type=int, default=1, help="inputs decoded concurrently")
    p.add_argument("--ref", help="prepared set (dir holding cuts.jsonl.gz) to score against")
    p.add_argument("--out", help="--ref: output dir (default: MODEL_DIR/stream_<ref>_<settings>)")
    p.add_argument("--compare", help="--ref: count transcripts identical to DIR/hyp.txt")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
    p.set_defaults(func=_run_stream)


def _run_stream(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wenet_lite.decode.endpoint import EndpointConfig
    from wenet_lite.decode.options import SearchOptions
    from wenet_lite.decode.stream_files import stream_inputs
    from wenet_lite.decode.streaming import StreamingRecognizer

    try:
        endpoint = EndpointConfig(
            not args.no_endpoint, args.rule1_silence, args.rule2_silence, args.max_segment
        )
    except ValueError as e:
        raise _UsageError(str(e)) from None
    chunking, options = _chunking(args), _options(SearchOptions, args)
    if not chunking.streaming:
        raise _UsageError(f"--chunk-size must be >= 1 to stream, got {chunking.chunk_size}")
    if not args.inputs and not args.ref:
        raise _UsageError("give AUDIO files (or - for stdin), or --ref PART to stream its audio")
    if (args.out or args.compare) and not args.ref:
        raise _UsageError("--out and --compare need --ref (the references to score against)")
    refs = _references(args.ref) if args.ref else None
    inputs = args.inputs or (list(refs.audio) if refs else [])
    recognizer = StreamingRecognizer(
        args.model, chunking, options, endpoint=endpoint, device=args.device
    )
    report = stream_inputs(
        recognizer, inputs, json_lines=args.json, max_streams=args.max_streams,
        sample_rate=args.sample_rate,
    )  # fmt: skip
    if refs is not None:
        from wenet_lite.decode.score import Transcripts, score_transcripts

        settings = {**recognizer.settings_record(), **report.record()}
        texts = {refs.utterance(name): text for name, text in report.texts.items()}
        failed = [refs.utterance(name) for name in report.failures]
        tag = f"{Path(args.ref).name}_{options.mode}_chunk{chunking.chunk_size}"
        out = args.out or Path(args.model).parent / f"stream_{tag}_left{chunking.left_chunks}"
        inputs_record = {"model": args.model, "data": args.ref}
        record = score_transcripts(
            Transcripts(texts, failed, settings), refs.texts, out, inputs_record, args.compare
        )
        same = record.get("identical")
        note = f", identical to --compare: {same['same']}/{same['compared']}" if same else ""
        print(f"WER {record['wer']['percent']:.2f} %, CER {record['cer']['percent']:.2f} %{note}:"
              f" results in {out}", file=sys.stderr)  # fmt: skip
    return 1 if report.failed else 0


class _References:
    """A prepared set's normalised transcripts and the audio file of each whole-file cut."""

    def __init__(self, data: str) -> None:
        from pathlib import Path

        from wenet_lite.data.manifest import cut_text, load_cuts
        from wenet_lite.data.tokenizer import normalize_text

        self.texts, self.audio = {}, {}
        for cut in load_cuts(data):
            self.texts[cut.id] = normalize_text(cut_text(cut))
            sources = cut.recording.sources if cut.has_recording else []
            if len(sources) == 1 and sources[0].type == "file":
                self.audio[str(Path(sources[0].source).resolve())] = cut.id

    def utterance(self, name: str) -> str:
        from pathlib import Path

        return self.audio.get(str(Path(name).resolve()), Path(name).name.split(".")[0])


def _references(data: str) -> _References:
    return _References(data)


def _add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="WER/CER of a transcript file against a prepared set",
        description="usage: wenet-lite score --hyp exp/x/ts16.txt --data data/test-clean "
        "--out exp/x/decode/ts16 [--compare exp/x/decode/chunk16_sim]\n\n"
        "--hyp: `id text` lines (hyp.txt), `PATH text` lines (tools/run_exported.py, "
        "tools/run_sherpa.py) or the JSON lines of `stream --json`. Writes hyp.txt, "
        "details.txt, summary.txt and summary.json to --out. --compare DIR counts the "
        "transcripts identical to DIR/hyp.txt (--require-identical: exit code 1 on a "
        "difference). Exit code 1 also when an utterance failed to decode.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--hyp", required=True, help="transcripts (see above)")
    p.add_argument("--data", required=True, help="prepared set: dir holding cuts.jsonl.gz")
    p.add_argument("--out", required=True, help="output dir")
    p.add_argument("--compare", help="a decode/score dir whose hyp.txt to compare with")
    p.add_argument("--require-identical", action="store_true", help="exit 1 on any difference")
    p.set_defaults(func=_run_score)


def _run_score(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wenet_lite.decode.score import read_transcripts, score_transcripts

    refs = _references(args.data)
    transcripts = read_transcripts(args.hyp, refs.audio)
    inputs = {"hyp": args.hyp, "data": args.data}
    record = score_transcripts(transcripts, refs.texts, args.out, inputs, args.compare)
    print(Path(args.out, "summary.txt").read_text(encoding="utf-8"), end="")
    same = record.get("identical", {})
    if args.require_identical and same and same["same"] != same["compared"]:
        return 1
    return 1 if record["failed"] else 0


def _add_train_lm(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--out", required=True, help="lm.json, or lm.arpa[.gz]")
    p.add_argument("--order", type=int, choices=[2, 3], default=2, help="bigram or trigram (2)")
    p.add_argument("--discount", type=float, default=0.75, help="absolute discount (0.75)")
    p.set_defaults(func=_run_train_lm)


def _run_train_lm(args: argparse.Namespace) -> int:
    from wenet_lite.decode.lm import train_lm_file

    if not args.data and not args.text:
        raise _UsageError("give --data and/or --text")
    print(train_lm_file(args.data, args.text, args.out, args.order, args.discount))
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export for on-device inference (TorchScript, or ONNX for sherpa-onnx)",
        description="usage: wenet-lite export --model exp/u2/avg_5.pt --format torchscript "
        "--out exp/u2/model.ts\n"
        "       wenet-lite export --model exp/u2/avg_5.pt --format onnx --chunk-size 16 "
        "--left-chunks 4 --out exp/u2/onnx [--quantize int8]\n\n"
        "torchscript: one file with init_state/forward_chunk/forward and its metadata; run it "
        "with tools/run_exported.py (no wenet_lite needed). --chunk-size 0 exports a "
        "full-context model for whole utterances only. onnx: DIR/model.onnx, DIR/tokens.txt "
        "(and model.int8.onnx) for sherpa_onnx.OnlineRecognizer.from_wenet_ctc, given the same "
        "chunk_size and num_left_chunks; needs --left-chunks >= 0.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model file (checkpoint or averaged)")
    p.add_argument("--format", required=True, choices=["torchscript", "onnx"])
    p.add_argument("--out", required=True, help="torchscript: output file; onnx: output dir")
    _add_chunking(p, 16, 4, full=", 0: full context (torchscript)")
    p.add_argument("--quantize", choices=["int8"], help="dynamic int8 Linear/MatMul weights")
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    chunking = dict(chunk_size=args.chunk_size, left_chunks=args.left_chunks)
    if args.format == "torchscript":
        from wenet_lite.export.torchscript import export_torchscript

        written = [export_torchscript(args.model, args.out, **chunking, quantize=args.quantize)]
    else:
        from wenet_lite.export.onnx import export_onnx

        written = list(
            export_onnx(args.model, args.out, **chunking, quantize=args.quantize).values()
        )
    for path in written:
        print(path)
    return 0


# New subcommands: add an _add_<name> above and list it here, in the order `--help` shows.
_SUBCOMMANDS: List[Callable[[argparse._SubParsersAction], None]] = [
    _add_prepare,
    _add_compute_cmvn,
    _add_compute_fbank,
    _add_train,
    _add_average,
    _add_decode,
    _add_stream,
    _add_score,
    _add_train_lm,
    _add_export,
]


class _UsageError(Exception):
    """Bad flags: reported without a traceback, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wenet-lite", description="Streaming Conformer CTC speech recognition."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<subcommand>")
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from wenet_lite.malloc import keep_freed_memory

    keep_freed_memory()  # reuse freed tensor memory: no page faults per step (malloc.py)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (_UsageError, ConfigError) as e:
        print(f"wenet-lite {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"wenet-lite {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"wenet-lite {args.command}: interrupted", file=sys.stderr)
        return 130
