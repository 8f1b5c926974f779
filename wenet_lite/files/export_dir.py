"""An export directory that a recognizer opens without the model file: the engine's program
plus everything else streaming needs.

``wenet_lite.json`` holds the export metadata (``wenet_lite.export.common``: chunking, dims, fbank
options, precision), the resolved training config (features, subsampling, decode defaults),
which engine the directory is for, and its files by role (``model``, ``model_int8``, ...);
``tokenizer.model`` is the SentencePiece model (pieces, word starts, text). Written by
``wenet-lite export --format executorch`` and ``--format onnx``; read by
``wenet_lite.recognizer.open_recognizer`` (``stream --model DIR``).

Every problem is a ValueError (or FileNotFoundError) naming the file: a directory without
``wenet_lite.json``, a file it lists that is missing, a format newer than this release, a
config or tokenizer that does not load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Union

from wenet_lite.config import ExperimentConfig, config_from_dict, config_to_dict
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.fileio import atomic_open, read_json, write_text_atomic
from wenet_lite.model.chunking import Chunking

__all__ = ["RECORD_FILE", "ExportDir", "is_export_dir", "read_export_dir", "write_export_dir"]

PathLike = Union[str, Path]
RECORD_FILE = "wenet_lite.json"
RECORD_VERSION = 1
"""Bumped when a key of ``wenet_lite.json`` changes meaning."""
TOKENIZER_FILE = "tokenizer.model"


@dataclass(frozen=True)
class ExportDir:
    """What :func:`read_export_dir` found in an export directory."""

    directory: Path
    engine: str
    """the engine the programs are for: ``executorch`` or ``onnxruntime``"""
    metadata: Dict[str, str]
    cfg: ExperimentConfig
    tokenizer: Tokenizer
    files: Dict[str, Path]
    """existing files by role (``model``, ``model_int8``, ...)"""

    @property
    def chunking(self) -> Chunking:
        """The chunking the programs were exported with (their shapes fix it)."""
        return Chunking(int(self.metadata["chunk_size"]), int(self.metadata["left_chunks"]))


def write_export_dir(
    out: Path,
    cfg: ExperimentConfig,
    tokenizer: Tokenizer,
    metadata: Dict[str, str],
    engine: str,
    files: Dict[str, str],
) -> Dict[str, Path]:
    """Write ``tokenizer.model`` and ``wenet_lite.json`` beside the programs in ``files``
    (names relative to ``out``); returns those two paths by role."""
    with atomic_open(out / TOKENIZER_FILE, "wb") as f:
        f.write(tokenizer.to_bytes())
    record = {
        "bundle_version": RECORD_VERSION,
        "engine": engine,
        "files": files,
        "metadata": metadata,
        "config": config_to_dict(cfg),
    }
    write_text_atomic(out / RECORD_FILE, json.dumps(record, indent=1) + "\n")
    return {"tokenizer": out / TOKENIZER_FILE, "record": out / RECORD_FILE}


_META_INTS = ("chunk_size", "left_chunks")
"""metadata every reader needs, as integers"""


_FEATURES = (("features.sample_rate", "sample_rate", "sample_rate"),
             ("features.num_mel_bins", "num_mel_bins", "num_mel_bins"))  # fmt: skip
"""(config key, FeatureConfig field, metadata key) that must agree"""


def _check_metadata(path: Path, meta: Dict[str, Any], cfg: ExperimentConfig) -> None:
    """The metadata's integers, and its features against the record's config: both were
    written from one model, so a difference is an edited record (the programs keep the
    metadata's; a config of 8 kHz would resample the audio for a 16 kHz program)."""
    for key in (*_META_INTS, *(k for _, _, k in _FEATURES if k in meta)):
        value = meta.get(key)
        try:
            meta_int = int(value) if isinstance(value, (str, int)) else None
        except ValueError:
            meta_int = None
        if meta_int is None or isinstance(value, bool):
            shown = "missing" if key not in meta else repr(value)[:40]
            raise ValueError(f"{path}: metadata.{key} must be an integer, it is {shown}")
    try:
        Chunking(int(meta["chunk_size"]), int(meta["left_chunks"]))
    except ValueError as e:
        raise ValueError(f"{path}: metadata: {e}") from None
    for key, field, meta_key in _FEATURES:
        said = getattr(cfg.features, field)
        if meta_key in meta and said != int(meta[meta_key]):
            raise ValueError(
                f"{path}: config.{key} is {said} but the programs were exported with "
                f"{meta[meta_key]} (metadata.{meta_key}): the record was edited"
            )


def _inside(root: Path, path: Path, role: str, name: Any) -> Path:
    """A file the record lists, which must be a plain name inside the directory (a record
    naming ``/etc/passwd`` or ``../x.onnx`` is refused, not opened)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(
            f"{path}: files.{role} must be a file name inside {root}, it is {str(name)[:80]!r}"
        )
    return root / name


def is_export_dir(source: Any) -> bool:
    """Whether a model source is an export directory: read (an :class:`ExportDir`) or a path to
    a directory (whose record :func:`read_export_dir` reads, or refuses by name). The one test
    of it: a model file is a file."""
    return isinstance(source, ExportDir) or (
        isinstance(source, (str, Path)) and Path(source).is_dir()
    )


def read_export_dir(directory: PathLike) -> ExportDir:
    """Read an export directory (see the module docstring for the errors)."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such export directory")
    path = root / RECORD_FILE
    if not path.is_file() and (root / "final.pt").is_file():
        raise ValueError(
            f"{root} is a WeNet model directory, not a model file: import it first "
            "(`wenet-lite import-wenet`)"
        )
    if not path.is_file():
        raise ValueError(
            f"{root} is not a wenet_lite export directory: it has no {RECORD_FILE} "
            "(`wenet-lite export` writes one for executorch or onnxruntime)"
        )
    record = read_json(path)
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a wenet_lite export record (a {type(record).__name__})")
    for key, kind in (("bundle_version", int), ("engine", str), ("files", dict),
                      ("metadata", dict), ("config", dict)):  # fmt: skip
        if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
            got = "missing" if key not in record else f"a {type(record[key]).__name__}"
            raise ValueError(f"{path}: {key} must be a {kind.__name__}, it is {got}")
    engine, names, meta, version = (record[k] for k in ("engine", "files", "metadata",
                                                        "bundle_version"))  # fmt: skip
    if version > RECORD_VERSION:
        raise ValueError(
            f"{path}: export format {version!r}, this wenet_lite reads up to {RECORD_VERSION}; "
            "upgrade wenet_lite"
        )
    try:
        cfg = config_from_dict(record["config"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: its config does not load: {e}") from None
    _check_metadata(path, meta, cfg)
    if "model" not in names:
        raise ValueError(f"{path}: files names no 'model' (the encoder's program)")
    files = {role: _inside(root, path, role, name) for role, name in names.items()}
    files["tokenizer"] = root / TOKENIZER_FILE
    for role, file in files.items():
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing from the export directory ({role})")
    try:
        tokenizer = Tokenizer.from_bytes(files["tokenizer"].read_bytes())
    except (ValueError, RuntimeError, OSError) as e:
        raise ValueError(f"{files['tokenizer']}: not a SentencePiece model ({e})") from None
    return ExportDir(root, engine, meta, cfg, tokenizer, files)
