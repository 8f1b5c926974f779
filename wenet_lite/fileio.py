"""Atomic file writes (a crash or a full disk mid-write never leaves a truncated file), and
reading text files that may be gzipped.

Everything the toolkit writes that a later stage reads back (checkpoints, model files, CMVN
statistics, the word LM, manifests, skip counts, the resolved config) goes through
:func:`atomic_open`: the bytes go to a hidden temporary file in the same directory, are flushed
to disk, and only then renamed over the final name. Readers see the old file or the new one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
from pathlib import Path
from typing import IO, Any, Dict, Iterator, TextIO, Union

__all__ = ["TEMPORARY_PREFIX", "atomic_open", "naming_text_errors", "open_text", "read_json",
           "read_text", "temporary_path", "write_files_atomic", "write_text_atomic"]  # fmt: skip

PathLike = Union[str, "os.PathLike[str]"]

TEMPORARY_PREFIX = ".tmp-"
"""how the name of every temporary file :func:`temporary_path` gives starts"""


def temporary_path(path: PathLike) -> Path:
    """Where :func:`atomic_open` writes before the rename: ``.tmp-<pid>-<random>-<name>``
    beside ``path``, a new name at every call, so two writers of the same file (two server
    workers, two processes of a run) never write into one temporary file; the last rename wins
    whole.

    The name keeps the final suffixes, so writers that choose a format by extension (lhotse's
    ``.jsonl.gz``) write the right one.
    """
    path = Path(path)
    return path.with_name(f"{TEMPORARY_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{path.name}")


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file for writing; on a clean exit fsync it and rename it to ``path``.

    ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"``. Parent directories are created. If
    the block raises, the temporary file is removed and ``path`` is left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        with open(tmp, mode, encoding=None if mode == "wb" else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: PathLike, text: str) -> Path:
    """``Path(path).write_text(text)`` (UTF-8), atomically; returns the path."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def write_files_atomic(folder: PathLike, texts: Dict[str, str]) -> None:
    """Write several text files of ``folder`` as a set: every one goes to its temporary file
    first, and only when all are on disk are they renamed, so a full disk (or any error) leaves
    the previous set as it was, never a mix of new and old or a truncated one."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: Dict[str, Path] = {}
    try:
        for name, text in texts.items():
            tmp = written[name] = temporary_path(folder / name)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
        raise
    for name, tmp in written.items():
        os.replace(tmp, folder / name)


def open_text(path: PathLike) -> TextIO:
    """Open a UTF-8 text file for reading, gunzipped when its name ends in ``.gz``."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


@contextlib.contextmanager
def naming_text_errors(path: PathLike) -> Iterator[None]:
    """Turn a UTF-8 decoding error inside the block into a ValueError naming ``path`` (the
    codec's own message names no file)."""
    try:
        yield
    except UnicodeDecodeError as e:
        byte = e.object[e.start] if e.start < len(e.object) else None
        what = f"byte 0x{byte:02x}: " if byte is not None else ""
        raise ValueError(f"{path}: not UTF-8 text ({what}{e.reason})") from None


def read_text(path: PathLike) -> str:
    """A UTF-8 text file's text; ValueError naming the file if it is not UTF-8."""
    with naming_text_errors(path):
        return Path(path).read_text(encoding="utf-8")


def read_json(path: PathLike) -> Any:
    """A JSON file's value; ValueError naming the file if it is not UTF-8, not JSON or nested
    too deeply for the parser (a hostile file 100,000 levels deep)."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: not JSON this reader takes (nested too deeply)") from None
