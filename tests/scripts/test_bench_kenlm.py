"""benchmarks/bench_kenlm.py: the generated ARPA files are proper back-off LMs, which KenLM and
the Python reader both load and score alike, with the n-gram count the header states."""

from __future__ import annotations

import random

import pytest

from wenet_lite.search.arpa import ArpaLM
from wenet_lite.search.lm import arpa_ngram_count


@pytest.mark.parametrize("order", [3, 4])
def test_the_generated_arpa_file_scores_alike_in_both_readers(load_tool, tmp_path, order) -> None:
    kenlm_backend = pytest.importorskip("wenet_lite.search.kenlm_backend")
    pytest.importorskip("kenlm")
    tool = load_tool("bench_kenlm")
    path = tmp_path / f"{order}.arpa"
    known = ["THE", "CAT", "SAT", "ON", "A", "MAT"]
    written = tool.write_arpa(path, 20_000, order, known)
    assert written == arpa_ngram_count(path) and 15_000 < written < 25_000
    ours, theirs = ArpaLM.load(path), kenlm_backend.KenLM.load(path)
    assert set(known) <= set(ours.words) and set(theirs.words) == set(ours.words)
    grams = [line.split("\t")[1].split() for line in path.read_text().splitlines()
             if line.count("\t") >= 1 and " " in line.split("\t")[1]]  # fmt: skip
    assert max(len(g) for g in grams) == order
    rng = random.Random(0)
    words = sorted(ours.words)
    for gram in rng.sample(grams, 300):  # stored n-grams and unseen continuations of them
        for history, word in ((gram[:-1], gram[-1]), (gram[1:], rng.choice(words))):
            h = " ".join(history[-(order - 1) :])
            assert abs(ours.log_prob(h, word) - theirs.log_prob(h, word)) < 1e-4, (h, word)
