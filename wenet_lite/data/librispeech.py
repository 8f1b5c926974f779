"""LibriSpeech preparation with lhotse's recipe, one ``cuts.jsonl.gz`` per part.

``root`` is either the ``LibriSpeech`` directory itself or a directory that holds it; a part is
any subdirectory laid out as ``<part>/<speaker>/<chapter>/*.flac`` + ``*.trans.txt``, so a
generated corpus may use its own part names. Output, per part::

    out_dir/<part>/cuts.jsonl.gz                            what the dataset reads
    out_dir/<part>/librispeech_{recordings,supervisions}_<part>.jsonl.gz   lhotse's own

lhotse reuses its two files when they exist (a re-run skips the audio scan): delete
``out_dir/<part>`` to prepare a changed corpus again. Transcripts stay as LibriSpeech has them
(upper case); the tokenizer normalises case.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from lhotse.recipes import prepare_librispeech as lhotse_prepare_librispeech

from wenet_lite.data.manifest import CUTS_FILENAME, ReadResult, save_cuts, utterance_cuts

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

    Utterances whose FLAC is missing are skipped and counted in ``ReadResult.skipped``.
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
    total, missing = _scan_transcripts(corpus_dir / part)
    if missing == total:
        # lhotse would stop on a bare "No recordings left after fixing the manifests."
        raise ValueError(f"{corpus_dir / part}: none of the {total} transcribed FLACs exist")
    manifests = lhotse_prepare_librispeech(
        corpus_dir, dataset_parts=[part], output_dir=part_dir, num_jobs=num_jobs
    )
    cuts = utterance_cuts(manifests[part]["recordings"], manifests[part]["supervisions"])
    result = ReadResult(cuts, {"missing audio": missing} if missing else {})
    save_cuts(cuts, part_dir / CUTS_FILENAME)
    if missing:
        _log.warning("%s: %d transcribed utterances have no FLAC; skipped", part, missing)
    _log.info("%s", result.summary(str(part_dir / CUTS_FILENAME)))
    return result


def _scan_transcripts(part_dir: Path) -> Tuple[int, int]:
    """Validate every ``*.trans.txt`` line and count utterances and missing FLACs.

    Done before lhotse parses the lines in threads, where a bad line raises a bare unpacking
    error and a part without audio an assertion.
    """
    total = missing = 0
    for trans in sorted(part_dir.rglob("*.trans.txt")):  # the files lhotse reads
        with trans.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                fields = line.split(maxsplit=1)
                if len(fields) != 2:
                    raise ValueError(
                        f"{trans}:{lineno}: expected '<utterance-id> <TRANSCRIPT>', "
                        f"got {line.rstrip()!r}"
                    )
                total += 1
                missing += not _flac_path(part_dir, fields[0]).is_file()
    return total, missing


def _flac_path(part_dir: Path, utterance_id: str) -> Path:
    """Where lhotse's recipe looks: <part>/<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac."""
    return part_dir / Path(utterance_id.replace("-", "/")).parent / f"{utterance_id}.flac"
