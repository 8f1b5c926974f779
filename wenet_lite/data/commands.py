"""Whether data files may run commands.

Shard lists, WeNet ``data.list`` files and lhotse manifests are data: users download them with a
corpus or are handed them. Three things in such files would run a shell command on the machine
that reads them, and each is refused unless the user opted in on the command line
(``--allow-data-commands``, :func:`allow_data_commands`):

- a ``pipe:`` line in a ``data.list`` of shard tars, or a ``pipe:`` name in ``cuts.shards.json``;
- a lhotse recording source of type ``command`` (lhotse runs it through ``/bin/sh``);
- names from a list put into the user's own ``pipe:`` command: never refused, but always quoted
  (:func:`shell_word`), and a shard list's names must be plain relative paths.

The ``pipe:`` command the user types (``--data "pipe:aws s3 cp s3://b/{} -"``) is the user's own
and runs as written. The choice is one per process; DataLoader workers, forked from it, keep it.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterable

__all__ = [
    "OPT_IN",
    "DataCommandRefused",
    "allow_data_commands",
    "check_sources",
    "plain_name",
    "refuse_pipe",
    "shell_word",
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


def check_sources(items: Iterable[Any], where: str) -> None:
    """Raise DataCommandRefused when one of ``items`` (recordings or cuts) has a ``command``
    audio source and the user did not opt in; ``where`` names the manifest."""
    if _allowed:
        return
    for item in items:
        recording = item.recording if getattr(item, "has_recording", False) else item
        for source in getattr(recording, "sources", ()):
            if source.type == "command":
                raise DataCommandRefused(
                    f"{where}: recording {recording.id}'s audio source is the shell command "
                    f"{_short(str(source.source))}; a manifest's commands run only with {OPT_IN}"
                )


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
