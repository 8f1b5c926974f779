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
from typing import Dict, Union

from wenet_lite.config import ExperimentConfig, config_from_dict, config_to_dict
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.fileio import atomic_open, write_text_atomic
from wenet_lite.model.chunking import Chunking

__all__ = ["BUNDLE_FILE", "Bundle", "read_bundle", "write_bundle"]

PathLike = Union[str, Path]
BUNDLE_FILE = "wenet_lite.json"
BUNDLE_VERSION = 1
"""Bumped when a key of ``wenet_lite.json`` changes meaning."""
TOKENIZER_FILE = "tokenizer.model"


@dataclass(frozen=True)
class Bundle:
    """What :func:`read_bundle` found in an export directory."""

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


def write_bundle(
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
        "bundle_version": BUNDLE_VERSION,
        "engine": engine,
        "files": files,
        "metadata": metadata,
        "config": config_to_dict(cfg),
    }
    write_text_atomic(out / BUNDLE_FILE, json.dumps(record, indent=1) + "\n")
    return {"tokenizer": out / TOKENIZER_FILE, "bundle": out / BUNDLE_FILE}


def read_bundle(directory: PathLike) -> Bundle:
    """Read an export directory (see the module docstring for the errors)."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such export directory")
    path = root / BUNDLE_FILE
    if not path.is_file():
        raise ValueError(
            f"{root} is not a wenet_lite export directory: it has no {BUNDLE_FILE} "
            "(write one with wenet-lite export --format executorch or --format onnx)"
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        engine, names, meta = record["engine"], record["files"], record["metadata"]
        version = record["bundle_version"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a wenet_lite export record ({e!r})") from None
    if not isinstance(version, int) or version > BUNDLE_VERSION:
        raise ValueError(
            f"{path}: export format {version!r}, this wenet_lite reads up to {BUNDLE_VERSION}; "
            "upgrade wenet_lite"
        )
    try:
        cfg = config_from_dict(record["config"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: its config does not load: {e}") from None
    files = {role: root / name for role, name in names.items()}
    files["tokenizer"] = root / TOKENIZER_FILE
    for role, file in files.items():
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing from the export directory ({role})")
    try:
        tokenizer = Tokenizer.from_bytes(files["tokenizer"].read_bytes())
    except (ValueError, RuntimeError, OSError) as e:
        raise ValueError(f"{files['tokenizer']}: not a SentencePiece model ({e})") from None
    return Bundle(root, engine, meta, cfg, tokenizer, files)
