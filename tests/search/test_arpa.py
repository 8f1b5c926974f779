"""ARPA back-off LMs: back-off arithmetic checked by hand, an exact round trip of the word
n-gram through the format, and clear errors for broken files."""

import gzip
import math
import re
from pathlib import Path

import pytest

from wenet_lite.search.arpa import ArpaLM
from wenet_lite.search.lm import EOS, UNK, LMScorer, WordLM, load_lm

LN10 = math.log(10.0)
HAND = """
\\data\\
ngram 1=4
ngram 2=2

\\1-grams:
-1.0\t<s>\t-0.5
-0.5\tA\t-0.3
-0.7\tB
-1.2\t</s>

\\2-grams:
-0.2\t<s> A
-0.1\tA B
\\end\\
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_back_off_arithmetic_by_hand(tmp_path: Path) -> None:
    lm = ArpaLM.load(_write(tmp_path / "hand.arpa", HAND))
    assert lm.order == 2 and lm.words == {"A", "B", EOS}
    assert lm.log_prob("<s>", "A") == pytest.approx(-0.2 * LN10)  # stored
    assert lm.log_prob("<s>", "B") == pytest.approx((-0.5 - 0.7) * LN10)  # bow(<s>) + P(B)
    assert lm.log_prob("A", EOS) == pytest.approx((-0.3 - 1.2) * LN10)
    assert lm.log_prob("B", "A") == pytest.approx(-0.5 * LN10)  # B has no back-off weight
    assert lm.log_prob("A B", "B") == pytest.approx(-0.7 * LN10)  # only the last word counts
    # No <unk> in the file: an unknown word costs the rarest unigram (</s>, -1.2).
    assert lm.log_prob("<s>", "ZEBRA") == pytest.approx((-0.5 - 1.2) * LN10)
    assert lm.log_prob("ZEBRA", "B") == pytest.approx(-0.7 * LN10)  # unknown history
    assert lm.next_history("<s> A", "B") == "B"


def test_unk_is_used_when_the_file_has_it(tmp_path: Path) -> None:
    """SRILM and LibriSpeech's files spell it <UNK>, in n-grams too."""
    text = HAND.replace("ngram 1=4", "ngram 1=5").replace("-1.2\t</s>", "-1.2\t</s>\n-3.0\t<UNK>")
    text = text.replace("ngram 2=2", "ngram 2=3").replace("-0.1\tA B", "-0.1\tA B\n-0.4\t<UNK> B")
    text = "This header (SRILM writes one) is skipped.\n" + text
    lm = ArpaLM.load(_write(tmp_path / "unk.arpa", text))
    assert lm.log_prob("A", "ZEBRA") == pytest.approx((-0.3 - 3.0) * LN10)
    assert lm.log_prob("ZEBRA", "B") == pytest.approx(-0.4 * LN10)  # history ZEBRA is <unk>


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("name", ["lm.arpa", "lm.arpa.gz"])
def test_word_lm_round_trips_through_arpa(tmp_path: Path, order: int, name: str) -> None:
    texts = ["THE CAT SAT", "A CAT RAN", "THE CAT SAT DOWN", "A DOG SAT", "THE DOG"]
    lm = WordLM.train(texts, discount=0.6, order=order)
    path = lm.save_arpa(tmp_path / name)
    if name.endswith(".gz"):
        assert gzip.open(path, "rt").readline() == "\n"  # really gzipped
    arpa = load_lm(path, "python")
    assert isinstance(arpa, ArpaLM) and arpa.order == order
    assert arpa.words == lm.words | {UNK}
    words = sorted(lm.words | {UNK, "ZEBRA"})
    histories = ["<s>", "THE", "CAT", "ZEBRA", "<s> THE", "THE CAT", "A CAT", "DOG CAT", "X Y"]
    for history in histories:
        for word in words:
            want = lm.log_prob(history, word)
            assert arpa.log_prob(history, word) == pytest.approx(want, abs=1e-5), (history, word)
    pieces = ["<blank>", "<unk>", "\u2581THE", "\u2581CAT", "\u2581SAT", "S"]
    finals = []
    for model in (lm, arpa):
        scorer = LMScorer(model, pieces, weight=0.7, word_bonus=1.0, oov_penalty=2.0)
        state = scorer.START
        for token in (2, 3, 5, 4):  # THE CATS SAT: CATS is not a word
            state = scorer.extend(state, token)
        finals.append(scorer.final(state))
    assert finals[1] == pytest.approx(finals[0], abs=1e-4)


def test_load_lm_picks_the_format_by_name(tmp_path: Path) -> None:
    lm = WordLM.train(["A B"])
    lm.save(tmp_path / "lm.json")
    assert isinstance(load_lm(tmp_path / "lm.json"), WordLM)
    assert isinstance(load_lm(_write(tmp_path / "x.arpa", HAND), "python"), ArpaLM)
    assert isinstance(load_lm(_write(tmp_path / "X.ARPA", HAND), "python"), ArpaLM)
    scorer = LMScorer.load(tmp_path / "x.arpa", ["<blank>", "\u2581A"])
    assert scorer.lm.words == {"A", "B", EOS}


@pytest.mark.parametrize(
    "text, message",
    [
        (HAND.replace("\\end\\\n", ""), "no \\end\\ line: the file is truncated"),
        (HAND.replace("-0.1\tA B\n", ""), "declares 2 2-grams but holds 1"),
        ("THE CAT\n", "hand.arpa: not an ARPA language model (no \\data\\ section)"),
        ("", "not an ARPA language model"),
        (HAND.replace("ngram 2=2\n", "ngram 2=2\nTHE CAT\n"), "hand.arpa:5: not an ARPA"),
        (HAND.replace("-0.7\tB", "x\tB"), "hand.arpa:9: bad number"),
        (HAND.replace("-0.1\tA B", "-0.1\tA"), "hand.arpa:14: expected a 2-gram line"),
        (HAND.replace("\\2-grams:", "\\3-grams:"), "3-grams were not declared"),
        (HAND.replace("\tA", "\ta").replace("\tB", "\tb"), "not upper case (e.g. 'a')"),
        ("\\data\\\nngram 1=1\n\\1-grams:\n-1\t<s>\n\\end\\\n", "no words but <s>"),
    ],
)
def test_broken_files_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "hand.arpa", text)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        ArpaLM.load(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.arpa"):
        load_lm(tmp_path / "nope.arpa")


def test_train_lm_writes_arpa_or_json_by_name(tmp_path: Path) -> None:
    import subprocess

    text = _write(tmp_path / "text.txt", "the cat sat\nthe dog sat\n")
    for name in ("lm.arpa.gz", "lm.json"):
        cmd = ["wenet-lite", "train-lm", "--text", str(text), "--out", str(tmp_path / name)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        assert "4 words, 6 bigrams" in proc.stdout  # THE CAT DOG SAT (+ </s>)
    arpa, json_lm = load_lm(tmp_path / "lm.arpa.gz", "python"), load_lm(tmp_path / "lm.json")
    assert isinstance(arpa, ArpaLM) and isinstance(json_lm, WordLM)
    assert arpa.log_prob("THE", "CAT") == pytest.approx(json_lm.log_prob("THE", "CAT"), abs=1e-5)


def test_score_caches_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running stream server scores ever new (history, word) pairs: the caches start
    over at their limit, and scores stay the same."""
    import wenet_lite.search.arpa as arpa_module

    monkeypatch.setattr(arpa_module, "CACHE_LIMIT", 2)  # NGramLM's, for both kinds
    word_lm = WordLM.train(["A B", "B A"])
    arpa = ArpaLM.load(word_lm.save_arpa(tmp_path / "lm.arpa"))
    for lm in (word_lm, arpa):
        first = [lm.log_prob(h, w) for h in ("<s>", "A", "B") for w in ("A", "B", EOS)]
        assert len(lm._cache) <= 2
        assert [lm.log_prob(h, w) for h in ("<s>", "A", "B") for w in ("A", "B", EOS)] == first
