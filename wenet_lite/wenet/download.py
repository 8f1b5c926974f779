"""WeNet's published U2/U2++ checkpoints by name: download (resumable, with a progress bar),
check, unpack, and the LayerNorm epsilon each was trained with (`import-wenet --download`).

WeNet lists its checkpoints in ``docs/pretrained_models.en.md`` of its repository; the
"Checkpoint Model" archives are tar.gz files of one model directory (``final.pt``,
``train.yaml``, ``units.txt``, ``global_cmvn`` and, for English, a sentencepiece model).

Downloads go to a cache (``$XDG_CACHE_HOME/wenet_lite/wenet``, else ``~/.cache/...``): the
archive is written to ``<name>.part`` and renamed when complete, so an interrupted download
resumes where it stopped (an HTTP range request) and never passes for a whole one. The
SHA-256 of an archive is recorded beside it on its first download and checked on every later
use, so a cache file that changed (a damaged disk, another file under the name) is refused.
Two processes that ask for one model at once take turns (a lock file beside the archive, where
the system has ``fcntl``): the second finds the archive and the model the first left.
An archive with a member that is not a plain file or folder, or whose name is absolute or
holds ``..``, is refused before anything is unpacked (the same rule on every Python; tarfile's
``data`` filter stands behind it where the Python has one).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple, Union

from wenet_lite.fileio import read_json, write_text_atomic

__all__ = ["PRETRAINED", "Pretrained", "cache_dir", "download_model", "guess_norm_eps"]

_log = logging.getLogger(__name__)
PathLike = Union[str, Path]

_BASE = "https://wenet-1256283475.cos.ap-shanghai.myqcloud.com/models"
OLD_EPS, NEW_EPS = 1e-12, 1e-5
NEW_EPS_SINCE = "20220111"
"""WeNet's LayerNorm epsilon was 1e-12 in models trained before this date, 1e-5 since"""


@dataclass(frozen=True)
class Pretrained:
    """One of WeNet's published checkpoint archives."""

    url: str
    norm_eps: float
    """the LayerNorm epsilon it was trained with (checkpoints do not record it)"""
    about: str


PRETRAINED: Dict[str, Pretrained] = {
    "librispeech": Pretrained(
        f"{_BASE}/librispeech/20210610_u2pp_conformer_exp.tar.gz", OLD_EPS,
        "English, LibriSpeech 960 h, U2++ conformer 12 x 256, BPE 5000 (2021-06)",
    ),
    "gigaspeech": Pretrained(
        f"{_BASE}/gigaspeech/gigaspeech_u2pp_conformer_exp.tar.gz", OLD_EPS,
        "English, GigaSpeech 10,000 h, U2++ conformer 12 x 512, subsampling 6 (2021)",
    ),
    "aishell": Pretrained(
        f"{_BASE}/aishell/20210601_u2%2B%2B_conformer_exp.tar.gz", OLD_EPS,
        "Mandarin, AISHELL-1 150 h, U2++ conformer 12 x 256, characters (2021-06)",
    ),
    "aishell2": Pretrained(
        f"{_BASE}/aishell2/20210618_u2pp_conformer_exp.tar.gz", OLD_EPS,
        "Mandarin, AISHELL-2 1000 h, U2++ conformer 12 x 256, characters (2021-06)",
    ),
    "multi_cn": Pretrained(
        f"{_BASE}/multi_cn/20210815_unified_conformer_exp.tar.gz", OLD_EPS,
        "Mandarin, several corpora, U2 conformer, characters (2021-08)",
    ),
    "wenetspeech": Pretrained(
        f"{_BASE}/wenetspeech/wenetspeech_u2pp_conformer_exp.tar.gz", NEW_EPS,
        "Mandarin, WenetSpeech 10,000 h, U2++ conformer 12 x 512, characters (2022-05)",
    ),
}  # fmt: skip
"""WeNet's U2/U2++ checkpoint archives (its ``docs/pretrained_models.en.md``) by name"""

_CHUNK = 1 << 20


def cache_dir() -> Path:
    """Where downloads are kept: ``$XDG_CACHE_HOME/wenet_lite/wenet`` or
    ``~/.cache/wenet_lite/wenet``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wenet_lite" / "wenet"


def download_model(
    name_or_url: str, cache: Optional[PathLike] = None, progress: bool = True
) -> Path:
    """The unpacked model directory of a table name or an archive URL: downloaded (or
    resumed), its checksum recorded or checked, unpacked once. ValueError for an unknown
    name, a failed download or an archive without a model."""
    url = _url(name_or_url)
    root = Path(cache) if cache is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    archive = root / _archive_name(url)
    with _taking_turns(archive.with_name(archive.name + ".lock")):
        if not archive.is_file():
            _fetch(url, archive, progress)
        _check_sum(archive, url, root / "sha256.json")
        unpacked = root / archive.name.split(".tar")[0]
        if not unpacked.is_dir():
            _unpack(archive, unpacked)
    return _model_dir(unpacked, archive)


@contextlib.contextmanager
def _taking_turns(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (created) for the block: one download,
    check and unpack of an archive at a time, across processes; where the system has no
    ``fcntl`` (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _url(name_or_url: str) -> str:
    if re.match(r"^https?://", name_or_url):
        return name_or_url
    if name_or_url not in PRETRAINED:
        raise ValueError(
            f"no WeNet model named {name_or_url!r}; the names: {', '.join(PRETRAINED)} "
            "(or give an http(s) URL of a checkpoint archive)"
        )
    return PRETRAINED[name_or_url].url


def _archive_name(url: str) -> str:
    name = urllib.request.url2pathname(url.rsplit("/", 1)[-1].split("?")[0])
    if not re.fullmatch(r"[\w.+-]+\.(tar\.gz|tgz|tar)", name):
        raise ValueError(f"{url}: not the URL of a .tar.gz archive")
    return name


def _fetch(url: str, archive: Path, progress: bool) -> None:
    """Download ``url`` to ``archive``, resuming ``<archive>.part`` when the server allows."""
    part = archive.with_name(archive.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "wenet-lite"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the part is already whole
            os.replace(part, archive)
            return
        raise ValueError(f"{url}: download failed (HTTP {e.code} {e.reason})") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ValueError(f"{url}: download failed ({reason})") from None
    with response:
        resumed = have and response.status == 206
        if have and not resumed:
            _log.info("%s: the server does not resume; downloading from the start", url)
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None and length.isdigit() else None
        bar = _bar(total, have, archive.name) if progress else None
        try:
            with open(part, "ab" if resumed else "wb") as f:
                while True:
                    block = response.read(_CHUNK)
                    if not block:
                        break
                    f.write(block)
                    if bar is not None:
                        bar.update(len(block))
                f.flush()
                os.fsync(f.fileno())
        except (OSError, urllib.error.URLError) as e:
            raise ValueError(
                f"{url}: download interrupted ({e}); run again to resume from "
                f"{part.stat().st_size} bytes"
            ) from None
        finally:
            if bar is not None:
                bar.close()
    got = part.stat().st_size
    if total is not None and got != total:
        raise ValueError(
            f"{url}: download interrupted at {got} of {total} bytes; run again to resume"
        )
    os.replace(part, archive)


def _bar(total: Optional[int], initial: int, name: str):  # noqa: ANN202 - tqdm's type
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024,
                desc=name, leave=False)  # fmt: skip


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_sum(archive: Path, url: str, record: Path) -> None:
    """Record the archive's SHA-256 on first use; later, refuse an archive that differs."""
    sums = read_json(record) if record.is_file() else {}
    if not isinstance(sums, dict):
        raise ValueError(f"{record}: not a checksum record (delete it to start afresh)")
    digest = _sha256(archive)
    known = sums.get(archive.name)
    if known is None:
        sums[archive.name] = digest
        write_text_atomic(record, json.dumps(sums, indent=1, sort_keys=True) + "\n")
        _log.info("%s: sha256 %s recorded in %s", archive, digest, record)
    elif known != digest:
        raise ValueError(
            f"{archive}: sha256 {digest} is not the {known} recorded on its first download "
            f"(damaged? delete it to download {url} again)"
        )


def _unpack(archive: Path, target: Path) -> None:
    """Unpack into a temporary folder, then rename: an interrupted unpack leaves nothing
    that passes for a model, and the next one (its caller holding the lock) clears it."""
    tmp = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():  # our rule, the same on every Python
                _check_member(member, archive)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")  # and the filter behind it where it exists
            else:
                tar.extractall(tmp)
    except (tarfile.TarError, EOFError, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{archive}: not an archive that unpacks ({first})") from None
    os.replace(tmp, target)


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    name = Path(member.name)
    if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
        raise ValueError(f"{archive}: refused member {member.name!r} (outside or not a file)")


def _model_dir(unpacked: Path, archive: Path) -> Path:
    found = sorted(p.parent for p in unpacked.rglob("final.pt"))
    if not found:
        raise ValueError(f"{archive}: no final.pt inside; not a WeNet checkpoint archive")
    return found[0]


def guess_norm_eps(model_dir: PathLike, train: Dict) -> Tuple[float, str, bool]:
    """(epsilon, how it was chosen, certain) for a directory not in the table: WeNet's newer
    train.yaml layout (``cmvn_conf``/``tokenizer_conf``) is from 2022 or later (1e-5); a date
    in the directory's name (``20210610_...``) says which side of the change it is; else 1e-5,
    a guess."""
    if "cmvn_conf" in train or "tokenizer_conf" in train:
        return NEW_EPS, "train.yaml has the 2022+ layout (cmvn_conf/tokenizer_conf)", True
    dated = re.search(r"(20\d{6})_", Path(model_dir).resolve().name)
    if dated:
        eps = OLD_EPS if dated.group(1) < NEW_EPS_SINCE else NEW_EPS
        return eps, f"the directory's date {dated.group(1)}", True
    return NEW_EPS, "no evidence (WeNet's value since 2022-01)", False
