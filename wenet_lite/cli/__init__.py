"""`wenet-lite <subcommand>`: thin argparse shims over plain functions that tests call directly.

Each subcommand has an ``add_<name>`` (in ``cli/train.py``, ``cli/decode.py``,
``cli/serve.py`` or ``cli/export.py``) that declares its flags and a ``_run_<name>`` that
imports its module lazily (so `--help` is instant) and calls the typed function. Exit codes:
0 success, 1 some inputs failed (each named on stderr), 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Callable, List, NoReturn, Optional

from wenet_lite.cli.decode import add_decode, add_score, add_train_lm
from wenet_lite.cli.export import add_export, add_import_wenet
from wenet_lite.cli.flags import UsageError, cli_words, in_cli_words
from wenet_lite.cli.punct import add_punctuate, add_train_punct
from wenet_lite.cli.serve import add_serve
from wenet_lite.cli.stream import add_stream
from wenet_lite.cli.train import (
    add_average,
    add_compute_cmvn,
    add_compute_fbank,
    add_prepare,
    add_train,
)
from wenet_lite.cli.transcribe import add_transcribe
from wenet_lite.config import ConfigError
from wenet_lite.config.fields import Says

__all__ = ["main"]


# New subcommands: write an add_<name> in a module of this package and list it here, in the
# order `--help` shows.


_SUBCOMMANDS: List[Callable[[argparse._SubParsersAction], None]] = [
    add_transcribe,
    add_prepare,
    add_compute_cmvn,
    add_compute_fbank,
    add_train,
    add_average,
    add_decode,
    add_stream,
    add_serve,
    add_score,
    add_train_lm,
    add_train_punct,
    add_punctuate,
    add_export,
    add_import_wenet,
]


_READS_DATA = ("prepare", "compute-cmvn", "compute-fbank", "train", "decode")
"""the subcommands that read shard lists, data.list files or manifests"""
_DATA_COMMANDS_HELP = (
    "let data files run shell commands: `pipe:` lines in a data.list or shard list, lhotse "
    "`command` audio sources in manifests and shards (refused by default: data files come with "
    "corpora; a `pipe:` command you type in --data runs either way)"
)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: the usage block it prints before is noise when one flag
    is wrong (``--help`` shows it). Subcommand parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="wenet-lite", description="Streaming Conformer CTC speech recognition.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="the version, and the CPU's precisions"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="<subcommand>")
    for add in _SUBCOMMANDS:
        add(sub)
    for name in _READS_DATA:
        sub.choices[name].add_argument(
            "--allow-data-commands", action="store_true", help=_DATA_COMMANDS_HELP
        )
    for command in sub.choices.values():
        _usage_from_description(command)
        # -v after the subcommand as well as before it
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
            help="debug logging",
        )  # fmt: skip
    return parser


def _usage_from_description(command: argparse.ArgumentParser) -> None:
    """A subcommand's description opens with its copy-pasteable usage lines (``usage:
    wenet-lite NAME ...``, then a blank line): they become the parser's usage, printed once
    in place of argparse's generated one."""
    text = command.description or ""
    if text.startswith("usage: "):
        head, _, rest = text.partition("\n\n")
        command.usage = head[len("usage: ") :].replace("%", "%%")
        command.description = rest or None


class _Version(argparse.Action):
    """Prints :func:`_version` as it is (argparse's ``version`` action rewraps lines)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        print(_version())
        parser.exit()


def _version() -> str:
    """``wenet-lite 0.1.0 (torch 2.13.0, Python 3.11.7)`` and the CPU's line
    (``host.cpu.cpu_summary``: what it multiplies natively, what ``--precision auto`` picks), read
    without importing torch."""
    import platform
    from importlib import metadata

    from wenet_lite import __version__
    from wenet_lite.host.cpu import cpu_summary

    def installed(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"wenet-lite {__version__} (torch {installed('torch')}, Python "
        f"{platform.python_version()})\n{cpu_summary()}"
    )


def _os_error(e: OSError) -> str:
    """One line naming the file: ``cannot write exp/x/hyp.txt: No space left on device``."""
    import errno

    if e.filename is None:
        return str(e)
    what = {errno.ENOSPC: "cannot write", errno.EDQUOT: "cannot write"}.get(e.errno or 0, "")
    where = f"{what} {e.filename}" if what else str(e.filename)
    return f"{where}: {e.strerror or e}"


_OTHER_TOOLS = {"--output_format": "--format", "--output-format": "--format",
                "--output_dir": "--out", "--output-dir": "--out", "-o": "--out",
                "--beam_size": "--beam", "--beam-size": "--beam"}  # fmt: skip
"""flags of other tools (whisper's CLI) a user may type, and ours"""


def _unknown_flags(parser: argparse.ArgumentParser, extra: List[str]) -> str:
    """``unrecognized arguments: ...`` with what was meant, where it can be told."""
    import difflib

    known = [f for a in parser._actions for f in a.option_strings]
    hints = []
    for word in extra:
        flag = word.split("=")[0]
        if not flag.startswith("-"):
            continue
        meant = _OTHER_TOOLS.get(flag) or flag.replace("_", "-")
        if meant not in known:
            close = difflib.get_close_matches(flag, known, n=1)
            meant = close[0] if close else ""
        if meant in known and meant != flag:
            hints.append(f"{flag}: {meant}?")
    return f"unrecognized arguments: {' '.join(extra)}" + (
        f" ({'; '.join(hints)})" if hints else ""
    )


def _in_flags(record: logging.LogRecord) -> bool:
    """A log record whose message names settings (``Says``), rendered with the CLI's flags."""
    if isinstance(record.msg, Says):
        record.msg = record.msg.render(cli_words)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the subcommand that got them, with what was meant
            command = parser._subparsers._group_actions[0].choices[args.command]  # type: ignore[union-attr]
            command.error(_unknown_flags(command, extra))
    except SystemExit as e:  # --help, or a one-line usage error already printed
        return int(e.code or 0)
    from wenet_lite.host.malloc import keep_freed_memory

    keep_freed_memory()  # reuse freed tensor memory: no page faults per step (malloc.py)
    if getattr(args, "allow_data_commands", False):
        from wenet_lite.data.commands import allow_data_commands

        allow_data_commands(True)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:  # warnings that name settings: as flags
        handler.addFilter(_in_flags)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ConfigError) as e:
        print(f"wenet-lite {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # the library names fields; here: flags
        print(f"wenet-lite {args.command}: error: {in_cli_words(e)}", file=sys.stderr)
        return 1
    except OSError as e:  # an output path under a file, a full disk, no permission, ...
        print(f"wenet-lite {args.command}: error: {_os_error(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"wenet-lite {args.command}: interrupted", file=sys.stderr)
        return 130
    except ImportError as e:  # an optional extra that is not installed
        from wenet_lite.cli.extras import missing_extra

        message = missing_extra(e)
        if message is None:
            raise
        print(f"wenet-lite {args.command}: error: {message}", file=sys.stderr)
        return 1
