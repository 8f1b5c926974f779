"""recipes/synthetic/local/hotword_lists.py: the unseen words of the test set, and as many
unrelated rare words."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

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


def test_an_lm_text_without_rare_words_fills_the_list_with_the_rarest_training_words(
    synthetic_corpus, load_tool, tmp_path: Path, capsys
) -> None:
    """A corpus whose training text covers the LM text (the 20-hour synthetic one did): the
    unrelated list still has as many words, the rarest training words outside the test."""
    tool = load_tool("hotword_lists")
    data = synthetic_corpus.data
    train_cuts = list(load_cuts(data / "train-clean-100"))
    lm_text = tmp_path / "lm.txt"
    lm_text.write_text("".join(cut_text(c) + "\n" for c in train_cuts))
    args = ["--train-data", str(data / "train-clean-100"), "--test", str(data / "test-clean")]
    tool.main([*args, "--lm-text", str(lm_text), "--out-dir", str(tmp_path / "out")])
    assert "the rarest training words" in capsys.readouterr().out
    counts = Counter(w for c in train_cuts for w in normalize_text(cut_text(c)).split())
    test = _words(data / "test-clean")
    unseen = (tmp_path / "out" / "unseen.txt").read_text().split()
    unrelated = (tmp_path / "out" / "unrelated.txt").read_text().split()
    assert len(unrelated) == len(unseen) > 0
    assert set(unrelated) <= set(counts) and not set(unrelated) & test
    others = [counts[w] for w in counts if w not in test and w not in unrelated]
    assert others and max(counts[w] for w in unrelated) <= min(others)


def test_too_few_words_anywhere_is_one_line_naming_the_test_part(
    load_tool, tmp_path: Path, monkeypatch
) -> None:
    tool = load_tool("hotword_lists")
    words = {"train": Counter({"ALPHA": 2}), "test": Counter({"BETA": 1, "GAMMA": 1})}
    monkeypatch.setattr(tool, "_words", lambda parts: words[parts[0].name])
    lm_text = tmp_path / "lm.txt"
    lm_text.write_text("alpha beta\n")
    args = ["--train-data", "train", "--test", "test", "--lm-text", str(lm_text)]
    with pytest.raises(SystemExit) as e:
        tool.main([*args, "--out-dir", str(tmp_path / "out")])
    assert str(e.value) == (
        "error: only 1 words outside test's transcripts to draw 2 unrelated hotwords from"
    )
    assert not (tmp_path / "out").exists()  # nothing half-written
