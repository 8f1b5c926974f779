"""Sharded training data: where shards live, how they are written and read, one at a time.

Two formats, read sequentially (a shard is opened once an epoch and read front to back):

- **Lhotse Shar**, written by :func:`write_shards` (`wenet-lite prepare shards`):
  ``PART/cuts.000000.jsonl.gz`` (the cuts), ``PART/recording.000000.tar`` (``<id>.flac`` then
  ``<id>.json`` for each cut, in the same order) and optionally ``PART/fbank.000000.tar``
  (``<id>.npy`` + ``<id>.json``: the stored training fbank, float16). ``PART/cuts.shards.json``
  lists the shards with their utterance counts, so a reader needs no directory listing (an
  http server or object store has none). lhotse's own ``CutSet.from_shar`` reads these shards.
- **WeNet shard tars**: ``PART/data.list`` with one tar path or URL per line; each tar holds
  ``<key>.wav`` (or another audio format) and ``<key>.txt`` pairs. They carry no durations, so
  :func:`index_wenet_shards` reads every tar once and caches what batching needs.

Where they live (a folder, a URL, a ``pipe:`` command) is ``data/storage.py``'s; what a list
may name, ``data/commands.py``'s.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import shutil
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import soundfile as sf
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment
from lhotse.array import Array, TemporalArray
from lhotse.cut import Cut
from lhotse.serialization import deserialize_item
from lhotse.utils import fastcopy
from tqdm import tqdm

from wenet_lite.data.commands import (
    DataCommandRefused,
    check_sources,
    plain_name,
    refuse_pipe,
)
from wenet_lite.data.manifest import cut_samples
from wenet_lite.data.storage import ShardError, Storage, open_location, read_bytes
from wenet_lite.features.audio import AudioError

__all__ = [
    "SHARD_LIST",
    "Shard",
    "ShardError",
    "ShardIndex",
    "Storage",
    "WriteResult",
    "find_shards",
    "index_wenet_shards",
    "local_shards",
    "read_index",
    "read_shard",
    "write_shards",
]

SHARD_LIST = "cuts.shards.json"
"""The shard list in a Shar part's folder; its name starts with ``cuts.`` and has no
``.jsonl`` so that lhotse's ``CutSet.from_shar(in_dir=...)`` passes over it."""
WENET_LIST = "data.list"
_AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".sph")
_FORMAT = "lhotse-shar"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shard:
    """One shard: the locations of its parts (see :class:`Storage`)."""

    audio: str
    """the audio tar (Shar: ``recording.N.tar``; WeNet: the tar itself)"""
    cuts: Optional[str] = None
    """Shar: its ``cuts.N.jsonl.gz``; None for a WeNet tar"""
    fbank: Optional[str] = None
    """Shar: its ``fbank.N.tar`` when fbank was stored"""
    members: Tuple[Cut, ...] = ()
    """a local prepared part's cuts (files read one by one) standing in as a shard, so that
    local and sharded parts mix"""


# ----------------------------------------------------------------------------- finding shards


def find_shards(storage: Storage, part: str) -> Optional[Tuple[str, List[Shard]]]:
    """The shards of ``part`` as ``(kind, shards)`` with kind ``shar`` or ``wenet``; None when
    the part holds neither (a local prepared part: ``cuts.jsonl.gz``)."""
    why = storage.missing(f"{part}/{SHARD_LIST}")
    if why is None:
        return "shar", _shar_list(storage, part)
    if storage.missing(f"{part}/{WENET_LIST}") is None:
        shards = _wenet_list(storage, part)
        if shards is not None:
            return "wenet", shards
    if storage.remote:  # why the shard list could not be read: a 404, a command that failed
        raise ShardError(
            f"{storage.locate(part)}: no {SHARD_LIST} (`wenet-lite prepare shards`) or WeNet "
            f"{WENET_LIST} of shard tars there ({why})"
        )
    return None


def _shar_list(storage: Storage, part: str) -> List[Shard]:
    where = storage.locate(f"{part}/{SHARD_LIST}")
    try:
        listing = json.loads(read_bytes(where))
        if listing.get("format") != _FORMAT:
            raise ValueError(f"format {listing.get('format')!r}, expected {_FORMAT!r}")
        shards = [
            Shard(
                audio=_listed(storage, part, where, s["recording"]),
                cuts=_listed(storage, part, where, s["cuts"]),
                fbank=_listed(storage, part, where, s["fbank"]) if s.get("fbank") else None,
            )
            for s in listing["shards"]
        ]
    except DataCommandRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ShardError(f"{where}: not a shard list written by `prepare shards` ({e})") from None
    if not shards:
        raise ShardError(f"{where}: lists no shards")
    return shards


def _listed(storage: Storage, part: str, where: str, name: Any) -> str:
    """The location of a file a shard list names: a URL, a ``pipe:`` command (run only with
    the user's opt-in) or a plain relative name inside the part's folder."""
    if isinstance(name, str) and name.startswith(("http://", "https://")):
        return name
    if isinstance(name, str) and name.startswith("pipe:"):
        refuse_pipe(where, name)
        return name
    return storage.locate(f"{part}/{plain_name(where, name)}")


def fbank_features_of(storage: Storage, part: str) -> Optional[Dict[str, Any]]:
    """The features config a Shar part's stored fbank was made with (None: no fbank)."""
    listing = json.loads(read_bytes(storage.locate(f"{part}/{SHARD_LIST}")))
    return listing.get("fbank_features")


def _wenet_list(storage: Storage, part: str) -> Optional[List[Shard]]:
    """The tars of a WeNet ``data.list``; None when it is a raw list (JSON lines)."""
    where = storage.locate(f"{part}/{WENET_LIST}")
    lines = [x.strip() for x in read_bytes(where).decode("utf-8").splitlines() if x.strip()]
    if not lines or lines[0].startswith("{"):
        return None  # WeNet's raw format: `wenet-lite prepare list` reads it
    for lineno, line in enumerate(lines, start=1):
        refuse_pipe(f"{where}:{lineno}", line)
        if not line.endswith((".tar", ".tar.gz", ".tgz")) and not line.startswith("pipe:"):
            raise ShardError(f"{where}:{lineno}: expected a shard tar path or URL, got {line!r}")
    return [Shard(audio=line if storage.remote else _local(line)) for line in lines]


def local_shards(part: str, cuts: List[Cut], size: int = 1000) -> List[Shard]:
    """A local prepared part as stand-in shards of ``size`` cuts (in manifest order)."""
    return [
        Shard(audio=f"{part}[{i}:{i + size}]", members=tuple(cuts[i : i + size]))
        for i in range(0, len(cuts), size)
    ]


def _local(line: str) -> str:
    """A local entry of data.list: relative paths from the current directory, as WeNet does."""
    if line.startswith(("http://", "https://", "pipe:")):
        return line
    return str(Path(line).expanduser().absolute())


# ----------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class ShardIndex:
    """What batching needs of one shard's utterances, in shard order."""

    ids: Tuple[str, ...]
    seconds: Tuple[float, ...]
    texts: Tuple[str, ...]


def read_index(shard: Shard) -> ShardIndex:
    """A Shar shard's (or local stand-in's) index from its cuts (no audio read)."""
    assert shard.cuts is not None or shard.members
    ids, seconds, texts = [], [], []
    for cut in shard.members or _shar_cuts(shard.cuts or ""):
        ids.append(cut.id)
        seconds.append(float(cut.duration))
        texts.append(cut.supervisions[0].text if cut.supervisions else "")
    return ShardIndex(tuple(ids), tuple(seconds), tuple(texts))


def _shar_cuts(location: str) -> Iterator[Cut]:
    """A Shar cuts file's cuts; a cut whose audio source is a command is refused (see
    data/commands.py) before anything could run it."""
    try:
        with open_location(location) as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    yield _shar_cut(line, f"{location}:{lineno}")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
        raise ShardError(f"{location}: cannot read it ({e})") from None


def _shar_cut(line: str, where: str) -> Cut:
    try:
        cut = deserialize_item(json.loads(line))
    except RecursionError:
        raise ShardError(f"{where}: not a cut (nested too deeply)") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ShardError(f"{where}: not a cut ({e})") from None
    try:
        check_sources([cut], where)
    except DataCommandRefused as e:
        raise ShardError(str(e)) from None
    return cut


def index_wenet_shards(
    shards: List[Shard], cache_dir: Path, progress: bool = True
) -> Tuple[List[ShardIndex], Dict[str, int]]:
    """Index WeNet shard tars (keys, durations from the audio headers, texts), reading each
    tar once; the result is cached in ``cache_dir`` by the list of locations. Returns the
    indexes and the utterances left out by reason (unreadable audio, no transcript)."""
    digest = hashlib.sha1("\n".join(s.audio for s in shards).encode()).hexdigest()[:16]
    cache = cache_dir / f"wenet-shards-{digest}.json.gz"
    if cache.is_file():
        with gzip.open(cache, "rt", encoding="utf-8") as f:
            saved = json.load(f)
        indexes = [ShardIndex(tuple(i), tuple(s), tuple(t)) for i, s, t in saved["shards"]]
        return indexes, saved["skipped"]
    indexes, skipped = [], Counter()
    for shard in tqdm(shards, desc="index shards", unit="shard", disable=not progress):
        ids, seconds, texts = [], [], []
        for key, audio, text, reason in _wenet_members(shard.audio):
            if reason is not None:
                skipped[reason] += 1
                continue
            try:
                info = sf.info(io.BytesIO(audio))
            except (sf.LibsndfileError, RuntimeError):
                skipped["unreadable audio"] += 1
                continue
            ids.append(key)
            seconds.append(info.frames / info.samplerate)
            texts.append(text)
        indexes.append(ShardIndex(tuple(ids), tuple(seconds), tuple(texts)))
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        shards_json = [[i.ids, i.seconds, i.texts] for i in indexes]
        json.dump({"shards": shards_json, "skipped": dict(skipped)}, f)
    tmp.replace(cache)
    return indexes, dict(skipped)


# ----------------------------------------------------------------------------- reading


def read_shard(shard: Shard, audio: bool = True) -> Iterator[Cut]:
    """The shard's cuts in order, each with its audio (and stored fbank) in memory; with
    ``audio`` False, a shard whose every cut has stored fbank is read without its audio tar.
    Raises ShardError naming the shard when it cannot be read to its end."""
    if shard.members:
        yield from shard.members
        return
    if shard.cuts is None:
        yield from _read_wenet(shard)
        return
    cuts: Iterator[Cut] = _shar_cuts(shard.cuts)
    if not audio and shard.fbank:
        listed = list(cuts)
        audio = not all(c.has_custom("fbank") for c in listed)
        cuts = iter(listed)
    with contextlib.ExitStack() as stack:
        audios = _tar_pairs(shard.audio, stack) if audio else None
        fbank = _tar_pairs(shard.fbank, stack) if shard.fbank else None
        for cut in cuts:
            if audios is not None:
                cut = _attach_audio(cut, _next_pair(audios, cut.id, shard.audio))
            if fbank is not None:
                cut = _attach_fbank(cut, _next_pair(fbank, cut.id, shard.fbank or ""))
            yield cut
        if audios is not None and next(audios, None) is not None:
            raise ShardError(f"{shard.audio}: holds more items than {shard.cuts} lists")


def _tar_members(location: str, stack: contextlib.ExitStack) -> Iterator[Tuple[str, bytes]]:
    """(name, bytes) of each file in a tar (gzip-compressed when the name says so), read as a
    stream. A small reader of its own: Python's ``tarfile`` spent more time parsing headers
    than the rest of reading a shard of stored fbank."""
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


def _tar_pairs(location: str, stack: contextlib.ExitStack) -> Iterator[Tuple[str, bytes, bytes]]:
    """(data member name, data, JSON manifest) pairs of a Shar tar."""
    members = _tar_members(location, stack)
    for name, data in members:
        meta = next(members, None)
        if meta is None:
            raise ShardError(f"{location}: {name} has no manifest after it (a cut-off tar?)")
        yield name, data, meta[1]


def _next_pair(pairs: Iterator[Tuple[str, bytes, bytes]], cut_id: str, where: str):
    item = next(pairs, None)
    if item is None:
        raise ShardError(f"{where}: ends before cut {cut_id} (a cut-off shard?)")
    name = item[0]
    if name.rsplit(".", 1)[0] != cut_id:
        raise ShardError(f"{where}: holds {name} where cut {cut_id} was expected")
    return item


def _attach_audio(cut: Cut, item: Tuple[str, bytes, bytes]) -> Cut:
    name, data, _ = item
    if name.endswith(".nodata"):
        return cut  # no audio: loading it is skipped and counted as missing
    rec = cut.recording
    source = AudioSource(type="memory", channels=rec.sources[0].channels, source=data)
    return fastcopy(cut, recording=fastcopy(rec, sources=[source]))


def _attach_fbank(cut: Cut, item: Tuple[str, bytes, bytes]) -> Cut:
    name, data, _ = item
    field = (cut.custom or {}).get("fbank")
    if name.endswith(".nodata") or not isinstance(field, TemporalArray):
        return cut
    array = fastcopy(field.array, storage_type="memory_npy", storage_path="", storage_key=data)
    return cut.with_custom("fbank", fastcopy(field, array=array))


def _read_wenet(shard: Shard) -> Iterator[Cut]:
    for key, audio, text, reason in _wenet_members(shard.audio):
        if reason is not None:
            continue  # counted when the shard was indexed
        try:
            info = sf.info(io.BytesIO(audio))
        except (sf.LibsndfileError, RuntimeError):
            continue
        yield memory_cut(key, audio, info.samplerate, info.frames, text)


def memory_cut(key: str, audio: bytes, rate: int, frames: int, text: str) -> Cut:
    """An utterance cut whose audio is the encoded file ``audio`` held in memory."""
    source = AudioSource(type="memory", channels=[0], source=audio)
    rec = Recording(key, [source], sampling_rate=int(rate), num_samples=frames,
                    duration=frames / rate)  # fmt: skip
    sup = SupervisionSegment(key, key, start=0.0, duration=rec.duration, text=text)
    return MonoCut(key, start=0.0, duration=rec.duration, channel=0, recording=rec,
                   supervisions=[sup])  # fmt: skip


def _wenet_members(location: str) -> Iterator[Tuple[str, bytes, str, Optional[str]]]:
    """(key, audio bytes, transcript, reason it is unusable or None) of a WeNet shard tar,
    whose members come in pairs ``<key>.<audio>`` + ``<key>.txt`` (either order)."""
    with contextlib.ExitStack() as stack:
        key, audio, text = None, None, None
        for name, data in _tar_members(location, stack):
            stem, _, suffix = name.rpartition(".")
            if stem != key:
                if key is not None:
                    yield _wenet_item(key, audio, text)
                key, audio, text = stem, None, None
            if suffix == "txt":
                text = data.decode("utf-8", errors="replace").strip()
            elif "." + suffix.lower() in _AUDIO_SUFFIXES:
                audio = data
        if key is not None:
            yield _wenet_item(key, audio, text)


def _wenet_item(key: str, audio: Optional[bytes], text: Optional[str]):
    if audio is None or not audio:
        return key, b"", "", "missing audio"
    if text is None:
        return key, audio, "", "no transcript"
    return key, audio, text, None


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class WriteResult:
    shards: int
    utterances: int
    seconds: float
    bytes: int
    skipped: Dict[str, int]

    def summary(self, where: str) -> str:
        line = (f"{where}: {self.shards} shard(s), {self.utterances} utterances, "
                f"{self.seconds / 3600:.2f} h, {self.bytes / 1e6:.1f} MB")  # fmt: skip
        if self.skipped:
            line += ", skipped " + ", ".join(f"{n} {r}" for r, n in self.skipped.items())
        return line


class _TarOut:
    """One tar being written, and its size so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "wb")
        self.tar = tarfile.open(fileobj=self.file, mode="w|")

    def add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def close(self) -> int:
        self.tar.close()
        self.file.close()
        return self.path.stat().st_size


def write_shards(
    cuts: List[Cut],
    out: Path,
    shard_size: int = 1000,
    shard_mb: Optional[float] = None,
    fbank: Optional[Any] = None,
    progress: bool = True,
) -> WriteResult:
    """Write ``cuts`` as Lhotse Shar shards in ``out`` (a new folder that replaces ``out``
    only when complete): FLAC audio of each cut's span at its own rate, a new shard after
    ``shard_size`` utterances or ``shard_mb`` MB of audio. ``fbank``: a callable giving a
    cut's (T_in, F) training fbank from its samples at the features' rate, stored as float16,
    with ``fbank.features`` (a dict) recorded in the list. Unreadable audio is skipped and
    counted, as everywhere else."""
    if shard_size < 1 or (shard_mb is not None and shard_mb <= 0):
        raise ValueError(f"shard_size must be >= 1 and shard_mb > 0, got {shard_size}, {shard_mb}")
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        result, listing = _write_all(cuts, tmp, shard_size, shard_mb, fbank, progress)
        (tmp / SHARD_LIST).write_text(json.dumps(listing, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _write_all(cuts, out, shard_size, shard_mb, fbank, progress):
    skipped: Counter = Counter()
    shards: List[Dict[str, Any]] = []
    writer: Optional[_ShardOut] = None
    total_bytes, kept, seconds = 0, 0, 0.0
    for cut in tqdm(cuts, desc="shards", unit="utt", disable=not progress):
        try:
            item = _encode(cut, fbank)
        except AudioError as e:
            skipped[{"missing": "missing audio", "empty": "empty audio"}.get(
                e.kind, "unreadable audio")] += 1  # fmt: skip
            _log.warning("prepare shards: skipped %s: %s", cut.id, e)
            continue
        if writer is None:
            writer = _ShardOut(out, len(shards), fbank is not None)
        writer.add(*item)
        kept += 1
        seconds += item[0].duration
        full = writer.count >= shard_size or (
            shard_mb is not None and writer.audio_bytes >= shard_mb * 1e6
        )
        if full:
            shards.append(writer.close())
            total_bytes += shards[-1]["bytes"]
            writer = None
    if writer is not None:
        shards.append(writer.close())
        total_bytes += shards[-1]["bytes"]
    if not shards:
        raise ValueError(f"no usable utterance to write ({dict(skipped)} skipped)")
    listing: Dict[str, Any] = {"format": _FORMAT, "shards": shards}
    if fbank is not None:
        listing["fbank_features"] = fbank.features
    result = WriteResult(len(shards), kept, seconds, total_bytes, dict(skipped))
    return result, listing


def _encode(cut: Cut, fbank: Optional[Any]) -> Tuple[Cut, bytes, Optional[bytes]]:
    """(the cut as stored, its FLAC bytes, its fbank as .npy bytes or None)."""
    rate = int(cut.sampling_rate)
    samples = cut_samples(cut, rate)  # (N,)
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="FLAC", subtype="PCM_16")
    flac = buffer.getvalue()
    stored = memory_cut(cut.id, b"", rate, samples.size, cut.supervisions[0].text or "")
    sup = fastcopy(cut.supervisions[0], start=0.0, duration=stored.duration, recording_id=cut.id)
    placeholder = AudioSource(type="shar", channels=[0], source="")
    rec = fastcopy(stored.recording, sources=[placeholder])
    stored = fastcopy(stored, recording=rec, supervisions=[sup])
    feats = None
    if fbank is not None:
        array = np.asarray(fbank(cut, samples), dtype=np.float16)  # (T_in, F)
        out = io.BytesIO()
        np.save(out, array, allow_pickle=False)
        feats = out.getvalue()
        meta = Array(storage_type="shar", storage_path="", storage_key="", shape=list(array.shape))
        temporal = TemporalArray(meta, temporal_dim=0, frame_shift=fbank.frame_shift, start=0.0)
        stored = stored.with_custom("fbank", temporal)
    return stored, flac, feats


class _ShardOut:
    """The files of one shard being written."""

    def __init__(self, out: Path, index: int, fbank: bool) -> None:
        self.names = {
            "cuts": f"cuts.{index:06d}.jsonl.gz",
            "recording": f"recording.{index:06d}.tar",
        }
        if fbank:
            self.names["fbank"] = f"fbank.{index:06d}.tar"
        self.out = out
        self.cuts = gzip.open(out / self.names["cuts"], "wt", encoding="utf-8")
        self.audio = _TarOut(out / self.names["recording"])
        self.fbank = _TarOut(out / self.names["fbank"]) if fbank else None
        self.count, self.audio_bytes, self.seconds = 0, 0, 0.0

    def add(self, cut: Cut, flac: bytes, feats: Optional[bytes]) -> None:
        self.cuts.write(json.dumps(cut.to_dict()) + "\n")
        self.audio.add(f"{cut.id}.flac", flac)
        self.audio.add(f"{cut.id}.json", json.dumps(cut.recording.to_dict()).encode())
        if self.fbank is not None:
            assert feats is not None
            self.fbank.add(f"{cut.id}.npy", feats)
            self.fbank.add(f"{cut.id}.json", json.dumps(cut.custom["fbank"].to_dict()).encode())
        self.count += 1
        self.audio_bytes += len(flac)
        self.seconds += cut.duration

    def close(self) -> Dict[str, Any]:
        self.cuts.close()
        size = self.audio.close() + (self.out / self.names["cuts"]).stat().st_size
        if self.fbank is not None:
            size += self.fbank.close()
        return {**self.names, "utterances": self.count, "seconds": round(self.seconds, 3),
                "bytes": size}  # fmt: skip
