"""Writing Lhotse Shar shards (`wenet-lite prepare shards`): per shard a cuts file, a tar of
FLAC audio and optionally a tar of stored fbank, and the part's shard list; the layout is
``data/shards.py``'s."""

from __future__ import annotations

import gzip
import io
import json
import logging
import shutil
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf
from lhotse import AudioSource
from lhotse.array import Array, TemporalArray
from lhotse.cut import Cut
from lhotse.utils import fastcopy
from tqdm import tqdm

from wenet_lite.data.manifest import cut_samples
from wenet_lite.data.shards import SHAR_FORMAT, SHARD_LIST, memory_cut
from wenet_lite.features.audio import AudioError

__all__ = ["WriteResult", "write_shards"]

_log = logging.getLogger(__name__)


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
    listing: Dict[str, Any] = {"format": SHAR_FORMAT, "shards": shards}
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
