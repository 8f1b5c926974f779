"""`wenet-lite prepare | compute-cmvn | compute-fbank | train | average`."""

from __future__ import annotations

import argparse

from wenet_lite.cli.flags import UsageError, add_set, file_in, in_dir, output_dir, output_path
from wenet_lite.config import shipped_configs


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="write lhotse cuts manifests for a corpus",
        description="usage: wenet-lite prepare librispeech --root /data/LibriSpeech --out data\n"
        "       wenet-lite prepare list --src data.list|kaldi_dir|cuts.jsonl.gz --out data/NAME\n"
        "       wenet-lite prepare shards --data data --part train-clean-100 --out shards\n\n"
        "librispeech: one data/<part>/cuts.jsonl.gz per part found (or --parts). list: a WeNet "
        "data.list (JSON lines key/wav/txt), a Kaldi dir (wav.scp + text) or lhotse manifests.\n"
        "shards: a prepared part as Lhotse Shar shards (FLAC audio, optionally the training\n"
        "fbank) in OUT/PART, listed in OUT/PART/cuts.shards.json, and DATA/cmvn.json copied to\n"
        "OUT; train with --data OUT (a folder, an http(s):// URL or a pipe: command serving it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("corpus", choices=["librispeech", "list", "shards"])
    p.add_argument(
        "--root",
        help="librispeech: the LibriSpeech folder (holding <part>/<speaker>/...), or the "
        "folder above it",
    )  # fmt: skip
    p.add_argument("--parts", help="librispeech: comma-separated parts (default: all found)")
    p.add_argument("--src", help="list: the manifest to convert")
    p.add_argument("--data", help="shards: the prepared data dir holding PART")
    p.add_argument("--part", help="shards: the prepared part to write as shards")
    p.add_argument("--shard-size", type=int, default=1000, help="shards: utterances a shard (1000)")
    p.add_argument("--shard-mb", type=float, help="shards: also start a new shard at this many MB")
    p.add_argument(
        "--fbank", action="store_true",
        help="shards: store the training fbank too (needs --config; used at speed 1.0)",
    )  # fmt: skip
    p.add_argument("--config", help="shards --fbank: experiment YAML or shipped config name")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", type=output_dir, required=True, help="output dir")
    p.add_argument(
        "--jobs", type=int, default=4, help="parallel workers: threads reading audio headers (4)"
    )
    p.set_defaults(func=_run_prepare)


def _run_prepare(args: argparse.Namespace) -> int:
    if args.corpus == "librispeech":
        from wenet_lite.data.librispeech import prepare_librispeech

        if not args.root:
            raise UsageError("prepare librispeech needs --root")
        parts = args.parts.split(",") if args.parts else None
        results = prepare_librispeech(args.root, parts, args.out, num_jobs=args.jobs)
        for part, result in results.items():
            print(result.summary(f"{args.out}/{part}"))
        return 0
    if args.corpus == "shards":
        return _prepare_shards(args)
    from wenet_lite.data.manifest import prepare_cuts

    if not args.src:
        raise UsageError("prepare list needs --src")
    print(prepare_cuts(args.src, args.out).summary(args.out))
    return 0


def _prepare_shards(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wenet_lite.data.prepare_shards import prepare_shards

    if not args.data or not args.part:
        raise UsageError("prepare shards needs --data and --part")
    if args.shard_size < 1:
        raise UsageError(f"--shard-size must be at least 1, got {args.shard_size}")
    if args.shard_mb is not None and not args.shard_mb > 0:
        raise UsageError(f"--shard-mb must be > 0, got {args.shard_mb}")
    features, seed = None, 0
    if args.fbank:
        if not args.config:
            raise UsageError("prepare shards --fbank needs --config (the features to store)")
        from wenet_lite.config import load_config

        cfg = load_config(args.config)
        features, seed = cfg.features, cfg.train.seed
    result = prepare_shards(Path(args.data), args.part, Path(args.out), args.shard_size,
                            args.shard_mb, features, seed, not args.no_progress)  # fmt: skip
    print(result.summary(f"{args.out}/{args.part}"))
    return 0


def add_compute_cmvn(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compute-cmvn",
        help="global feature mean/istd of a training set",
        description="usage: wenet-lite compute-cmvn --config conf/conformer_u2.yaml "
        "--data data/train-clean-100 --out data/cmvn.json\n\n"
        "fbank as in training, without speed perturbation or dither; unusable utterances are\n"
        "skipped and counted. `train` reads DATA/cmvn.json by default.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config", required=True,
        help="experiment YAML, or a shipped config by name, e.g. conformer_u2 (its features)",
    )  # fmt: skip
    p.add_argument("--data", required=True, nargs="+", help="prepared part dir(s) or cuts files")
    p.add_argument(
        "--out", type=file_in("cmvn.json"), required=True,
        help="output JSON (a directory: DIR/cmvn.json)",
    )  # fmt: skip
    add_set(p)
    p.add_argument(
        "--jobs",
        type=int,
        help="parallel workers: DataLoader processes (default: data.num_workers)",
    )
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


def add_compute_fbank(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument(
        "--config", required=True,
        help="experiment YAML, or a shipped config by name (its features, train.seed)",
    )  # fmt: skip
    p.add_argument("--data", required=True, nargs="+", help="prepared part dir(s)")
    add_set(p)
    p.add_argument(
        "--jobs",
        type=int,
        help="parallel workers: DataLoader processes (default: data.num_workers)",
    )
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


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (also under torchrun)",
        description="usage: wenet-lite train --config conf/conformer_u2.yaml --data data "
        "--exp exp/u2 [--set train.max_steps=1000] [--resume] [--device cpu]\n"
        "       torchrun --nproc_per_node 4 -m wenet_lite train --config ... (same flags)\n\n"
        "Reads DATA/<part>/cuts.jsonl.gz for --train-part (comma-separated parts are joined;\n"
        "PART=WEIGHT,... draws each epoch from the parts by weight, e.g. new=0.7,old=0.3)\n"
        "and --dev-part, and DATA/cmvn.json (see compute-cmvn). Trains the tokenizer on the\n"
        "training transcripts unless --tokenizer is given. Writes EXP/config.yaml, train.log,\n"
        "tensorboard/, tokenizer.model, skipped.json and step_N.pt checkpoints (only rank 0).\n"
        "--resume continues the newest checkpoint exactly (model, optimizer, sampler, RNG).\n"
        "--init MODEL.pt fine-tunes a trained model: its weights, tokenizer and CMVN.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config", required=True,
        help=f"experiment YAML, or a shipped config by name: {', '.join(shipped_configs())}",
    )  # fmt: skip
    p.add_argument("--data", required=True, help="prepared data dir (holding <part>/cuts...)")
    p.add_argument(
        "--exp", type=output_dir, required=True, help="experiment dir for checkpoints and logs"
    )
    add_set(p)
    p.add_argument(
        "--train-part",
        dest="train_parts",
        default="train-clean-100",
        help="comma-separated parts, joined; or PART=WEIGHT,... mixed by weight (train-clean-100)",
    )
    p.add_argument(
        "--dev-part",
        dest="dev_parts",
        default="dev-clean",
        help="comma-separated; '' for none (dev-clean)",
    )
    p.add_argument("--cmvn", help="CMVN JSON (default: DATA/cmvn.json)")
    p.add_argument("--tokenizer", help="use this sentencepiece model instead of training one")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    p.add_argument(
        "--init", metavar="MODEL.pt",
        help="start from this model file's weights (fine-tuning): its tokenizer and CMVN "
        "unless --tokenizer/--cmvn; a fresh optimizer and schedule; the model's architecture "
        "(features, encoder, decoder, tokenizer) comes from the file, and a key of those the "
        "config sets must agree with it",
    )  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--device", default="cpu",
        help="cpu (default), auto (cuda when present, else cpu), cuda (under torchrun each rank "
        "takes cuda:LOCAL_RANK) or cuda:N",
    )  # fmt: skip
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wenet_lite.train.trainer import TrainOptions, train

    def parts(text: str) -> tuple:
        return tuple(p for p in text.split(",") if p)

    if not parts(args.train_parts):
        raise UsageError("--train-part is empty")
    train_parts, weights = _weighted_parts(parts(args.train_parts))
    opts = TrainOptions(
        config=Path(args.config),
        data=args.data
        if args.data.startswith(("http://", "https://", "pipe:"))
        else Path(args.data),
        exp=Path(args.exp),
        overrides=tuple(args.overrides),
        train_parts=train_parts,
        train_weights=weights,
        dev_parts=parts(args.dev_parts),
        cmvn=Path(args.cmvn) if args.cmvn else None,
        tokenizer=Path(args.tokenizer) if args.tokenizer else None,
        resume=args.resume,
        init=Path(args.init) if args.init else None,
        progress_bar=not args.no_progress,
        device=None if args.device == "auto" else args.device,  # None: cuda when present
    )
    result = train(opts)
    if result.is_main:
        print(f"{args.exp}: trained to step {result.step} (epoch {result.epoch - 1} done)")
    return 0


def add_average(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument(
        "--out",
        type=output_path,
        help="output file, or a directory for DIR/avg_N.pt (default EXP/avg_N.pt or "
        "EXP/avg_best_N.pt)",
    )
    p.set_defaults(func=_run_average)


def _run_average(args: argparse.Namespace) -> int:
    from wenet_lite.train.average import average_checkpoints

    out = args.out
    if out is not None:
        out = in_dir(out, f"avg_{'best_' if args.best else ''}{args.num}.pt")
    print(average_checkpoints(args.exp, args.num, out, best=args.best))
    return 0


def _weighted_parts(items: tuple) -> tuple:
    """``A,B`` -> ((A, B), None); ``A=0.7,B=0.3`` -> ((A, B), (0.7, 0.3)); a usage error for a
    mixture of both, a weight that is not a number > 0, or a part named twice."""
    import math

    names = tuple(item.split("=", 1)[0].strip() for item in items)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(f"--train-part: a part named twice: {', '.join(repeated)}")
    if not all(names):
        raise UsageError(f"--train-part: a weight without its part in {','.join(items)!r}")
    given = ["=" in item for item in items]
    if not any(given):
        return names, None
    if not all(given):
        raise UsageError("--train-part: give every part a weight (A=0.7,B=0.3), or none")
    weights = []
    for item in items:
        name, text = item.split("=", 1)
        try:
            weight = float(text)
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise UsageError(f"--train-part: {name}'s weight must be a number > 0, got {text!r}")
        weights.append(weight)
    return names, tuple(weights)
