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
may name, ``data/commands.py``'s; the tar reader is ``data/tar_reader.py``, the writer
``data/shar_writer.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import soundfile as sf
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment
from lhotse.array import TemporalArray
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
from wenet_lite.data.storage import NotThere, ShardError, Storage, open_location, read_bytes
from wenet_lite.data.tar_reader import next_pair, tar_members, tar_pairs

__all__ = [
    "SHARD_LIST",
    "SHAR_FORMAT",
    "Shard",
    "ShardIndex",
    "find_shards",
    "index_wenet_shards",
    "local_shards",
    "memory_cut",
    "read_index",
    "read_shard",
]

SHARD_LIST = "cuts.shards.json"
"""The shard list in a Shar part's folder; its name starts with ``cuts.`` and has no
``.jsonl`` so that lhotse's ``CutSet.from_shar(in_dir=...)`` passes over it."""
WENET_LIST = "data.list"
_AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".sph")
SHAR_FORMAT = "lhotse-shar"
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
    listing, why = _read_list(storage, f"{part}/{SHARD_LIST}")
    if listing is not None:
        return "shar", _shar_list(storage, part, listing)
    lines, _ = _read_list(storage, f"{part}/{WENET_LIST}")
    if lines is not None:
        shards = _wenet_list(storage, part, lines)
        if shards is not None:
            return "wenet", shards
    if storage.remote:  # why the shard list could not be read: a 404, a command that failed
        raise ShardError(
            f"{storage.locate(part)}: no {SHARD_LIST} (`wenet-lite prepare shards`) or WeNet "
            f"{WENET_LIST} of shard tars there ({why})"
        )
    return None


def _read_list(storage: Storage, name: str) -> Tuple[Optional[bytes], str]:
    """A list file's bytes, read once, or None and why it is not there (a remote one cannot
    be asked without fetching it: a 404, a ``pipe:`` command that failed)."""
    try:
        return read_bytes(storage.locate(name)), ""
    except NotThere as e:
        return None, str(e)


def _shar_list(storage: Storage, part: str, data: bytes) -> List[Shard]:
    where = storage.locate(f"{part}/{SHARD_LIST}")
    try:
        listing = json.loads(data)
        if listing.get("format") != SHAR_FORMAT:
            raise ValueError(f"format {listing.get('format')!r}, expected {SHAR_FORMAT!r}")
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


def _wenet_list(storage: Storage, part: str, data: bytes) -> Optional[List[Shard]]:
    """The tars of a WeNet ``data.list``; None when it is a raw list (JSON lines)."""
    where = storage.locate(f"{part}/{WENET_LIST}")
    lines = [x.strip() for x in data.decode("utf-8").splitlines() if x.strip()]
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
    if not isinstance(cut, Cut):
        kind = type(cut).__name__
        raise ShardError(f"{where}: not a cut (a lhotse {kind} line; a shard lists cuts)")
    try:
        check_sources([cut], where)
    except ValueError as e:  # DataCommandRefused among them
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
        audios = tar_pairs(shard.audio, stack) if audio else None
        fbank = tar_pairs(shard.fbank, stack) if shard.fbank else None
        for cut in cuts:
            if audios is not None:
                cut = _attach_audio(cut, next_pair(audios, cut.id, shard.audio))
            if fbank is not None:
                cut = _attach_fbank(cut, next_pair(fbank, cut.id, shard.fbank or ""))
            yield cut
        if audios is not None and next(audios, None) is not None:
            raise ShardError(f"{shard.audio}: holds more items than {shard.cuts} lists")


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
        for name, data in tar_members(location, stack):
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
