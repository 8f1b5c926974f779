"""What several `wenet-lite` subcommands share: option flags declared from dataclasses, the
chunk flags, devices, and the usage error that main() prints as one line (exit code 2)."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Literal, Optional, Sequence, Union

__all__ = [
    "UsageError", "add_set", "add_options", "options_from", "add_chunking", "chunking_from",
    "default_device",
]  # fmt: skip


class UsageError(Exception):
    """Bad flags: reported without a traceback, exit code 2."""


def add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="override a config value, e.g. train.max_steps=1000 (repeatable)",
    )  # fmt: skip


def add_options(p: argparse.ArgumentParser, cls: type, skip: Sequence[str] = ()) -> None:
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


def options_from(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """``cls`` from the flags :func:`add_options` declared; a refused value is a usage error."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name in args}
    try:
        return cls(**{**values, **given})
    except ValueError as e:
        raise UsageError(str(e)) from None


def add_chunking(p: argparse.ArgumentParser, chunk: int, left: int, full: str = "") -> None:
    p.add_argument(
        "--chunk-size", type=int, default=chunk,
        help=f"encoder frames per chunk{full} ({chunk})",
    )  # fmt: skip
    p.add_argument(
        "--left-chunks", type=int, default=left, help=f"history chunks, -1: all ({left})"
    )


def chunking_from(args: argparse.Namespace) -> Any:
    from wenet_lite.model.chunking import Chunking

    try:
        return Chunking(args.chunk_size, args.left_chunks)
    except ValueError as e:
        raise UsageError(str(e)) from None


def default_device(name: Optional[str]) -> str:
    import torch

    return name or ("cuda" if torch.cuda.is_available() else "cpu")
