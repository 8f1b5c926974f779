"""Utterance manifests: every input format becomes a lhotse CutSet saved as ``cuts.jsonl.gz``.

The CutSet the dataset reads has one cut per utterance: ``cut.id`` is the utterance id and the
cut holds exactly one supervision spanning it, whose ``text`` is the raw transcript (the
tokenizer normalises case). Readers:

- lhotse manifests: a CutSet file, or a directory with ``cuts.jsonl.gz`` or one
  ``*recordings*.jsonl.gz`` + ``*supervisions*.jsonl.gz`` pair (:func:`read_lhotse`);
- a WeNet ``data.list``: JSON lines with ``key``, ``wav``, ``txt`` (:func:`read_data_list`);
- a Kaldi data dir: ``wav.scp`` + ``text`` and optional ``segments`` (:func:`read_kaldi_dir`).

Durations are needed for duration bucketing, so preparation reads each audio file's header
(soundfile via ``lhotse.Recording.from_file``: well under a millisecond a file, no decoding).
An audio file that is missing or whose header cannot be read is not an error: the utterance is
skipped, counted in :attr:`ReadResult.skipped` and reported in one warning. A malformed line is
an error naming ``file:line``. Relative audio paths are taken from the current directory, as
Kaldi and WeNet do, and stored absolute.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
from lhotse import (
    CutSet,
    Recording,
    RecordingSet,
    SupervisionSegment,
    SupervisionSet,
    load_manifest,
)
from lhotse.audio import AudioLoadingError
from lhotse.cut import Cut

from wenet_lite.data.commands import check_sources
from wenet_lite.data.storage import ShardError, read_bytes
from wenet_lite.features.audio import (
    AudioError,
    decode_audio_bytes,
    load_audio,
    quiet_decoder,
    resample,
)
from wenet_lite.fileio import atomic_open, temporary_path

__all__ = [
    "CUTS_FILENAME",
    "ReadResult",
    "cut_array",
    "cut_samples",
    "cut_text",
    "Skips",
    "Unusable",
    "from_pairs",
    "read_recording",
    "nth_cut",
    "load_cuts",
    "prepare_cuts",
    "read_data_list",
    "read_kaldi_dir",
    "read_lhotse",
    "read_manifest",
    "save_cuts",
    "utterance_cuts",
    "write_text",
]

CUTS_FILENAME = "cuts.jsonl.gz"
Pathlike = Union[str, Path]
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadResult:
    cuts: CutSet
    skipped: Dict[str, int] = field(default_factory=dict)
    """utterances left out, by reason ("missing audio", "unreadable audio", "no transcript")"""

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self, name: str) -> str:
        hours = sum(c.duration for c in self.cuts) / 3600
        line = f"{name}: {len(self.cuts)} utterances, {hours:.2f} h"
        if self.skipped:
            line += ", skipped " + ", ".join(f"{n} {why}" for why, n in self.skipped.items())
        return line


class Skips:
    """Counts skipped utterances by reason and keeps a few examples for the warning."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.examples: List[str] = []

    def add(self, reason: str, example: str) -> None:
        self.counts[reason] += 1
        if len(self.examples) < 3:
            self.examples.append(f"{example} ({reason})")

    def result(self, cuts: CutSet, source: Pathlike) -> ReadResult:
        if not len(cuts):
            raise ValueError(f"{source}: no usable utterances ({dict(self.counts)} skipped)")
        if self.counts:
            _log.warning(
                "%s: skipped %d utterances (%s), e.g. %s",
                source,
                sum(self.counts.values()),
                ", ".join(f"{n} {why}" for why, n in self.counts.items()),
                "; ".join(self.examples),
            )
        return ReadResult(cuts, dict(self.counts))


class Unusable(Exception):
    def __init__(self, reason: str, path: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


def read_recording(path: str, recording_id: str) -> Recording:
    """Header only; raises Unusable when the file is missing, not audio, or empty."""
    audio = os.path.abspath(os.path.expanduser(path))  # abspath, not resolve: keep symlinks
    if not os.path.isfile(audio):
        raise Unusable("missing audio", audio)
    try:
        with quiet_decoder(audio):
            recording = Recording.from_file(audio, recording_id=recording_id)
    except AudioLoadingError:
        raise Unusable("unreadable audio", audio) from None
    if recording.num_samples == 0 or recording.duration <= 0:
        raise Unusable("empty audio", audio)
    return recording


def utterance_cuts(recordings: RecordingSet, supervisions: SupervisionSet) -> CutSet:
    """One cut per supervision (cut id = supervision id), each holding only that supervision."""
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions)
    # from_manifests makes one cut per recording with ids like "<rec>-<n>"; trimming gives one
    # cut per utterance and names it after the supervision.
    return cuts.trim_to_supervisions(keep_overlapping=False).to_eager()


def from_pairs(pairs: List[Tuple[Recording, SupervisionSegment]]) -> CutSet:
    if not pairs:
        return CutSet()
    recordings = {r.id: r for r, _ in pairs}
    return utterance_cuts(
        RecordingSet.from_recordings(recordings.values()),
        SupervisionSet.from_segments(s for _, s in pairs),
    )


def _lines(path: Path) -> Iterator[Tuple[int, str]]:
    """(1-based line number, stripped line) for every non-blank line."""
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    yield lineno, line.strip()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{lineno + 1}: not UTF-8 text ({e.reason})") from None
    except (OSError, EOFError) as e:  # a bad or cut-off gzip stream
        raise ValueError(f"{path}: cannot read it ({e})") from None


def read_data_list(path: Pathlike) -> ReadResult:
    """A WeNet ``data.list``: one JSON object per line with string fields key, wav, txt."""
    path = Path(path)
    skips = Skips()
    pairs, seen = [], set()
    for lineno, line in _lines(path):
        key, wav, txt = _data_list_fields(line, f"{path}:{lineno}")
        if key in seen:
            raise ValueError(f"{path}:{lineno}: duplicate key {key!r}")
        seen.add(key)
        try:
            recording = read_recording(wav, key)
        except Unusable as e:
            skips.add(e.reason, e.path)
            continue
        sup = SupervisionSegment(key, key, start=0.0, duration=recording.duration, text=txt)
        pairs.append((recording, sup))
    return skips.result(from_pairs(pairs), path)


def _data_list_fields(line: str, where: str) -> Tuple[str, str, str]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not a JSON object ({e.msg}): {line[:80]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object with key, wav, txt, got {line[:80]!r}")
    for name in ("key", "wav", "txt"):
        if not isinstance(obj.get(name), str):
            problem = "missing" if name not in obj else "not a string in"
            raise ValueError(f"{where}: field {name!r} {problem} line (needs key, wav, txt)")
    return obj["key"], obj["wav"], obj["txt"]


def _kaldi_table(path: Path, allow_empty: bool = False) -> Dict[str, Tuple[int, str]]:
    """``<id> <rest of line>`` files: id -> (line number, rest)."""
    table: Dict[str, Tuple[int, str]] = {}
    for lineno, line in _lines(path):
        key, _, rest = line.replace("\t", " ").partition(" ")
        rest = rest.strip()
        if not rest and not allow_empty:
            raise ValueError(f"{path}:{lineno}: expected '<id> <value>', got {line[:80]!r}")
        if key in table:
            raise ValueError(f"{path}:{lineno}: duplicate id {key!r}")
        table[key] = (lineno, rest)
    return table


def _kaldi_segments(path: Path, wav_scp: Dict) -> Dict[str, Tuple[str, float, float]]:
    """utt -> (recording id, start s, end s or -1 for "to the end")."""
    segments = {}
    for utt, (lineno, rest) in _kaldi_table(path).items():
        fields = rest.split()
        try:
            rec, start, end = fields[0], float(fields[1]), float(fields[2])
        except (IndexError, ValueError):
            raise ValueError(
                f"{path}:{lineno}: expected '<utt> <recording> <start> <end>', got {rest!r}"
            ) from None
        if len(fields) != 3 or start < 0 or (end != -1 and end <= start):
            raise ValueError(f"{path}:{lineno}: bad segment {utt} {rest!r}")
        if rec not in wav_scp:
            raise ValueError(f"{path}:{lineno}: recording {rec!r} is not in wav.scp")
        segments[utt] = (rec, start, end)
    return segments


def read_kaldi_dir(data_dir: Pathlike) -> ReadResult:
    """A Kaldi data dir: ``wav.scp`` (file paths, not pipes), ``text``, optional ``segments``.

    Without ``segments`` each wav.scp entry is one utterance with the same id.
    """
    data_dir = Path(data_dir)
    for name in ("wav.scp", "text"):
        if not (data_dir / name).is_file():
            raise FileNotFoundError(f"{data_dir}: no {name} (a Kaldi data dir needs wav.scp, text)")
    wav_scp = _kaldi_table(data_dir / "wav.scp")
    for rec, (lineno, rest) in wav_scp.items():
        if rest.endswith("|"):
            raise ValueError(
                f"{data_dir / 'wav.scp'}:{lineno}: piped command for {rec!r} is not supported; "
                "write the audio to files and list their paths"
            )
    texts = _kaldi_table(data_dir / "text", allow_empty=True)
    if (data_dir / "segments").is_file():
        segments = _kaldi_segments(data_dir / "segments", wav_scp)
    else:
        segments = {rec: (rec, 0.0, -1.0) for rec in wav_scp}
    skips = Skips()
    for utt in sorted(texts.keys() - segments.keys()):
        skips.add("not in wav.scp/segments", utt)
    pairs = _kaldi_pairs(segments, wav_scp, texts, skips)
    return skips.result(from_pairs(pairs), data_dir)


def _kaldi_pairs(
    segments: Dict[str, Tuple[str, float, float]],
    wav_scp: Dict[str, Tuple[int, str]],
    texts: Dict[str, Tuple[int, str]],
    skips: Skips,
) -> List[Tuple[Recording, SupervisionSegment]]:
    recordings: Dict[str, Union[Recording, Unusable]] = {}
    pairs = []
    for utt, (rec_id, start, end) in segments.items():
        if utt not in texts:
            skips.add("no transcript", utt)
            continue
        if rec_id not in recordings:
            try:
                recordings[rec_id] = read_recording(wav_scp[rec_id][1], rec_id)
            except Unusable as e:
                recordings[rec_id] = e
        recording = recordings[rec_id]
        if isinstance(recording, Unusable):
            skips.add(recording.reason, recording.path)
            continue
        # Kaldi's extract-segments also clips a segment end that runs past the audio.
        end = recording.duration if end == -1 else min(end, recording.duration)
        if start >= end:
            skips.add("segment outside audio", utt)
            continue
        sup = SupervisionSegment(utt, rec_id, start=start, duration=end - start, text=texts[utt][1])
        pairs.append((recording, sup))
    return pairs


def read_lhotse(path: Pathlike) -> ReadResult:
    """A lhotse CutSet file, or a directory with ``cuts.jsonl.gz`` or a recordings and
    supervisions manifest pair. Cuts whose audio file is missing are skipped and counted."""
    path = Path(path)
    skips = Skips()
    with_text = []
    for cut in _load_lhotse_cuts(path):
        if not cut.supervisions:
            skips.add("no transcript", cut.id)
        elif cut.duration <= 0 or (cut.has_recording and cut.recording.num_samples == 0):
            skips.add("empty audio", cut.id)
        else:
            with_text.append(cut)
    utterances = CutSet.from_cuts(with_text).trim_to_supervisions(keep_overlapping=False)
    kept = []
    for cut in utterances:
        reason = _unusable_reason(cut)
        if reason:
            skips.add(reason, cut.id)
        else:
            kept.append(cut)
    return skips.result(CutSet.from_cuts(kept), path)


def _load_lhotse_cuts(path: Path) -> CutSet:
    if path.is_dir():
        if (path / CUTS_FILENAME).is_file():
            return _load_manifest(path / CUTS_FILENAME, CutSet)
        recs = sorted(path.glob("*recordings*.jsonl.gz"))
        sups = sorted(path.glob("*supervisions*.jsonl.gz"))
        if len(recs) != 1 or len(sups) != 1:
            raise ValueError(
                f"{path}: expected {CUTS_FILENAME} or exactly one *recordings*.jsonl.gz and one "
                f"*supervisions*.jsonl.gz, found {[p.name for p in recs + sups]}"
            )
        return CutSet.from_manifests(
            recordings=_load_manifest(recs[0], RecordingSet),
            supervisions=_load_manifest(sups[0], SupervisionSet),
        )
    return _load_manifest(path, CutSet)


def _load_manifest(path: Path, expected: type) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"lhotse manifest not found: {path}")
    try:
        manifest = load_manifest(path)
    except (ValueError, KeyError, TypeError, OSError, EOFError) as e:  # OSError: bad gzip
        raise ValueError(f"{path}: not a readable lhotse manifest ({e!r})") from None
    if not isinstance(manifest, expected):
        raise ValueError(f"{path}: expected a {expected.__name__}, got {type(manifest).__name__}")
    check_sources(manifest, str(path))  # a command source runs only with the user's opt-in
    return manifest


def _unusable_reason(cut: Cut) -> Optional[str]:
    if cut.supervisions[0].text is None:
        return "no transcript"
    if not cut.has_recording:
        return "no audio"
    for source in cut.recording.sources:
        if source.type == "file" and not os.path.isfile(source.source):
            return "missing audio"
    return None


def read_manifest(source: Pathlike) -> ReadResult:
    """Read any supported format, detected from the path and the first line."""
    source = Path(source)
    if source.is_dir():
        return read_kaldi_dir(source) if (source / "wav.scp").is_file() else read_lhotse(source)
    if not source.is_file():
        raise FileNotFoundError(f"manifest not found: {source}")
    first = next(_lines(source), (0, ""))[1]
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        raise ValueError(
            f"{source}:1: neither a WeNet data.list nor a lhotse manifest (not JSON); for Kaldi "
            "pass the data directory"
        ) from None
    is_data_list = isinstance(obj, dict) and "wav" in obj
    return read_data_list(source) if is_data_list else read_lhotse(source)


def prepare_cuts(source: Pathlike, out_dir: Pathlike) -> ReadResult:
    """Read ``source`` (any supported format) and save it as ``out_dir/cuts.jsonl.gz``."""
    result = read_manifest(source)
    save_cuts(result.cuts, Path(out_dir) / CUTS_FILENAME)
    _log.info("%s", result.summary(str(Path(out_dir) / CUTS_FILENAME)))
    return result


def save_cuts(cuts: CutSet, path: Pathlike) -> None:
    """Write a CutSet file atomically (lhotse picks the format from the suffixes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        cuts.to_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_cuts(path: Pathlike) -> CutSet:
    """Read a ``cuts.jsonl.gz`` written by :func:`prepare_cuts` (or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / CUTS_FILENAME
    return _load_manifest(path, CutSet)


def cut_text(cut: Cut) -> str:
    """The transcript of an utterance cut (its single supervision)."""
    if len(cut.supervisions) != 1:
        raise ValueError(f"cut {cut.id} has {len(cut.supervisions)} supervisions, expected 1")
    return cut.supervisions[0].text or ""


def nth_cut(data: Pathlike, index: int) -> Cut:
    """The ``index``-th cut of a prepared set in utterance-id order (for pictures of one
    utterance); ValueError naming the set when there is no such cut."""
    cuts = sorted(load_cuts(data), key=lambda c: c.id)
    if not 0 <= index < len(cuts):
        raise ValueError(f"no cut {index} in {data}: it has {len(cuts)} cuts")
    return cuts[index]


def cut_samples(cut: Cut, rate: int) -> np.ndarray:
    """(N,) float32 mono samples in [-1, 1] at ``rate`` of what a cut spans: the whole file, or
    its segment (Kaldi ``segments``). The one audio reader of decode and training.

    Every source is read by the toolkit's own readers, never by lhotse (which would run a
    ``pipe:`` path through a shell): a file by ``features.audio.load_audio``, audio held in
    memory (read from a shard) by ``features.audio.decode_audio_bytes``, an http(s) URL (and,
    with ``--allow-data-commands``, a command) through ``data.storage.open_location``. A
    recording of several sources (one file per channel) is their channels' mean. The sources
    pass ``check_sources`` first, however the cut was built. Raises AudioError naming the
    source.
    """
    if not cut.has_recording:
        raise AudioError(cut.id, "missing", "the cut has no recording")
    check_sources([cut], f"cut {cut.id}")
    sources = cut.recording.sources
    parts = [(_source_samples(cut, s, rate), max(1, len(s.channels))) for s in sources]
    if len(parts) == 1:
        samples = parts[0][0]
    else:  # one source per channel: weight each by the channels it holds
        n = min(p.size for p, _ in parts)
        total = sum(w for _, w in parts)
        samples = sum(p[:n] * np.float32(w / total) for p, w in parts).astype(np.float32)
    where = str(sources[0].source) if sources[0].type == "file" else cut.id
    return _segment(cut, samples, rate, where)


def _source_samples(cut: Cut, source: Any, rate: int) -> np.ndarray:
    """(N,) float32 samples at ``rate`` of one audio source (checked by ``check_sources``)."""
    if source.type == "file":
        return load_audio(source.source, rate)
    if source.type == "memory" and isinstance(source.source, bytes):
        return _decode_bytes(source.source, f"{cut.id} (in a shard)", rate)
    if source.type == "url":
        location = str(source.source)
    elif source.type == "command":
        location = "pipe:" + str(source.source)
    else:  # a Shar source whose audio the shard did not hold (a .nodata member)
        raise AudioError(cut.id, "missing", f"cut {cut.id} holds no audio ({source.type} source)")
    try:
        data = read_bytes(location)
    except ShardError as e:
        raise AudioError(cut.id, "missing", str(e)) from None
    return _decode_bytes(data, location, rate)


def _segment(cut: Cut, samples: np.ndarray, rate: int, where: str) -> np.ndarray:
    """The part of a recording's samples that ``cut`` spans (all of it for a whole file)."""
    if cut.start > 0 or cut.duration < cut.recording.duration - 1e-3:
        first = int(round(cut.start * rate))
        samples = samples[first : first + int(round(cut.duration * rate))]
        if samples.size == 0:
            raise AudioError(
                where, "empty", f"segment {cut.id} at {cut.start:.2f} s lies past its end"
            )
    return samples


def _decode_bytes(data: bytes, name: str, rate: int) -> np.ndarray:
    """(N,) float32 samples at ``rate`` of an encoded audio file held in memory."""
    samples, file_rate = decode_audio_bytes(data, name)
    if file_rate != rate:
        samples = np.clip(resample(samples, file_rate, rate), -1.0, 1.0).astype(np.float32)
    return samples


def cut_array(cut: Cut, name: str) -> np.ndarray:
    """A cut's stored array ``name`` (the ``fbank`` of ``compute-fbank``), read by the toolkit:
    a member of a shard (in memory) or a ``.npy`` file in a folder, never through lhotse (which
    would open a ``pipe:`` path through a shell). ValueError naming the cut for any other
    storage, a path that is not a folder on this machine, or a file that is not a plain
    ``.npy`` array; OSError when the file cannot be read."""
    check_sources([cut], f"cut {cut.id}")
    field = (cut.custom or {}).get(name)
    array = getattr(field, "array", field)
    if array is None or not hasattr(array, "storage_type"):
        raise ValueError(f"cut {cut.id} has no stored array {name!r}")
    kind, key = array.storage_type, array.storage_key
    if kind == "memory_npy" and isinstance(key, bytes):
        return _npy(io.BytesIO(key), f"cut {cut.id}'s {name} (in a shard)")
    if kind == "numpy_files":
        folder, key = Path(str(array.storage_path)), str(key)
        if not folder.is_dir() or Path(key).is_absolute() or ".." in Path(key).parts:
            raise ValueError(
                f"cut {cut.id}'s {name}: {folder}/{key} is not a file inside a folder here"
            )
        with open(folder / key, "rb") as f:
            return _npy(f, str(folder / key))
    raise ValueError(f"cut {cut.id}'s {name}: stored as {kind!r}, which the toolkit does not read")


def _npy(f: Any, name: str) -> np.ndarray:
    try:
        return np.load(f, allow_pickle=False)
    except (ValueError, EOFError) as e:
        raise ValueError(f"{name}: not a .npy array ({e})") from None


def write_text(cuts: CutSet, path: Pathlike) -> None:
    """One transcript per line, e.g. to inspect or train a tokenizer from a file."""
    with atomic_open(path, "w") as f:
        for cut in cuts:
            f.write(cut_text(cut) + "\n")
