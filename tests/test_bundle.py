"""Export directories (wenet_lite/bundle.py): what is written reads back, and every problem is
an error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wenet_lite.bundle import BUNDLE_FILE, read_bundle, write_bundle
from wenet_lite.config import load_config
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model.chunking import Chunking

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundle_dir(synthetic_corpus, tmp_path: Path) -> Path:
    cfg = load_config(ROOT / "conf" / "tiny_test.yaml")
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    (tmp_path / "model.pte").write_bytes(b"program")
    meta = {"chunk_size": "8", "left_chunks": "3", "format_version": "1"}
    write_bundle(tmp_path, cfg, tokenizer, meta, "executorch", {"model": "model.pte"})
    return tmp_path


def test_what_is_written_reads_back(bundle_dir: Path, synthetic_corpus) -> None:
    bundle = read_bundle(bundle_dir)
    assert bundle.engine == "executorch" and bundle.chunking == Chunking(8, 3)
    assert bundle.cfg == load_config(ROOT / "conf" / "tiny_test.yaml")
    assert bundle.files["model"] == bundle_dir / "model.pte"
    words = "the quick brown fox"
    assert bundle.tokenizer.encode(words) == Tokenizer.load(synthetic_corpus.tokenizer).encode(
        words
    )


def _edit(bundle_dir: Path, change) -> None:
    path = bundle_dir / BUNDLE_FILE
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_every_problem_names_the_file(bundle_dir: Path, tmp_path: Path) -> None:
    record = bundle_dir / BUNDLE_FILE
    with pytest.raises(FileNotFoundError, match="no such export directory"):
        read_bundle(tmp_path / "none")
    (bundle_dir / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"tokenizer\.model: not a SentencePiece model"):
        read_bundle(bundle_dir)
    _edit(bundle_dir, lambda r: r.update(bundle_version=99))
    with pytest.raises(ValueError, match=rf"{record}: export format 99, .* upgrade wenet_lite"):
        read_bundle(bundle_dir)
    _edit(bundle_dir, lambda r: r.update(bundle_version=1) or r["config"].update(nonsense=1))
    with pytest.raises(ValueError, match=rf"{record}: its config does not load: .*nonsense"):
        read_bundle(bundle_dir)
    _edit(bundle_dir, lambda r: r.pop("files"))
    with pytest.raises(ValueError, match=rf"{record}: not a wenet_lite export record"):
        read_bundle(bundle_dir)
