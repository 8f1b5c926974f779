"""Word n-gram LMs as fusion scores them (:class:`NGramLM`), and back-off LMs in the ARPA text
format: read one (:class:`ArpaLM`), write one.

ARPA is what n-gram toolkits exchange: KenLM's ``lmplz`` and SRILM's ``ngram-count`` write it,
and openslr.org/11 publishes LibriSpeech's LMs in it (``3-gram.pruned.1e-7.arpa.gz``, ...).
The file lists, for each order n, every stored n-gram with its log10 probability and, when it
can be a history, its log10 back-off weight::

    \\data\\
    ngram 1=3
    ngram 2=1

    \\1-grams:
    -0.30  <s>  -0.20
    ...
    \\end\\

A back-off model scores an n-gram it does not store by backing off: for history h = u h'
(h' is h without its first word),

    log P(w | h) = log P(w | h)                    if "h w" is stored
                 = bow(h) + log P(w | h')          otherwise (bow(h) = 0 if h is not stored)

down to the unigram. A word with no unigram is ``<unk>`` (``<UNK>`` in some files).
"""

from __future__ import annotations

import gzip
import io
import math
import re
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple, Union

from wenet_lite.fileio import atomic_open, naming_text_errors, open_text

__all__ = ["ArpaLM", "BOS", "EOS", "NGramLM", "UNK", "arpa_ngram_count", "write_arpa"]

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_LN10 = math.log(10.0)
_SECTION = re.compile(r"\\(\d+)-grams:")
_COUNT = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")
CACHE_LIMIT = 1_000_000  # scored (history, word) pairs kept before a cache starts over
# (a long-running stream server would otherwise grow it without end)
Pathlike = Union[str, Path]
Entry = Tuple[str, float, float]  # n-gram ("w1 .. wn"), log10 P, log10 back-off weight


class NGramLM:
    """What fusion and perplexity ask of a word n-gram LM, in natural log.

    ``log_prob(history, word)``: ``history`` is the previous words joined by spaces (``<s>``
    first at a sentence start; only the last ``order - 1`` count), a word outside ``words`` is
    ``<unk>``. Scores are cached per (history, word). Subclasses implement ``_log_prob``.
    """

    def __init__(self, order: int, words: Iterable[str]) -> None:
        self.order = order
        self.words = frozenset(words)
        """every word the LM scores as itself (``</s>`` included, ``<s>`` not)"""
        self._cache: Dict[Tuple[str, str], float] = {}

    def log_prob(self, history: str, word: str) -> float:
        """log P(word | history)."""
        if word not in self.words:
            word = UNK
        key = (history, word)
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            context = history.split()[1 - self.order :]
            self._cache[key] = cached = self._log_prob(context, word)
        return cached

    def _log_prob(self, context: Sequence[str], word: str) -> float:
        """log P(word | context), context the last ``order - 1`` words (or fewer)."""
        raise NotImplementedError

    def next_history(self, history: str, word: str) -> str:
        """The history after ``word`` follows ``history``: its last ``order - 1`` words."""
        return " ".join([*history.split(), word][1 - self.order :])


class ArpaLM(NGramLM):
    """A back-off n-gram read from an ARPA file (:class:`NGramLM`, backing off as the module
    docstring says). Words must be upper case, as wenet_lite transcripts are."""

    def __init__(
        self, probs: Dict[str, float], backoffs: Dict[str, float], order: int, source: str = ""
    ) -> None:
        """``probs``/``backoffs``: n-gram ("w1 .. wn") -> natural-log probability / back-off
        weight (a missing weight is 0)."""
        # Every word with a unigram (</s> and <unk> included when stored).
        super().__init__(order, (k for k in probs if " " not in k and k != BOS))
        self.source = source
        self._probs = probs
        self._backoffs = backoffs
        if not self.words:
            raise ValueError(f"{source or 'an ARPA LM'}: no words but <s>")
        if UNK in probs:
            self._unk = probs[UNK]
        else:  # no <unk> in the file: an unknown word is as likely as the rarest known one
            self._unk = min(probs[w] for w in self.words)

    @classmethod
    def load(cls, path: Pathlike) -> ArpaLM:
        """Read an ARPA file (gzipped if the name ends in .gz); errors name the file and line."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"language model not found: {path}")
        probs: Dict[str, float] = {}
        backoffs: Dict[str, float] = {}
        declared = _read_arpa(path, probs, backoffs)
        words = [w for w in probs if " " not in w and w not in (BOS, EOS, UNK)]
        lowered = [w for w in words if w != w.upper()]
        if 2 * len(lowered) > len(words):
            raise ValueError(
                f"{path}: most words are not upper case (e.g. {lowered[0]!r}); wenet_lite "
                "transcripts are: upper-case the words (not <s>, </s>, <unk>)"
            )
        return cls(probs, backoffs, max(declared), str(path))

    def _log_prob(self, context: Sequence[str], word: str) -> float:
        # An unknown history word is <unk>, which the file may hold n-grams of.
        context = [w if w in self.words or w == BOS else UNK for w in context]
        total = 0.0
        while True:
            logp = self._probs.get(" ".join([*context, word]))
            if logp is not None:
                return total + logp
            if not context:
                return total + self._unk  # <unk> itself when the file has no <unk>
            total += self._backoffs.get(" ".join(context), 0.0)
            context = context[1:]


def _read_arpa(path: Path, probs: Dict[str, float], backoffs: Dict[str, float]) -> Dict[int, int]:
    """Fill ``probs``/``backoffs`` (natural log) from ``path``; returns the declared counts,
    checked against the entries found (a truncated download fails here, not at decode time)."""
    declared: Dict[int, int] = {}
    found: Dict[int, int] = {}
    with open_text(path) as f, naming_text_errors(path):
        lines = enumerate(f, 1)
        line, number = _read_counts(path, lines, declared)
        while line.startswith("\\") and line != "\\end\\":
            if not _SECTION.fullmatch(line):
                raise ValueError(f"{path}:{number}: not an ARPA section header: {line[:80]!r}")
            n = int(line[1 : line.index("-")])
            if n not in declared:
                raise ValueError(f"{path}:{number}: {n}-grams were not declared in \\data\\")
            found[n], line, number = _read_section(path, lines, n, probs, backoffs)
    if line != "\\end\\":
        raise ValueError(f"{path}: no \\end\\ line: the file is truncated")
    for n, count in sorted(declared.items()):
        if found.get(n, 0) != count:
            raise ValueError(
                f"{path}: declares {count} {n}-grams but holds {found.get(n, 0)}: "
                "the file is truncated or corrupt"
            )
    if 1 not in declared:
        raise ValueError(f"{path}: no 1-grams")
    return declared


def arpa_ngram_count(path: Pathlike) -> int:
    """The n-grams an ARPA file declares in its \\data\\ section (read to there only)."""
    path = Path(path)
    declared: Dict[int, int] = {}
    with open_text(path) as f, naming_text_errors(path):
        _read_counts(path, enumerate(f, 1), declared)
    return sum(declared.values())


def _read_counts(
    path: Path, lines: Iterator[Tuple[int, str]], declared: Dict[int, int]
) -> Tuple[str, int]:
    """Skip any header before \\data\\ (SRILM writes one), read the ``ngram n=count`` lines;
    return the next section line and its number ("" at the end of the file)."""
    in_data = False
    number = 0
    for number, raw in lines:
        line = raw.strip()
        if line == "\\data\\":
            in_data = True
        elif not in_data or not line:
            continue
        elif _COUNT.fullmatch(line):
            n, count = line[len("ngram") :].split("=")
            declared[int(n)] = int(count)
        elif line.startswith("\\"):
            return line, number
        else:
            raise ValueError(f"{path}:{number}: not an ARPA language model line: {line[:80]!r}")
    if not in_data:
        raise ValueError(f"{path}: not an ARPA language model (no \\data\\ section)")
    return "", number


def _read_section(
    path: Path,
    lines: Iterator[Tuple[int, str]],
    n: int,
    probs: Dict[str, float],
    backoffs: Dict[str, float],
) -> Tuple[int, str, int]:
    """Read ``n``-gram lines up to the next line starting with a backslash; returns how many
    were read, that line and its number ("" at the end of the file). The hot loop of loading:
    a LibriSpeech LM has millions of lines."""
    count = 0
    number = 0
    for number, raw in lines:
        parts = raw.split()
        if not parts:
            continue
        if parts[0].startswith("\\"):
            return count, raw.strip(), number
        if len(parts) == n + 1:
            words, bow = parts[1:], "0"
        elif len(parts) == n + 2:
            words, bow = parts[1:-1], parts[-1]
        else:
            raise ValueError(
                f"{path}:{number}: expected a {n}-gram line 'logprob w1 .. w{n} [backoff]'"
            )
        if "<UNK>" in words:  # SRILM's and LibriSpeech's spelling
            words = [UNK if w == "<UNK>" else w for w in words]
        key = " ".join(words)
        try:
            probs[key] = float(parts[0]) * _LN10
            if bow != "0":
                backoffs[key] = float(bow) * _LN10
        except ValueError:
            raise ValueError(f"{path}:{number}: bad number in {raw.strip()[:80]!r}") from None
        count += 1
    return count, "", number


def write_arpa(path: Pathlike, entries: Iterable[Iterable[Entry]]) -> Path:
    """Write an ARPA file atomically (gzipped if the name ends in .gz).

    ``entries``: for n = 1, 2, ..., the n-grams of that order as (words, log10 P, log10
    back-off weight); a weight of 0 is left out.
    """
    orders = [list(grams) for grams in entries]
    path = Path(path)
    with atomic_open(path, "wb") as raw:
        gz = path.name.endswith(".gz")
        sink = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if gz else raw
        text = io.TextIOWrapper(sink, encoding="utf-8", newline="\n")
        text.writelines(_arpa_lines(orders))
        text.flush()
        text.detach()  # closing the wrapper would close the file atomic_open still syncs
        if gz:
            sink.close()  # the gzip trailer (the file underneath stays open)
    return path


def _arpa_lines(orders: List[List[Entry]]) -> Iterator[str]:
    yield "\n\\data\\\n"
    for n, grams in enumerate(orders, 1):
        yield f"ngram {n}={len(grams)}\n"
    for n, grams in enumerate(orders, 1):
        yield f"\n\\{n}-grams:\n"
        for words, logp, bow in grams:
            yield f"{logp:.7f}\t{words}\t{bow:.7f}\n" if bow else f"{logp:.7f}\t{words}\n"
    yield "\n\\end\\\n"
