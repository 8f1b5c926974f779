"""A word n-gram language model and its shallow fusion into CTC prefix beam search.

A CTC model spells what it hears: on small data most of its word errors are words spelled
as they sound (SID for SAID, RIGHT for WRITE). A word language model trained on transcripts
ranks prefixes that spell known, likely word sequences higher. The fusion is the usual
shallow fusion: a prefix's ranking score is

    log P_ctc(prefix) + weight * log P_lm(completed words) + word_bonus * (completed words)

where a word is complete once the next word starts (a piece beginning with '▁') or the
utterance ends (then ``</s>`` is scored too). The bonus offsets the LM's cost per word, which
would otherwise favour deleting words.

An out-of-vocabulary word already costs the LM's ``<unk>`` probability once complete; the
``oov_penalty`` adds a cost (in the same units as the fused score) at the piece where the word
in progress stops being the start of any LM word. Charging it there, rather than at the word's
end, lets the beam drop a misspelling (PERTICULARLY) while the right spelling is still in it.

The LM is a bigram or trigram with interpolated absolute discounting (Ney, Essen and Kneser
1994), for a history h of one or two words (h' is h without its first word):

    P(w | h) = max(c(h, w) - D, 0) / c(h) + D * N1+(h .) / c(h) * P(w | h')
    P(w)     = max(c(w) - D, 0) / N + D * types / N * 1 / |V|

over the vocabulary V of training words plus ``</s>`` and ``<unk>`` (any word not seen in
training); each sums to one over V, and an unseen history backs off to h'. It is stored as
JSON counts, or written as an ARPA back-off model (the same probabilities: D * N1+(h .) / c(h)
is h's back-off weight). Fusion also takes any ARPA LM (:mod:`wenet_lite.search.arpa`), e.g.
LibriSpeech's own from openslr.org/11.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Union

from wenet_lite.data.tokenizer import WORD_START, normalize_text
from wenet_lite.fileio import naming_text_errors, open_text, read_json, write_text_atomic
from wenet_lite.search.arpa import (
    BOS,
    EOS,
    UNK,
    ArpaLM,
    Entry,
    NGramLM,
    arpa_ngram_count,
    write_arpa,
)

__all__ = [
    "LanguageModel", "LMState", "LMScorer", "Perplexity", "WordLM", "load_lm", "perplexity",
    "read_sentences", "train_lm_file", "LM_WEIGHT", "OOV_PENALTY", "PYTHON_ARPA_LIMIT",
    "WORD_BONUS",
]  # fmt: skip

_FORMAT = "wenet_lite word n-gram, absolute discounting"
_BIGRAM_FORMAT = "wenet_lite word bigram, absolute discounting"  # files written before n-grams
Pathlike = Union[str, Path]

# Defaults of the fusion everywhere (decode, stream, StreamingRecognizer): the best of a grid
# on the synthetic corpus's dev set (docs/results.md).
LM_WEIGHT = 0.4
WORD_BONUS = 2.5
OOV_PENALTY = 3.0


class WordLM(NGramLM):
    """Word n-gram of order 2 or 3 (:class:`NGramLM`: ``log_prob(history, word)`` in natural
    log). Words are upper-case strings."""

    def __init__(
        self,
        unigrams: Dict[str, int],
        ngrams: Dict[str, Dict[str, int]],
        discount: float,
        order: int = 2,
    ) -> None:
        if not 0 < discount < 1:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        if order not in (2, 3):
            raise ValueError(f"order must be 2 or 3, got {order}")
        if not unigrams:
            raise ValueError("a language model needs at least one word")
        super().__init__(order, [*unigrams, EOS])  # any other word is <unk>
        self.unigrams = dict(unigrams)
        self.ngrams = {h: dict(ws) for h, ws in ngrams.items()}
        """history ("V", or "U V" for trigrams) -> {word: count}"""
        self.discount = discount
        self.vocab_size = len(set(self.unigrams) | {EOS, UNK})
        self._total = sum(self.unigrams.values())
        self._history = {h: (sum(ws.values()), len(ws)) for h, ws in self.ngrams.items()}

    @classmethod
    def train(cls, texts: Iterable[str], discount: float = 0.75, order: int = 2) -> WordLM:
        """Counts over sentences ``<s> w1 .. wn </s>`` (texts already normalised, words split
        on spaces); empty texts are ignored."""
        unigrams: Counter = Counter()
        ngrams: Dict[str, Counter] = defaultdict(Counter)
        for text in texts:
            words = [BOS, *text.split(), EOS]
            if len(words) == 2:
                continue
            for i in range(1, len(words)):
                unigrams[words[i]] += 1
                for n in range(1, min(order, i + 1)):  # histories of 1 .. order-1 words
                    ngrams[" ".join(words[i - n : i])][words[i]] += 1
        return cls(dict(unigrams), {h: dict(ws) for h, ws in ngrams.items()}, discount, order)

    def unigram_log_prob(self, word: str) -> float:
        count = self.unigrams.get(word, 0)
        d, n = self.discount, self._total
        p = max(count - d, 0.0) / n + d * len(self.unigrams) / n / self.vocab_size
        return math.log(p)

    def _log_prob(self, context: Sequence[str], word: str) -> float:
        return math.log(self._prob(context, word))  # an unseen history backs off

    def _prob(self, context: Sequence[str], word: str) -> float:
        """P(w | h) = max(c(h, w) - D, 0) / c(h) + D * N1+(h .) / c(h) * P(w | h minus its
        first word), down to the unigram."""
        if not context:
            return math.exp(self.unigram_log_prob(word))
        lower = self._prob(context[1:], word)
        history = " ".join(context)
        stats = self._history.get(history)
        if stats is None:
            return lower
        count, types = stats
        seen = self.ngrams[history].get(word, 0)
        return max(seen - self.discount, 0.0) / count + self.discount * types / count * lower

    def save_arpa(self, path: Pathlike) -> Path:
        """Write the model as an ARPA back-off LM (gzipped if ``path`` ends in .gz); an
        :class:`ArpaLM` read from it gives the same probabilities to 6 decimals (log10)."""
        return write_arpa(path, self._arpa_entries())

    def _arpa_entries(self) -> List[List[Entry]]:
        """Per order: every stored n-gram's interpolated log10 P and, where it is a history,
        log10 of its back-off weight D * N1+(h .) / c(h) (absent: 1, as for an unseen one)."""
        log10 = math.log(10.0)

        def bow(history: str) -> float:
            stats = self._history.get(history)
            return math.log10(self.discount * stats[1] / stats[0]) if stats else 0.0

        vocab = sorted(set(self.unigrams) | {EOS, UNK})
        orders = [[(w, self.unigram_log_prob(w) / log10, bow(w)) for w in vocab]]
        orders[0].insert(0, (BOS, -99.0, bow(BOS)))  # never predicted; only a history
        for n in range(2, self.order + 1):
            grams = []
            for history in sorted(h for h in self.ngrams if len(h.split()) == n - 1):
                for word in sorted(self.ngrams[history]):
                    gram = f"{history} {word}"
                    logp = math.log10(self._prob(history.split(), word))
                    grams.append((gram, logp, bow(gram) if n < self.order else 0.0))
            orders.append(grams)
        return orders

    def save(self, path: Pathlike) -> None:
        payload = {
            "format": _FORMAT,
            "order": self.order,
            "discount": self.discount,
            "unigrams": self.unigrams,
            "ngrams": self.ngrams,
        }
        write_text_atomic(path, json.dumps(payload, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Pathlike) -> WordLM:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"language model not found: {path}")
        try:
            payload = read_json(path)
            if payload.get("format") == _BIGRAM_FORMAT:
                return cls(payload["unigrams"], payload["bigrams"], float(payload["discount"]))
            if payload.get("format") != _FORMAT:
                raise ValueError(f"format is {payload.get('format')!r}, expected {_FORMAT!r}")
            return cls(
                payload["unigrams"], payload["ngrams"], float(payload["discount"]),
                int(payload["order"]),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a wenet_lite word LM ({e})") from None


LanguageModel = NGramLM  # a WordLM or an ArpaLM


PYTHON_ARPA_LIMIT = 5_000_000
"""n-grams the Python ARPA reader takes (about 400 bytes an n-gram in its dictionaries); a
larger file needs KenLM"""


def load_lm(path: Pathlike, backend: str = "auto") -> LanguageModel:
    """An ARPA file (name ending in .arpa or .arpa.gz), KenLM's binary file, or `wenet-lite
    train-lm`'s JSON. ``backend`` for ARPA files: ``kenlm`` (the ``kenlm`` extra), ``python``
    (:class:`ArpaLM`), ``auto`` (KenLM where installed). A file too large for the Python
    reader, or a binary file, without KenLM is one line naming the extra."""
    from wenet_lite.search.kenlm_backend import KenLM, is_kenlm_binary, kenlm_available

    if backend not in ("auto", "kenlm", "python"):
        raise ValueError(f"LM backend {backend!r}: auto, kenlm or python")
    name = Path(path).name.lower()
    binary = is_kenlm_binary(path)
    if not binary and not name.endswith((".arpa", ".arpa.gz")):
        return WordLM.load(path)
    have = kenlm_available()
    if backend == "kenlm" or binary or (backend == "auto" and have):
        if not have:
            what = "is a KenLM binary file" if binary else "is read by KenLM here"
            raise ValueError(f"{path} {what}: pip install 'wenet_lite[kenlm]'")
        return KenLM.load(path)
    grams = arpa_ngram_count(path)
    if grams > PYTHON_ARPA_LIMIT:
        raise ValueError(
            f"{path} holds {grams:,} n-grams: the Python reader would need about "
            f"{grams * 400 / 1e9:.0f} GB for them (it takes up to {PYTHON_ARPA_LIMIT:,}); "
            "KenLM holds them compactly: pip install 'wenet_lite[kenlm]'"
        )
    return ArpaLM.load(path)


class Perplexity(NamedTuple):
    """An LM's perplexity over sentences: exp of the mean negative log-probability of every
    word and each sentence's ``</s>``, unknown words scored as ``<unk>`` (as fusion scores them)."""

    perplexity: float
    sentences: int
    words: int
    unknown: int
    """words outside the LM's vocabulary"""


def train_lm_file(
    parts: Sequence[Pathlike],
    texts: Sequence[Pathlike],
    out: Pathlike,
    order: int = 2,
    discount: float = 0.75,
) -> str:
    """`wenet-lite train-lm`: count a word LM of ``parts``' transcripts and ``texts``' lines
    (see :func:`read_sentences`) and write it to ``out`` (JSON, or ARPA when the name ends in
    .arpa or .arpa.gz). Returns a line saying what was written."""
    lm = WordLM.train(read_sentences(parts, texts), discount, order)
    if str(out).lower().endswith((".arpa", ".arpa.gz")):
        lm.save_arpa(out)
    else:
        lm.save(out)
    counts = Counter(len(h.split()) + 1 for h, ws in lm.ngrams.items() for _ in ws)
    grams = ", ".join(f"{counts[n]} {('', '', 'bi', 'tri')[n]}grams" for n in sorted(counts))
    return f"{out}: {len(lm.unigrams) - 1} words, {grams}"


def read_sentences(parts: Iterable[Pathlike], texts: Iterable[Pathlike]) -> Iterator[str]:
    """Normalised sentences (as the tokenizer normalises text): the transcripts of prepared
    parts (cuts.jsonl.gz), then the lines of text files (gzipped if named .gz). A missing text
    file raises FileNotFoundError before any sentence is read."""
    texts = list(texts)
    for path in texts:
        if not Path(path).is_file():
            raise FileNotFoundError(f"text file not found: {path}")
    for part in parts:
        from wenet_lite.data.manifest import cut_text, load_cuts  # lhotse: only when used

        for cut in load_cuts(part):
            yield normalize_text(cut_text(cut))
    for path in texts:
        with open_text(path) as f, naming_text_errors(path):
            for line in f:
                yield normalize_text(line)


def perplexity(lm: LanguageModel, sentences: Iterable[str]) -> Perplexity:
    """:class:`Perplexity` of ``lm`` over normalised sentences (words split on spaces; empty
    ones are skipped)."""
    total, tokens, count, words, unknown = 0.0, 0, 0, 0, 0
    for sentence in sentences:
        history = BOS
        sentence_words = sentence.split()
        if not sentence_words:
            continue
        for word in [*sentence_words, EOS]:
            total += lm.log_prob(history, word)
            history = lm.next_history(history, word)
        count += 1
        tokens += len(sentence_words) + 1
        words += len(sentence_words)
        unknown += sum(w not in lm.words for w in sentence_words)
    if not tokens:
        raise ValueError("no words to compute a perplexity over")
    return Perplexity(math.exp(-total / tokens), count, words, unknown)


class LMState(NamedTuple):
    """The LM side of one prefix: its fusion score so far (weighted LM log-probabilities and
    bonuses of completed words), the LM history (the last completed words, space-joined), and
    the spelling of the word in progress."""

    score: float
    prev: str
    partial: str


class LMScorer:
    """Word-level shallow fusion over sentencepiece token prefixes.

    ``pieces[i]`` is the piece of token id i; one that starts with '▁' starts a word. Pieces
    in angle brackets (``<blank>``, ``<unk>``) spell an unknown word.
    """

    START = LMState(0.0, BOS, "")

    def __init__(
        self,
        lm: LanguageModel,
        pieces: Sequence[str],
        weight: float = LM_WEIGHT,
        word_bonus: float = WORD_BONUS,
        oov_penalty: float = OOV_PENALTY,
    ) -> None:
        if weight < 0:
            raise ValueError(f"lm weight must be >= 0, got {weight}")
        if oov_penalty < 0:
            raise ValueError(f"oov penalty must be >= 0, got {oov_penalty}")
        self.lm = lm
        self.weight = weight
        self.word_bonus = word_bonus
        self.oov_penalty = oov_penalty
        self._listed = getattr(lm, "listed", True)  # a KenLM binary's words cannot be listed
        self._sorted = sorted(  # the LM's words, for "does any start with this spelling"
            w
            for w in (lm.words if oov_penalty and self._listed else ())
            if w not in (BOS, EOS, UNK)
        )
        self._starts = [p.startswith(WORD_START) for p in pieces]
        self._spelling = [
            UNK if p.startswith("<") and p.endswith(">") else p.lstrip(WORD_START) for p in pieces
        ]

    @classmethod
    def load(
        cls,
        lm: Union[Pathlike, LanguageModel],
        pieces: Sequence[str],
        weight: float = LM_WEIGHT,
        word_bonus: float = WORD_BONUS,
        oov_penalty: float = OOV_PENALTY,
        backend: str = "auto",
    ) -> LMScorer:
        """A scorer over ``lm``: a ``WordLM``/``ArpaLM``/``KenLM`` or a file :func:`load_lm`
        reads (with ``backend``)."""
        lm = lm if isinstance(lm, NGramLM) else load_lm(lm, backend)
        return cls(lm, pieces, weight, word_bonus, oov_penalty)

    def _complete(self, state: LMState) -> LMState:
        if not state.partial:
            return state
        word = UNK if UNK in state.partial else state.partial
        gain = self.weight * self.lm.log_prob(state.prev, word) + self.word_bonus
        if self.oov_penalty and not self._listed and word not in self.lm.words:
            gain -= self.oov_penalty  # words that cannot be listed: charged once complete
        return LMState(state.score + gain, self.lm.next_history(state.prev, word), "")

    def _starts_a_word(self, spelling: str) -> bool:
        """Whether some LM word starts with ``spelling`` (itself included)."""
        i = bisect.bisect_left(self._sorted, spelling)
        return i < len(self._sorted) and self._sorted[i].startswith(spelling)

    def extend(self, state: LMState, token: int) -> LMState:
        """The state of the prefix ``state`` belongs to, followed by ``token``."""
        if self._starts[token]:
            state = self._complete(state)
        partial = state.partial + self._spelling[token]
        score = state.score
        if self.oov_penalty and self._listed and not self._starts_a_word(partial):
            if not state.partial or self._starts_a_word(state.partial):
                score -= self.oov_penalty  # the word in progress just left the lexicon
        return LMState(score, state.prev, partial)

    def final(self, state: Optional[LMState]) -> float:
        """Fusion score of a finished utterance: its last word completed, then ``</s>``."""
        done = self._complete(state or self.START)
        return done.score + self.weight * self.lm.log_prob(done.prev, EOS)
