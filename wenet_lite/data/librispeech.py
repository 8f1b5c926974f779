"""LibriSpeech preparation, one lhotse ``cuts.jsonl.gz`` per part.

``root`` is either the ``LibriSpeech`` directory itself or a directory that holds it; a part is
any subdirectory laid out as ``<part>/<speaker>/<chapter>/*.flac`` + ``*.trans.txt``, so a
generated corpus may use its own part names. Output: ``out_dir/<part>/cuts.jsonl.gz``.

Each FLAC's header is read (``num_jobs`` threads) the way every other source's audio is
(``manifest._read_recording``): a missing, unreadable or empty (0-sample) file is skipped and
counted, like in a data.list or a Kaldi dir. (lhotse's own LibriSpeech recipe stops with an
exception on an unreadable or empty FLAC.) Transcripts stay as LibriSpeech has them (upper
case); the tokenizer normalises case.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from lhotse import SupervisionSegment

from wenet_lite.data.manifest import (
    CUTS_FILENAME,
    ReadResult,
    Skips,
    Unusable,
    from_pairs,
    read_recording,
    save_cuts,
)
from wenet_lite.fileio import naming_text_errors

__all__ = ["find_librispeech_dir", "find_parts", "prepare_librispeech"]

Pathlike = Union[str, Path]
_log = logging.getLogger(__name__)


def find_librispeech_dir(root: Pathlike) -> Path:
    """``root/LibriSpeech`` when it exists, else ``root``; always absolute, so that the audio
    paths stored in the cuts work from any directory."""
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise FileNotFoundError(f"LibriSpeech root not found: {root}")
    nested = root / "LibriSpeech"
    return nested if nested.is_dir() else root


def find_parts(corpus_dir: Path) -> List[str]:
    """Sorted names of the subdirectories laid out as ``<speaker>/<chapter>/*.trans.txt``."""
    return sorted(
        p.name for p in corpus_dir.iterdir() if p.is_dir() and next(p.glob("*/*/*.trans.txt"), 0)
    )


def prepare_librispeech(
    root: Pathlike,
    parts: Optional[Sequence[str]],
    out_dir: Pathlike,
    num_jobs: int = 1,
) -> Dict[str, ReadResult]:
    """Write ``out_dir/<part>/cuts.jsonl.gz`` for each part (every part found when None).

    Utterances whose FLAC is missing, unreadable or empty are skipped and counted in
    ``ReadResult.skipped``.
    ``num_jobs`` threads read audio headers.
    """
    corpus_dir = find_librispeech_dir(root)
    found = find_parts(corpus_dir)
    if not found:
        raise ValueError(
            f"no LibriSpeech parts under {root}: expected {corpus_dir}/<part>/<speaker>/"
            "<chapter>/*.flac with *.trans.txt (e.g. dev-clean, train-clean-100)"
        )
    parts = list(found if parts is None else parts)
    unknown = [p for p in parts if p not in found]
    if unknown:
        raise ValueError(f"LibriSpeech part(s) {unknown} not in {corpus_dir} (found: {found})")
    return {part: _prepare_part(corpus_dir, part, Path(out_dir) / part, num_jobs) for part in parts}


def _prepare_part(corpus_dir: Path, part: str, part_dir: Path, num_jobs: int) -> ReadResult:
    utterances = _scan_transcripts(corpus_dir / part)
    skips = Skips()

    def header(item: Tuple[str, str]):
        utt, _ = item
        try:
            return read_recording(str(_flac_path(corpus_dir / part, utt)), utt)
        except Unusable as e:
            return e

    with ThreadPoolExecutor(max(1, num_jobs)) as pool:
        recordings = list(pool.map(header, utterances))
    pairs = []
    for (utt, text), recording in zip(utterances, recordings):
        if isinstance(recording, Unusable):
            skips.add(recording.reason, recording.path)
            continue
        sup = SupervisionSegment(utt, utt, start=0.0, duration=recording.duration, text=text)
        pairs.append((recording, sup))
    result = skips.result(from_pairs(pairs), corpus_dir / part)
    save_cuts(result.cuts, part_dir / CUTS_FILENAME)
    _log.info("%s", result.summary(str(part_dir / CUTS_FILENAME)))
    return result


def _scan_transcripts(part_dir: Path) -> List[Tuple[str, str]]:
    """(utterance id, transcript) of every ``*.trans.txt`` line; a malformed line or an id
    given twice (whose cuts would get random ids and two transcripts) is an error naming the
    file and line of both."""
    utterances = []
    seen: Dict[str, str] = {}
    for trans in sorted(part_dir.rglob("*.trans.txt")):
        with trans.open(encoding="utf-8") as f, naming_text_errors(trans):
            for lineno, line in enumerate(f, start=1):
                fields = line.split(maxsplit=1)
                if len(fields) != 2:
                    raise ValueError(
                        f"{trans}:{lineno}: expected '<utterance-id> <TRANSCRIPT>', "
                        f"got {line.rstrip()!r}"
                    )
                where = f"{trans}:{lineno}"
                if fields[0] in seen:
                    raise ValueError(
                        f"{where}: utterance {fields[0]} appears twice (first at "
                        f"{seen[fields[0]]}); each id names one FLAC and one transcript"
                    )
                seen[fields[0]] = where
                utterances.append((fields[0], fields[1].strip()))
    return utterances


def _flac_path(part_dir: Path, utterance_id: str) -> Path:
    """Where lhotse's recipe looks: <part>/<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac."""
    return part_dir / Path(utterance_id.replace("-", "/")).parent / f"{utterance_id}.flac"
