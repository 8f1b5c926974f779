"""Whether data files may run commands.

Shard lists, WeNet ``data.list`` files and lhotse manifests are data: users download them with a
corpus or are handed them. Every path in such a file that would run a shell command on the
machine that reads it is refused unless the user opted in on the command line
(``--allow-data-commands``, :func:`allow_data_commands`):

- a ``pipe:`` line in a ``data.list`` of shard tars, or a ``pipe:`` name in ``cuts.shards.json``;
- a lhotse recording source of type ``command``, or of type ``url`` whose URL is ``pipe:...``
  (lhotse would run either through ``/bin/sh``);
- names from a list put into the user's own ``pipe:`` command: never refused, but always quoted
  (:func:`shell_word`), and a shard list's names must be plain relative paths.

Every cut read from a manifest or a shard passes :func:`check_sources` where it is read: its
recordings' sources by type (``file``, ``memory``, ``shar``, ``url`` only as ``http(s)://``,
``command`` only with the opt-in), and its stored arrays (the ``fbank`` of ``compute-fbank`` and
``prepare shards --fbank``, lhotse features) only as files in a folder or members of a shard:
a ``pipe:`` or URL storage path is refused with or without the opt-in, since the toolkit never
writes one. Audio and arrays are then read by the toolkit's own readers
(``data.manifest.cut_samples``, ``cut_array``), never by handing a manifest's path to lhotse.

The ``pipe:`` command the user types (``--data "pipe:aws s3 cp s3://b/{} -"``) is the user's own
and runs as written. The choice is a data setting, ``data.allow_commands`` (the flag sets it
too): the trainer applies it for its run (:func:`allowing`) and in every loader worker it
starts (:func:`worker_opt_in`: spawned workers as well as forked ones keep it).
"""

from __future__ import annotations

import contextlib
import functools
import re
import shlex
from typing import Any, Callable, Iterable, Iterator, Tuple

__all__ = [
    "OPT_IN",
    "DataCommandRefused",
    "allow_data_commands",
    "allowing",
    "check_sources",
    "commands_allowed",
    "plain_name",
    "refuse_pipe",
    "shell_word",
    "worker_opt_in",
]

OPT_IN = "--allow-data-commands"
"""the command-line flag that opts in (named in the refusals: they reach users as one line)"""

_allowed = False
_PLAIN = re.compile(r"[A-Za-z0-9_.+@%=,:-]+(/[A-Za-z0-9_.+@%=,:-]+)*")
"""a relative path of characters no shell treats specially (shlex.quote leaves it as it is)"""


class DataCommandRefused(ValueError):
    """A data file asks to run a command and the user did not opt in."""


def allow_data_commands(allowed: bool) -> None:
    """Let data files run their commands (True) or refuse them (False, the default)."""
    global _allowed
    _allowed = bool(allowed)


def refuse_pipe(where: str, entry: str) -> None:
    """Raise DataCommandRefused for a ``pipe:`` entry of a list unless the user opted in."""
    if entry.startswith("pipe:") and not _allowed:
        raise DataCommandRefused(
            f"{where}: the entry {_short(entry)} is a shell command; a list's commands run only "
            f"with {OPT_IN}"
        )


def commands_allowed() -> bool:
    """Whether the user opted in to data files' commands (``--allow-data-commands``)."""
    return _allowed


@contextlib.contextmanager
def allowing(allowed: bool) -> Iterator[None]:
    """Data files' commands allowed (when ``allowed`` or already opted in) for the block; the
    choice before it restored after."""
    before = _allowed
    allow_data_commands(before or allowed)
    try:
        yield
    finally:
        allow_data_commands(before)


def worker_opt_in() -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn`` that gives each worker this process's choice (a worker
    started by spawn imports this module afresh, with commands refused)."""
    return functools.partial(_worker_init, _allowed)


def _worker_init(allowed: bool, worker: int) -> None:
    allow_data_commands(allowed)


def check_sources(items: Iterable[Any], where: str) -> None:
    """Check every path of ``items`` (recordings or cuts, mixed cuts' tracks too) that a reader
    would open; ``where`` names the manifest or shard line.

    Raises:
        DataCommandRefused: a recording source that is a shell command (type ``command``, or a
            ``pipe:`` URL) without the opt-in, or a stored array whose path is a command.
        ValueError: a source of another type, a URL that is not http(s), an array path that is
            a URL.
    """
    for item in items:
        for recording in _recordings(item):
            for source in getattr(recording, "sources", ()):
                _check_source(recording.id, source.type, source.source, where)
        for name, storage_type, path in _stored_arrays(item):
            _check_array(getattr(item, "id", "?"), name, storage_type, path, where)


_SOURCE_TYPES = ("file", "memory", "shar", "url", "command")


def _check_source(recording: str, kind: str, source: Any, where: str) -> None:
    what = f"{where}: recording {recording}'s audio source"
    source = source if isinstance(source, str) else ""  # memory sources hold bytes
    if kind not in _SOURCE_TYPES:
        raise ValueError(f"{what} has type {kind!r}; readable types: {', '.join(_SOURCE_TYPES)}")
    if kind == "command" or (kind == "url" and source.startswith("pipe:")):
        if not _allowed:
            raise DataCommandRefused(
                f"{what} is the shell command {_short(source)}; a manifest's commands run only "
                f"with {OPT_IN}"
            )
    elif kind == "url" and not source.startswith(("http://", "https://")):
        raise ValueError(f"{what} is the URL {_short(source)}; only http(s) URLs are read")


def _check_array(cut: str, name: str, storage_type: str, path: str, where: str) -> None:
    if path.startswith("pipe:"):
        raise DataCommandRefused(
            f"{where}: cut {cut}'s stored array {name!r} is the shell command {_short(path)}; "
            "stored arrays are read only from files in a folder or from a shard's members"
        )
    if "://" in path:
        raise ValueError(
            f"{where}: cut {cut}'s stored array {name!r} lies at the URL {_short(path)}; stored "
            "arrays are read only from files in a folder or from a shard's members"
        )


def _recordings(item: Any) -> Iterator[Any]:
    """The recordings an item reads from: itself, a cut's recording, a mixed cut's tracks'."""
    if hasattr(item, "sources"):
        yield item
    elif getattr(item, "tracks", None) is not None:
        for track in item.tracks:
            yield from _recordings(track.cut)
    elif getattr(item, "has_recording", False):
        yield item.recording


def _stored_arrays(item: Any) -> Iterator[Tuple[str, str, str]]:
    """(name, storage type, storage path) of every stored array and feature matrix of a cut
    (a mixed cut's tracks' too)."""
    for track in getattr(item, "tracks", None) or ():
        yield from _stored_arrays(track.cut)
    features = getattr(item, "features", None)
    if features is not None:
        yield "features", str(features.storage_type), str(features.storage_path or "")
    custom = getattr(item, "custom", None)
    for name, value in (custom if isinstance(custom, dict) else {}).items():
        array = getattr(value, "array", value)  # a TemporalArray wraps an Array
        if hasattr(array, "storage_type") and hasattr(array, "storage_path"):
            yield name, str(array.storage_type), str(array.storage_path or "")


def plain_name(where: str, name: Any) -> str:
    """A shard list's name of a file in its folder: a plain relative path (no ``..``, no
    absolute path, no character a shell would read), else ValueError naming it."""
    if not isinstance(name, str) or not _PLAIN.fullmatch(name) or ".." in name.split("/"):
        raise ValueError(
            f"{where}: {_short(str(name))} is not a plain file name inside the part's folder "
            "(letters, digits and ._-+@%=,: in relative paths)"
        )
    return name


def shell_word(text: str) -> str:
    """``text`` as one shell word: what a list gives is put into a ``pipe:`` command only so."""
    return shlex.quote(text)


def _short(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:117] + "...")
