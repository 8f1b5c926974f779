"""Word bigram LM: a proper distribution, a file round trip, and shallow fusion that fixes a
spelling the acoustics got slightly wrong."""

import json
import math
from pathlib import Path

import pytest
import torch

from wenet_lite.search.ctc_search import ctc_prefix_beam_search
from wenet_lite.search.lm import EOS, UNK, LMScorer, WordLM

TEXTS = ["THE CAT SAT", "THE CAT RAN", "A DOG SAT", "THE DOG", ""]
PIECES = ["<blank>", "<unk>", "\u2581", "\u2581THE", "\u2581CAT", "\u2581KAT", "\u2581SAT", "S"]


def test_probabilities_sum_to_one_for_any_history() -> None:
    lm = WordLM.train(TEXTS)
    vocab = set(lm.unigrams) | {EOS, UNK}
    assert lm.vocab_size == len(vocab) == 8  # THE CAT SAT RAN A DOG </s> <unk>
    for prev in ("<s>", "THE", "SAT", "NEVER-SEEN"):
        total = sum(math.exp(lm.log_prob(prev, w)) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-9), prev
    assert lm.log_prob("THE", "CAT") > lm.log_prob("THE", "DOG") > lm.log_prob("THE", "SAT")
    assert lm.log_prob("THE", "ZEBRA") == lm.log_prob("THE", UNK) < lm.log_prob("THE", "SAT")


def test_save_load_round_trip_and_bad_files(tmp_path: Path) -> None:
    lm = WordLM.train(TEXTS, discount=0.5)
    lm.save(tmp_path / "lm.json")
    again = WordLM.load(tmp_path / "lm.json")
    assert again.log_prob("A", "DOG") == lm.log_prob("A", "DOG") and again.discount == 0.5
    with pytest.raises(FileNotFoundError, match="nope.json"):
        WordLM.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text('{"format": "arpa"}')
    with pytest.raises(ValueError, match="bad.json: not a wenet_lite word LM"):
        WordLM.load(tmp_path / "bad.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="deep.json: not JSON this reader takes"):
        WordLM.load(tmp_path / "deep.json")


def test_scorer_completes_words_at_word_starts_and_the_end() -> None:
    lm = WordLM.train(TEXTS)
    scorer = LMScorer(lm, PIECES, weight=0.5, word_bonus=2.0, oov_penalty=0.0)
    state = scorer.START
    for token in (3, 4, 7):  # ▁THE ▁CAT S: THE is complete, CATS is in progress
        state = scorer.extend(state, token)
    assert state.prev == "THE" and state.partial == "CATS"
    assert state.score == pytest.approx(0.5 * lm.log_prob("<s>", "THE") + 2.0)
    expected = state.score + 0.5 * lm.log_prob("THE", UNK) + 2.0 + 0.5 * lm.log_prob(UNK, EOS)
    assert scorer.final(state) == pytest.approx(expected)  # CATS was never seen: <unk>
    bare = scorer.extend(scorer.extend(scorer.START, 2), 2)  # bare '▁' pieces spell nothing
    assert bare == scorer.START


def _frames() -> torch.Tensor:
    """THE, then KAT slightly ahead of CAT, then SAT, blanks between: (T, V) log-probs."""
    rows = [
        {3: 0.9},
        {0: 0.9},
        {5: 0.5, 4: 0.4},
        {0: 0.9},
        {6: 0.9},
        {0: 0.9},
    ]
    probs = torch.full((len(rows), len(PIECES)), 1e-3)
    for t, row in enumerate(rows):
        for token, p in row.items():
            probs[t, token] = p
    return (probs / probs.sum(-1, keepdim=True)).log()


def test_fusion_fixes_a_spelling_and_weight_zero_changes_nothing() -> None:
    log_probs = _frames()
    plain = ctc_prefix_beam_search(log_probs, beam_size=4)[0]
    assert plain.tokens == [3, 5, 6]  # THE KAT SAT: the acoustics' choice
    lm = WordLM.train(TEXTS)
    fused = ctc_prefix_beam_search(log_probs, 4, scorer=LMScorer(lm, PIECES, 0.5, 1.0))[0]
    assert fused.tokens == [3, 4, 6]  # THE CAT SAT
    assert fused.timestamps == [0, 2, 4]
    zero = ctc_prefix_beam_search(log_probs, 4, scorer=LMScorer(lm, PIECES, 0.0, 0.0, 0.0))[0]
    assert zero.tokens == plain.tokens and zero.score == pytest.approx(plain.score)


def test_oov_penalty_is_charged_once_where_a_word_leaves_the_vocabulary() -> None:
    lm = WordLM.train(TEXTS)
    pieces = [*PIECES, "\u2581CA", "T", "Q"]  # ids 8, 9, 10
    base = LMScorer(lm, pieces, weight=0.5, word_bonus=2.0, oov_penalty=0.0)
    oov = LMScorer(lm, pieces, weight=0.5, word_bonus=2.0, oov_penalty=4.0)

    def walk(scorer: LMScorer, tokens) -> list:
        states = [scorer.START]
        for token in tokens:
            states.append(scorer.extend(states[-1], token))
        return states

    # ▁CA T: CA and CAT start LM words (CAT is one): nothing charged.
    assert [s.score for s in walk(oov, (8, 9))] == [s.score for s in walk(base, (8, 9))]
    # ▁CA T S Q: CATS leaves the vocabulary at S; CATSQ is charged nothing more.
    charged = [
        a.score - b.score for a, b in zip(walk(oov, (8, 9, 7, 10)), walk(base, (8, 9, 7, 10)))
    ]
    assert charged == [0.0, 0.0, 0.0, -4.0, -4.0]
    # A word that starts outside it (▁KAT) and an <unk> piece are charged at once, and
    # the next word in the vocabulary is not.
    states = walk(oov, (5, 3, 1, 6))
    assert [round(a.score - b.score, 9) for a, b in zip(states, walk(base, (5, 3, 1, 6)))] == [
        0.0, -4.0, -4.0, -8.0, -8.0
    ]  # fmt: skip
    assert oov.final(states[-1]) - base.final(walk(base, (5, 3, 1, 6))[-1]) == pytest.approx(-8)
    with pytest.raises(ValueError, match="oov penalty"):
        LMScorer(lm, pieces, oov_penalty=-1.0)


def test_oov_penalty_keeps_a_known_spelling_the_acoustics_rank_below() -> None:
    # ▁THE ▁CAT, then S slightly ahead of ▁SAT: CATS is not an LM word, CAT SAT is. With the
    # LM's probabilities weighted 0, only the penalty differs.
    lm = WordLM.train(TEXTS)
    rows = [{3: 0.9}, {0: 0.9}, {4: 0.9}, {7: 0.55, 6: 0.45}, {0: 0.9}]
    probs = torch.full((len(rows), len(PIECES)), 1e-3)
    for t, row in enumerate(rows):
        for token, p in row.items():
            probs[t, token] = p
    log_probs = (probs / probs.sum(-1, keepdim=True)).log()
    fused = LMScorer(lm, PIECES, weight=0.0, word_bonus=0.0, oov_penalty=0.0)
    assert ctc_prefix_beam_search(log_probs, 4, scorer=fused)[0].tokens == [3, 4, 7]  # THE CATS
    strict = LMScorer(lm, PIECES, weight=0.0, word_bonus=0.0, oov_penalty=1.0)
    assert ctc_prefix_beam_search(log_probs, 4, scorer=strict)[0].tokens == [3, 4, 6]  # SAT


def test_trigram_sums_to_one_and_uses_two_words_of_history(tmp_path: Path) -> None:
    texts = ["THE CAT SAT", "A CAT RAN", "THE CAT SAT DOWN", "A DOG SAT"]
    bigram, trigram = WordLM.train(texts), WordLM.train(texts, order=3)
    vocab = set(trigram.unigrams) | {EOS, UNK}
    for history in ("<s>", "<s> THE", "THE CAT", "A CAT", "DOG CAT", "ZEBRA", "X Y"):
        total = sum(math.exp(trigram.log_prob(history, w)) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-9), history
    # CAT is followed by SAT twice and RAN once; after THE CAT only by SAT, after A CAT by RAN.
    assert bigram.log_prob("THE CAT", "SAT") == bigram.log_prob("CAT", "SAT")
    assert trigram.log_prob("THE CAT", "SAT") > bigram.log_prob("CAT", "SAT")
    assert trigram.log_prob("A CAT", "RAN") > bigram.log_prob("A CAT", "RAN")
    assert trigram.log_prob("A CAT", "SAT") < bigram.log_prob("A CAT", "SAT")
    assert trigram.log_prob("DOG CAT", "SAT") == trigram.log_prob("CAT", "SAT")  # backs off
    trigram.save(tmp_path / "lm3.json")
    again = WordLM.load(tmp_path / "lm3.json")
    assert again.order == 3 and again.log_prob("A CAT", "RAN") == trigram.log_prob("A CAT", "RAN")
    scorer = LMScorer(trigram, PIECES, weight=1.0, word_bonus=0.0, oov_penalty=0.0)
    state = scorer.START
    for token in (3, 4, 2):  # ▁THE ▁CAT ▁: THE CAT complete
        state = scorer.extend(state, token)
    state = scorer._complete(state)
    assert state.prev == "THE CAT"
    assert state.score == pytest.approx(
        trigram.log_prob("<s>", "THE") + trigram.log_prob("<s> THE", "CAT")
    )


def test_bigram_files_of_the_first_format_still_load(tmp_path: Path) -> None:
    lm = WordLM.train(TEXTS)
    old = {
        "format": "wenet_lite word bigram, absolute discounting",
        "discount": lm.discount,
        "unigrams": lm.unigrams,
        "bigrams": lm.ngrams,
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    again = WordLM.load(tmp_path / "old.json")
    assert again.order == 2
    for prev, word in (("THE", "CAT"), ("<s>", "A"), ("DOG", "ZEBRA")):
        assert again.log_prob(prev, word) == lm.log_prob(prev, word)


def test_perplexity_by_hand_and_the_tool(tmp_path: Path) -> None:
    import subprocess
    import sys

    from wenet_lite.search.lm import perplexity

    lm = WordLM.train(TEXTS)
    # THE CAT SAT </s> and DOG ZEBRA </s>: 7 predictions, ZEBRA outside the vocabulary.
    logp = (
        lm.log_prob("<s>", "THE") + lm.log_prob("THE", "CAT") + lm.log_prob("CAT", "SAT")
        + lm.log_prob("SAT", EOS) + lm.log_prob("<s>", "DOG") + lm.log_prob("DOG", UNK)
        + lm.log_prob("ZEBRA", EOS)
    )  # fmt: skip
    result = perplexity(lm, ["THE CAT SAT", "", "DOG ZEBRA"])
    assert result.perplexity == pytest.approx(math.exp(-logp / 7))
    assert (result.sentences, result.words, result.unknown) == (2, 5, 1)
    with pytest.raises(ValueError, match="no words"):
        perplexity(lm, ["", " "])

    lm.save(tmp_path / "lm.json")
    lm.save_arpa(tmp_path / "lm.arpa")
    (tmp_path / "dev.txt").write_text("the cat sat\ndog zebra\n")
    script = Path(__file__).parents[2] / "recipes" / "common" / "lm_perplexity.py"
    cmd = [sys.executable, str(script), "--text", str(tmp_path / "dev.txt")]
    cmd += ["--lm", str(tmp_path / "lm.json"), "--lm", str(tmp_path / "lm.arpa")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    want = f"| {result.perplexity:.1f} | 2 | 5 | 1 (20.0 %) |"
    assert out.count(want) == 2, out  # the same model as JSON and as ARPA
    bad = subprocess.run([*cmd[:4], "--lm", str(tmp_path / "nope.arpa")], capture_output=True)
    assert bad.returncode == 2 and b"nope.arpa" in bad.stderr
