"""tools/hotword_lists.py: the unseen words of the test set, and as many unrelated rare words."""

from __future__ import annotations

from pathlib import Path

from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text


def _words(part: Path) -> set:
    return {w for c in load_cuts(part) for w in normalize_text(cut_text(c)).split()}


def test_lists(synthetic_corpus, load_tool, tmp_path: Path) -> None:
    tool = load_tool("hotword_lists")
    data = synthetic_corpus.data
    lm_text = synthetic_corpus.root / "librispeech-lm-norm.txt.gz"
    args = ["--train-data", str(data / "train-clean-100"), "--test", str(data / "test-clean")]
    tool.main([*args, "--lm-text", str(lm_text), "--out-dir", str(tmp_path / "a")])
    tool.main([*args, "--lm-text", str(lm_text), "--out-dir", str(tmp_path / "b")])
    train, test = _words(data / "train-clean-100"), _words(data / "test-clean")
    unseen = (tmp_path / "a" / "unseen.txt").read_text().split()
    unrelated = (tmp_path / "a" / "unrelated.txt").read_text().split()
    assert unseen and set(unseen) == test - train
    assert len(unrelated) == len(unseen) and not set(unrelated) & (test | train)
    assert (tmp_path / "b" / "unrelated.txt").read_text().split() == unrelated  # seeded
