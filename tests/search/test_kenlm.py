"""KenLM as the word LM's backend: an ARPA file gives the Python reader's scores through it
(our own `train-lm` output, bigram and trigram, histories with unknown words), the prefix beam
fused with either finds the same hypotheses, `train-lm` writes ARPA that KenLM reads; without
KenLM a file too large for the Python reader, or a binary file, is one line naming the extra."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from wenet_lite.search import kenlm_backend
from wenet_lite.search.arpa import ArpaLM
from wenet_lite.search.ctc_search import ctc_prefix_beam_search
from wenet_lite.search.lm import PYTHON_ARPA_LIMIT, LMScorer, WordLM, load_lm

TEXTS = ["THE CAT SAT", "THE CAT RAN", "A DOG SAT ON THE MAT", "THE DOG RAN AWAY",
         "A CAT SAT ON A DOG", "ON THE MAT SAT THE CAT"]  # fmt: skip
PIECES = ["<blank>", "<unk>", "▁THE", "▁CAT", "▁SAT", "▁DOG", "▁RAN", "▁A", "▁ON", "▁MAT", "S"]


def _arpa(tmp_path: Path, order: int, gz: bool = False) -> Path:
    path = tmp_path / f"lm{order}.arpa{'.gz' if gz else ''}"
    WordLM.train(TEXTS, order=order).save_arpa(path)
    return path


@pytest.mark.parametrize("order, gz", [(2, False), (3, False), (3, True)])
def test_kenlm_gives_the_python_readers_scores(tmp_path, order, gz) -> None:
    pytest.importorskip("kenlm")
    path = _arpa(tmp_path, order, gz)
    ours, theirs = ArpaLM.load(path), kenlm_backend.KenLM.load(path)
    assert theirs.order == ours.order == order and set(theirs.words) == set(ours.words)
    histories = ["<s>", "<s> THE", "THE CAT", "CAT SAT", "ZEBRA", "<s> ZEBRA", "ZEBRA THE",
                 "THE ZEBRA", "MAT"]  # fmt: skip
    words = ["THE", "CAT", "SAT", "MAT", "</s>", "ZEBRA", "A"]
    for h in histories:
        for w in words:
            assert abs(theirs.log_prob(h, w) - ours.log_prob(h, w)) < 1e-4, (h, w)
    assert "ZEBRA" not in theirs.words and "CAT" in theirs.words


def test_the_prefix_beam_fuses_either_backend_alike(tmp_path) -> None:
    pytest.importorskip("kenlm")
    path = _arpa(tmp_path, 3)
    g = torch.Generator().manual_seed(3)
    log_probs = (torch.randn(40, len(PIECES), generator=g) * 2).log_softmax(-1)
    found = {}
    for backend in ("python", "kenlm"):
        scorer = LMScorer.load(path, PIECES, 0.8, 1.0, 2.0, backend)
        found[backend] = ctc_prefix_beam_search(log_probs, 8, 4, scorer=scorer)
    assert [h.tokens for h in found["python"]] == [h.tokens for h in found["kenlm"]]
    for a, b in zip(found["python"], found["kenlm"]):
        assert abs(a.score - b.score) < 1e-3
    plain = ctc_prefix_beam_search(log_probs, 8, 4)
    assert [h.score for h in plain] != [h.score for h in found["kenlm"]]  # the LM counts


def test_train_lm_writes_arpa_kenlm_reads(tmp_path) -> None:
    pytest.importorskip("kenlm")
    import subprocess
    import sys

    text = tmp_path / "text.txt"
    text.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "trained.arpa"
    cmd = [sys.executable, "-m", "wenet_lite", "train-lm", "--text", str(text), "--order", "3",
           "--out", str(out)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lm = load_lm(out)  # auto: KenLM, where installed
    assert isinstance(lm, kenlm_backend.KenLM)
    assert abs(lm.log_prob("<s> THE", "CAT") - ArpaLM.load(out).log_prob("<s> THE", "CAT")) < 1e-4


def test_without_kenlm_large_and_binary_files_are_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(kenlm_backend, "kenlm_available", lambda: False)
    small = _arpa(tmp_path, 2)
    assert isinstance(load_lm(small), ArpaLM)  # the Python reader, as before
    big = tmp_path / "big.arpa.gz"
    with gzip.open(big, "wt") as f:  # only its header is read before the refusal
        f.write(f"\\data\\\nngram 1=200000\nngram 2={PYTHON_ARPA_LIMIT}\n\n\\1-grams:\n")
    with pytest.raises(ValueError, match=r"big.arpa.gz holds 5,200,000 n-grams.*pip install "
                       r"'wenet_lite\[kenlm\]'"):  # fmt: skip
        load_lm(big)
    binary = tmp_path / "lm.bin"
    binary.write_bytes(kenlm_backend.BINARY_MAGIC + b"\0" * 64)
    with pytest.raises(ValueError, match=r"lm.bin is a KenLM binary file: pip install"):
        load_lm(binary)
    with pytest.raises(ValueError, match="is read by KenLM here: pip install"):
        load_lm(small, "kenlm")
