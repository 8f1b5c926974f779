"""The shards' tar reader: long names, gzip, and damage named as a ShardError with the
location (no MemoryError, zlib.error or RecursionError from a hostile shard)."""

from __future__ import annotations

import contextlib
import io
import tarfile

import pytest

from wenet_lite.data.storage import ShardError
from wenet_lite.data.tar_reader import tar_members


def test_the_tar_reader_takes_long_names_gzip_and_refuses_damage(tmp_path) -> None:
    long = "x" * 150 + ".txt"
    members = {long: b"long", "dir/short.wav": b"\x00" * 1000, "empty.txt": b""}
    for fmt, suffix in ((tarfile.GNU_FORMAT, ".tar"), (tarfile.PAX_FORMAT, ".tar.gz")):
        path = tmp_path / f"t{fmt}{suffix}"
        with tarfile.open(path, "w:gz" if suffix.endswith("gz") else "w", format=fmt) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        with contextlib.ExitStack() as stack:
            assert dict(tar_members(str(path), stack)) == members
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"junk" * 200)
    with pytest.raises(ShardError, match="bad.tar: not a tar"), contextlib.ExitStack() as stack:
        list(tar_members(str(bad), stack))


def test_damaged_shards_raise_one_shard_error_naming_them(tmp_path) -> None:
    """A member claiming 2^40 bytes (base-256 size), garbage deflate data behind a valid gzip
    header, and a cuts line nested 100,000 deep: a ShardError naming the file, no MemoryError,
    zlib.error or RecursionError."""
    import gzip
    import zlib

    from wenet_lite.data.shards import _shar_cuts

    header = bytearray(tarfile.TarInfo("a.wav").tobuf(tarfile.GNU_FORMAT)[:512])
    header[124:136] = b"\x80" + (1 << 40).to_bytes(11, "big")
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\0 ".encode()
    huge = tmp_path / "huge.tar"
    huge.write_bytes(bytes(header) + b"\0" * 4096)
    garbage = zlib.compress(b"x")[:2] + bytes(range(256)) * 4  # not a deflate stream
    bad_gz = gzip.compress(b"")[:10] + garbage  # gzip's header, then garbage
    (tmp_path / "bad.tar.gz").write_bytes(bad_gz)
    (tmp_path / "cuts.bad.jsonl.gz").write_bytes(bad_gz)
    (tmp_path / "cuts.deep.jsonl.gz").write_bytes(gzip.compress(b"[" * 100_000 + b"]" * 100_000))
    for name in ("huge.tar: cut off inside a member", "bad.tar.gz: not a readable tar"):
        with pytest.raises(ShardError, match=name), contextlib.ExitStack() as stack:
            list(tar_members(str(tmp_path / name.split(":")[0]), stack))
    for name in ("cuts.bad.jsonl.gz", "cuts.deep.jsonl.gz"):
        with pytest.raises(ShardError, match=name.replace(".", r"\.")):
            list(_shar_cuts(str(tmp_path / name)))
