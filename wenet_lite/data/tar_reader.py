"""The tar reader of shards: members as (name, bytes), read as a stream front to back.

A small reader of its own: Python's ``tarfile`` spent more time parsing headers than the rest
of reading a shard of stored fbank (``benchmarks/bench_shards.py``). It takes ustar, GNU long
names and pax paths, gzip-compressed tars, and names damage (a wrong header checksum, a member
cut off, a size no stream holds) as a ShardError with the location.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from typing import IO, Iterator, Optional, Tuple

from wenet_lite.data.storage import ShardError, open_location

__all__ = ["next_pair", "tar_members", "tar_pairs"]


def tar_members(location: str, stack: contextlib.ExitStack) -> Iterator[Tuple[str, bytes]]:
    """(name, bytes) of each file in a tar (gzip-compressed when the name says so), read as a
    stream."""
    f = stack.enter_context(open_location(location))
    if location.endswith((".gz", ".tgz")):
        f = stack.enter_context(gzip.GzipFile(fileobj=f, mode="rb"))
    try:
        yield from _members(f, location)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise ShardError(f"{location}: not a readable tar ({e})") from None


def _members(f: IO[bytes], where: str) -> Iterator[Tuple[str, bytes]]:
    long_name: Optional[bytes] = None
    while True:
        header = _read_exact(f, 512)
        if not header or header == bytes(512):
            return  # the end (or a tar without its closing blocks)
        if len(header) < 512:
            raise ShardError(f"{where}: cut off inside a header (a truncated tar?)")
        try:
            checksum = int(header[148:156].split(b"\0")[0].strip(), 8)
            size = _size(header[124:136])
        except ValueError:
            checksum, size = -1, 0
        if checksum != sum(header) - sum(header[148:156]) + 8 * 32:
            raise ShardError(f"{where}: not a tar (a header checksum is wrong)")
        kind = header[156:157]
        data = _read_exact(f, size)
        if len(data) < size:
            raise ShardError(f"{where}: cut off inside a member (a truncated tar?)")
        _read_exact(f, -size % 512)
        name = header[:100].split(b"\0")[0]
        if header[257:262] == b"ustar" and header[345:500].strip(b"\0"):
            name = header[345:500].split(b"\0")[0] + b"/" + name
        if kind == b"L":  # GNU: the next member's long name
            long_name = data.rstrip(b"\0")
        elif kind == b"x":  # POSIX pax: records "<len> key=value\n"
            for record in data.split(b"\n"):
                key, _, value = record.partition(b" ")[2].partition(b"=")
                if key == b"path":
                    long_name = value
        elif kind in (b"0", b"\0", b"7"):
            yield (long_name or name).decode("utf-8", errors="replace"), data
            long_name = None
        elif kind != b"g":
            long_name = None  # folders, links: nothing to read


def _size(field: bytes) -> int:
    if field[0] & 0x80:  # base-256, for members of 8 GiB or more
        return int.from_bytes(field[1:], "big")
    return int(field.split(b"\0")[0].strip() or b"0", 8)


def _read_exact(f: IO[bytes], n: int) -> bytes:
    """``n`` bytes, fewer only at the stream's end; read in pieces, so that a damaged header's
    size costs no more memory than the stream really holds."""
    chunks, left = [], n
    while left > 0:
        chunk = f.read(min(left, 1 << 22))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def tar_pairs(location: str, stack: contextlib.ExitStack) -> Iterator[Tuple[str, bytes, bytes]]:
    """(data member name, data, JSON manifest) pairs of a Shar tar."""
    members = tar_members(location, stack)
    for name, data in members:
        meta = next(members, None)
        if meta is None:
            raise ShardError(f"{location}: {name} has no manifest after it (a cut-off tar?)")
        yield name, data, meta[1]


def next_pair(pairs: Iterator[Tuple[str, bytes, bytes]], cut_id: str, where: str):
    item = next(pairs, None)
    if item is None:
        raise ShardError(f"{where}: ends before cut {cut_id} (a cut-off shard?)")
    name = item[0]
    if name.rsplit(".", 1)[0] != cut_id:
        raise ShardError(f"{where}: holds {name} where cut {cut_id} was expected")
    return item
