"""Where data lives: a local folder, an ``http(s)://`` base URL or a ``pipe:`` command prefix
whose output is the file (``pipe:cat /data/shards``, or with ``{}`` standing for the file's path:
``pipe:aws s3 cp s3://bucket/shards/{} -``), and the one way to open a location in any of them.

Remote streams are watched: an unattended training job must not wait for ever on a server that
sends a byte a minute or a command that never ends, so fewer than ``STALL_BYTES`` in
``STALL_SECONDS`` is a ShardError naming the location (with ``data.skip_bad_shards``, a shard to
skip).
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional

from wenet_lite.data.commands import shell_word

__all__ = [
    "STALL_BYTES",
    "STALL_SECONDS",
    "NotThere",
    "ShardError",
    "Storage",
    "open_location",
    "read_bytes",
]

STALL_SECONDS = 60.0
STALL_BYTES = 1 << 16
"""a remote stream delivering fewer bytes than this in STALL_SECONDS has stalled"""


class ShardError(ValueError):
    """A shard (or the shard list) is missing, unreadable or not what its list says."""


class NotThere(ShardError):
    """A location that does not exist (HTTP 404, no such file, a ``pipe:`` command failed)."""


class Storage:
    """Where a prepared layout lives: a folder, an ``http(s)://`` URL or a ``pipe:`` prefix."""

    def __init__(self, base: str) -> None:
        self.base = str(base)

    @property
    def remote(self) -> bool:
        return self.base.startswith(("http://", "https://", "pipe:"))

    def locate(self, name: str) -> str:
        """The location of ``name`` (a path relative to the base, or already absolute/URL). In
        a ``pipe:`` base the name goes in as one quoted shell word: ``{}`` in the user's command
        must stand outside quotes (``pipe:cat /data/{}``, not ``pipe:cat '/data/{}'``)."""
        if name.startswith(("http://", "https://", "pipe:", "/")):
            return name
        if self.base.startswith("pipe:"):
            if "{}" in self.base:
                return self.base.replace("{}", shell_word(name))
            return self.base.rstrip("/") + "/" + shell_word(name)
        if self.remote:
            return self.base.rstrip("/") + "/" + name
        return str(Path(self.base) / name)


@contextlib.contextmanager
def open_location(location: str) -> Iterator[IO[bytes]]:
    """A binary stream of a local file, an http(s) URL or a ``pipe:`` command's output.
    Every failure is a ShardError naming the location; a remote stream that stalls (fewer than
    ``STALL_BYTES`` in ``STALL_SECONDS``: a trickling server, a command that hangs) too."""
    if location.startswith("pipe:"):
        with _pipe(location) as f:
            yield f
        return
    if location.startswith(("http://", "https://")):
        try:
            response = urllib.request.urlopen(location, timeout=STALL_SECONDS)
        except urllib.error.HTTPError as e:
            kind = NotThere if e.code in (403, 404, 410) else ShardError
            raise kind(f"{location}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ShardError(f"{location}: cannot fetch it ({e})") from None
        with response:
            yield io.BufferedReader(_Watched(response.read1, location), 1 << 16)
        return
    try:
        f = open(location, "rb")
    except FileNotFoundError as e:
        raise NotThere(f"{location}: cannot open it ({e.strerror})") from None
    except OSError as e:
        raise ShardError(f"{location}: cannot open it ({e.strerror})") from None
    with f:
        yield f


class _Watched(io.RawIOBase):
    """A remote stream that must keep moving: ``read(n)`` returns what one wait brings (at most
    ``n`` bytes), and a window of ``STALL_SECONDS`` with fewer than ``STALL_BYTES`` in it is a
    ShardError naming the location. A read that waits for ever cannot happen: sockets time out
    after ``STALL_SECONDS``, and ``ready(seconds)`` (a pipe's select) says whether data came."""

    def __init__(self, read: Callable[[int], bytes], location: str,
                 ready: Optional[Callable[[float], bool]] = None) -> None:  # fmt: skip
        self._read, self._ready, self.location = read, ready, location
        self._window_start, self._window_bytes = time.monotonic(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._window_start + STALL_SECONDS - time.monotonic()
        if self._ready is not None and not self._ready(max(left, 0.0)):
            self._stalled()
        try:
            data = self._read(len(buffer))
        except OSError as e:  # socket.timeout among them
            raise ShardError(f"{self.location}: the transfer broke off ({e})") from None
        buffer[: len(data)] = data
        self._window_bytes += len(data)
        if self._window_bytes >= STALL_BYTES or not data:
            self._window_start, self._window_bytes = time.monotonic(), 0
        elif time.monotonic() - self._window_start > STALL_SECONDS:
            self._stalled()
        return len(data)

    def _stalled(self) -> None:
        raise ShardError(
            f"{self.location}: stalled ({self._window_bytes} bytes in the last {STALL_SECONDS:g} s)"
        )


@contextlib.contextmanager
def _pipe(location: str) -> Iterator[IO[bytes]]:
    """The output of the user's ``pipe:`` command, run by ``/bin/sh``; its stderr goes to a
    temporary file (a pipe could fill and block it), whose last line names a failure. The
    command runs in a process group of its own, ended whole when the read is abandoned (a
    stalled ``sleep`` under the shell must not outlive it)."""
    command = location[len("pipe:") :]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, bufsize=0,
                                start_new_session=True)  # fmt: skip
        assert proc.stdout is not None
        out = proc.stdout
        watched = _Watched(out.read, location, lambda s: bool(select.select([out], [], [], s)[0]))
        try:
            stream = io.BufferedReader(watched, 1 << 16)
            yield stream
            while stream.read(1 << 16):  # the rest, so that the command can finish
                pass
        except BaseException:
            _end_group(proc)
            raise
        finally:
            out.close()
            code = proc.wait()
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    if code != 0:
        raise NotThere(
            f"{location}: the command exited with {code} ({lines[-1] if lines else 'no message'})"
        )


def _end_group(proc: subprocess.Popen) -> None:
    """Kill a command's whole process group (the shell and every child it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def read_bytes(location: str) -> bytes:
    """A whole location's bytes (a list, a small file)."""
    with open_location(location) as f:
        return f.read()
