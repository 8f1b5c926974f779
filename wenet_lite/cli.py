"""`wenet-lite <subcommand>`: thin argparse shims over plain functions that tests call directly.

Each subcommand has an ``_add_<name>`` that declares its flags and a ``_run_<name>`` that
imports its module lazily (so `--help` is instant) and calls the typed function. Exit codes:
0 success, 1 some inputs failed (each named on stderr), 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, List, Optional

from wenet_lite.config import ConfigError

__all__ = ["main"]


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


# New subcommands: add an _add_<name> above and list it here, in the order `--help` shows.
_SUBCOMMANDS: List[Callable[[argparse._SubParsersAction], None]] = [
    _add_prepare,
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
