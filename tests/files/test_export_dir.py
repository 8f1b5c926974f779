"""Export directories (wenet_lite/files/export_dir.py): what is written reads back, and every
problem is an error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wenet_lite.config import load_config
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.files.export_dir import RECORD_FILE, read_export_dir, write_export_dir
from wenet_lite.model.chunking import Chunking

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle_dir(synthetic_corpus, tmp_path: Path) -> Path:
    cfg = load_config(ROOT / "conf" / "tiny_test.yaml")
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    (tmp_path / "model.pte").write_bytes(b"program")
    meta = {"chunk_size": "8", "left_chunks": "3", "format_version": "1"}
    write_export_dir(tmp_path, cfg, tokenizer, meta, "executorch", {"model": "model.pte"})
    return tmp_path


def test_what_is_written_reads_back(bundle_dir: Path, synthetic_corpus) -> None:
    bundle = read_export_dir(bundle_dir)
    assert bundle.engine == "executorch" and bundle.chunking == Chunking(8, 3)
    assert bundle.cfg == load_config(ROOT / "conf" / "tiny_test.yaml")
    assert bundle.files["model"] == bundle_dir / "model.pte"
    words = "the quick brown fox"
    assert bundle.tokenizer.encode(words) == Tokenizer.load(synthetic_corpus.tokenizer).encode(
        words
    )


def _edit(bundle_dir: Path, change) -> None:
    path = bundle_dir / RECORD_FILE
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_every_problem_names_the_file(bundle_dir: Path, tmp_path: Path) -> None:
    record = bundle_dir / RECORD_FILE
    with pytest.raises(FileNotFoundError, match="no such export directory"):
        read_export_dir(tmp_path / "none")
    (bundle_dir / "tokenizer.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"tokenizer\.model: not a SentencePiece model"):
        read_export_dir(bundle_dir)
    _edit(bundle_dir, lambda r: r.update(bundle_version=99))
    with pytest.raises(ValueError, match=rf"{record}: export format 99, .* upgrade wenet_lite"):
        read_export_dir(bundle_dir)
    _edit(bundle_dir, lambda r: r.update(bundle_version=1) or r["config"].update(nonsense=1))
    with pytest.raises(ValueError, match=rf"{record}: its config does not load: .*nonsense"):
        read_export_dir(bundle_dir)
    _edit(bundle_dir, lambda r: r.pop("files"))
    with pytest.raises(ValueError, match=rf"{record}: files must be a dict, it is missing"):
        read_export_dir(bundle_dir)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda r: r["metadata"].pop("chunk_size"),
            "metadata.chunk_size must be an integer, it is missing",
        ),
        (
            lambda r: r["metadata"].update(chunk_size="abc"),
            "metadata.chunk_size must be an integer, it is 'abc'",
        ),
        (lambda r: r["metadata"].update(left_chunks="-5"), "metadata: left chunks must be"),
        (lambda r: r.update(metadata=[1]), "metadata must be a dict, it is a list"),
        (lambda r: r.update(files=["a"]), "files must be a dict, it is a list"),
        (lambda r: r.update(files={}), "files names no 'model'"),
        (
            lambda r: r.update(files={"model": "/etc/passwd"}),
            "files.model must be a file name inside",
        ),
        (lambda r: r.update(files={"model": "../model.pte"}), "files.model must be a file name"),
        (
            lambda r: (
                r["metadata"].update(sample_rate="16000")
                or r["config"]["features"].update(sample_rate=8000)
            ),
            "config.features.sample_rate is 8000 but the programs were exported with 16000",
        ),
        (
            lambda r: (
                r["metadata"].update(num_mel_bins="80")
                or r["config"]["features"].update(num_mel_bins=40)
            ),
            "config.features.num_mel_bins is 40",
        ),
    ],
)
def test_records_are_checked_before_any_program_is_opened(bundle_dir, change, message) -> None:
    """Wrong types, missing keys, names outside the directory and a config edited away from
    the metadata the programs were exported with: each one line naming the record."""
    _edit(bundle_dir, change)
    with pytest.raises(ValueError, match=f"{bundle_dir / RECORD_FILE}: {message}"):
        read_export_dir(bundle_dir)


def test_deeply_nested_json_is_one_line(bundle_dir: Path) -> None:
    (bundle_dir / RECORD_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_export_dir(bundle_dir)
    (bundle_dir / RECORD_FILE).write_bytes(b'{"a": "' + bytes([0xFF]) + b'"}')
    with pytest.raises(ValueError, match=r"wenet_lite.json: not UTF-8 text \(byte 0xff"):
        read_export_dir(bundle_dir)
