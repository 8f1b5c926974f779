"""Hotwords: a context graph that biases CTC prefix beam search towards given phrases.

The graph is one Aho-Corasick automaton over the tokenizer's pieces of every phrase: a trie of
the phrases with, for each node, a failure link (the longest proper suffix of its path that is
also a path of the trie). A prefix's context state is the trie node of the longest suffix of its
tokens that begins some phrase; it advances only when the prefix grows, as the word LM's does.

Scores. Every token of a phrase is worth ``score`` (the phrase's own, or the graph's default);
where phrases share a trie node the highest counts. A node's ``node score`` sums the tokens on
its path. The bonus of a token sequence x is

    C(x) + held(x)

where C(x) sums, over every occurrence in x of a whole phrase (overlapping ones included), that
phrase's node score, and held(x) is what the open partial match has gathered since its last
completed phrase: node score of the current node minus that of the deepest phrase end on its
path. So a hypothesis gains ``score`` per matched token; a failed partial match gives back what
it gathered (held drops to the new node's); a completed phrase keeps its bonus; and at the end
of a segment, :meth:`ContextGraph.final` takes back the unfinished part. Per step the gain is

    out(v) + held(v) - held(u)        (u -> v on one token)

with out(v) the node scores of the phrases ending at v (v and its failure chain), all computed
once per node, so a step costs a dict lookup (transitions are memoised). Bonuses are added to
the search score, never assigned over it.

Whole words. With ``word_starts`` (the ids of pieces that begin a word, '▁...'), a phrase
matches only whole words: a virtual boundary symbol is fed before every word-start piece and
at the end of a segment, and each phrase ends with one (and has one before each of its words
but the first), worth no bonus itself. Hotword ACT then gathers its bonus along ▁A C T and
keeps it only if a new word (or the end) follows; inside ACTUALLY the match fails at U and
the bonus is taken back, as for any failed partial match.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)  # fmt: skip

from wenet_lite.data.tokenizer import WORD_START

if TYPE_CHECKING:
    from wenet_lite.data.tokenizer import Tokenizer

__all__ = [
    "HOTWORDS_SCORE",
    "MAX_PHRASE_TOKENS",
    "ContextGraph",
    "Phrase",
    "hotword_phrases",
    "load_context",
    "read_hotwords",
    "word_starts",
]

HOTWORDS_SCORE = 0.75
"""Default bonus per matched token, chosen on the synthetic dev set (docs/decoding.md,
"Hotwords")."""
MAX_PHRASE_TOKENS = 100

ROOT = 0
BOUNDARY = -1
"""The virtual word-boundary symbol (never a real token id)."""


@dataclass(frozen=True)
class Phrase:
    text: str
    """as written in the file (normalised as transcripts are)"""
    tokens: Tuple[int, ...]
    score: float
    """bonus per matched token"""


class ContextGraph:
    """The automaton of some phrases. States are ints (``ROOT`` = 0, the empty match).

    ``word_starts``: ids of the pieces that begin a word, for whole-word matching (see the
    module docstring); None matches token sequences anywhere.
    """

    def __init__(self, phrases: Sequence[Phrase], word_starts: Optional[Set[int]] = None) -> None:
        self.phrases = list(phrases)
        self.word_starts = word_starts
        self._children: List[Dict[int, int]] = [{}]
        self._token_score: List[float] = [0.0]
        self._end: List[int] = [-1]  # phrase index ending at the node, or -1
        self._parent: List[int] = [-1]
        for index, phrase in enumerate(self.phrases):
            if not phrase.tokens:
                raise ValueError(f"hotword phrase {phrase.text!r} has no tokens")
            node = ROOT
            for token in self._symbols(phrase.tokens, at_start=False, at_end=True):
                child = self._children[node].get(token)
                if child is None:
                    child = self._new_node(node)
                    self._children[node][token] = child
                score = 0.0 if token == BOUNDARY else phrase.score
                self._token_score[child] = max(self._token_score[child], score)
                node = child
            if self._end[node] < 0:
                self._end[node] = index
        self._link()
        self._moves: List[Dict[Any, Tuple[int, float]]] = [{} for _ in self._children]

    def _new_node(self, parent: int) -> int:
        self._children.append({})
        self._token_score.append(float("-inf"))
        self._end.append(-1)
        self._parent.append(parent)
        return len(self._children) - 1

    def _link(self) -> None:
        """Failure links, node scores, held and output scores, breadth first."""
        n = len(self._children)
        self._fail = [ROOT] * n
        self.node_score = [0.0] * n
        self.held = [0.0] * n
        self.out = [0.0] * n
        queue = deque([ROOT])
        while queue:
            node = queue.popleft()
            for token, child in self._children[node].items():
                if node != ROOT:
                    f = self._fail[node]
                    while f != ROOT and token not in self._children[f]:
                        f = self._fail[f]
                    self._fail[child] = self._children[f].get(token, ROOT)
                score = self.node_score[node] + self._token_score[child]
                self.node_score[child] = score
                # held: the path's score since its deepest completed phrase (0 at a phrase end)
                self.held[child] = (
                    0.0 if self._end[child] >= 0 else self.held[node] + (self._token_score[child])
                )
                own = score if self._end[child] >= 0 else 0.0
                self.out[child] = own + self.out[self._fail[child]]
                queue.append(child)

    @property
    def num_states(self) -> int:
        return len(self._children)

    def _symbols(self, tokens: Sequence[int], at_start: bool, at_end: bool) -> List[int]:
        """``tokens`` with the boundary symbol before each word-start piece (but a first one
        unless ``at_start``) and after the last (if ``at_end``); as they are without
        ``word_starts``."""
        if self.word_starts is None:
            return list(tokens)
        out: List[int] = []
        for i, token in enumerate(tokens):
            if token in self.word_starts and (i > 0 or at_start):
                out.append(BOUNDARY)
            out.append(token)
        return out + [BOUNDARY] if at_end else out

    def _move(self, state: int, symbol: int) -> Tuple[int, float]:
        moves = self._moves[state]
        found = moves.get(symbol)
        if found is None:
            node = state
            while node != ROOT and symbol not in self._children[node]:
                node = self._fail[node]
            nxt = self._children[node].get(symbol, ROOT)
            found = moves[symbol] = (nxt, self.out[nxt] + self.held[nxt] - self.held[state])
        return found

    def step(self, state: int, token: int) -> Tuple[int, float]:
        """The state after one more token, and the bonus it gains (negative: taken back)."""
        if self.word_starts is None or token not in self.word_starts:
            return self._move(state, token)
        key = (BOUNDARY, token)  # a word boundary, then the token: one memoised move
        moves = self._moves[state]
        found = moves.get(key)
        if found is None:
            middle, first = self._move(state, BOUNDARY)
            nxt, second = self._move(middle, token)
            found = moves[key] = (nxt, first + second)
        return found

    def final(self, state: int) -> float:
        """The end of a segment: a phrase that just ended completes (with ``word_starts``), and
        the unfinished match's bonus is taken back."""
        if self.word_starts is None:
            return -self.held[state]
        nxt, gain = self._move(state, BOUNDARY)
        return gain - self.held[nxt]

    def matches(self, tokens: Sequence[int]) -> List[Tuple[int, int, int]]:
        """Every whole-phrase occurrence in ``tokens`` (a whole segment): (first token, last
        token + 1, phrase index)."""
        found = []
        state, real = ROOT, 0  # real: tokens consumed so far
        for symbol in self._symbols(tokens, at_start=True, at_end=True):
            state, _ = self._move(state, symbol)
            real += symbol != BOUNDARY
            node = state
            while node != ROOT:
                phrase = self._end[node]
                if phrase >= 0:
                    found.append((real - len(self.phrases[phrase].tokens), real, phrase))
                node = self._fail[node]
        return found


def load_context(
    path: Union[str, Path], tokenizer: Tokenizer, default_score: float = HOTWORDS_SCORE
) -> ContextGraph:
    """The graph of a hotwords file over ``tokenizer``'s pieces. A phrase the tokenizer cannot
    spell (a piece would be ``<unk>``) is reported in a warning, naming the line, and skipped."""
    phrases, skipped = read_hotwords(path, _encoder(tokenizer), default_score, _normalizer())
    _warn(skipped)
    return ContextGraph(phrases, word_starts(tokenizer))


def hotword_phrases(
    lines: Sequence[str], tokenizer: Tokenizer, default_score: float, source: str
) -> List[Phrase]:
    """Phrases of hotword lines given in memory (``PHRASE`` or ``PHRASE :SCORE``, as in a
    file), e.g. a server client's own list; ``source`` names them in errors and warnings
    (``SOURCE[3]``). Raises ValueError as :func:`read_hotwords` does."""
    numbered = ((f"{source}[{i}]", line) for i, line in enumerate(lines))
    phrases, skipped = _parse_lines(numbered, _encoder(tokenizer), default_score, _normalizer())
    _warn(skipped)
    if not phrases:
        raise ValueError(f"{source}: no hotword phrase the tokenizer can spell")
    return phrases


def extended_context(
    context: Optional[ContextGraph], lines: Sequence[str], tokenizer: Tokenizer,
    default_score: float, source: str,
) -> ContextGraph:  # fmt: skip
    """A graph of ``context``'s phrases (None: none) and those of hotword ``lines``, e.g. one
    stream's own list beside the recogniser's; ValueError naming ``source`` for a bad line."""
    own = context.phrases if context is not None else []
    added = hotword_phrases(lines, tokenizer, default_score, source)
    return ContextGraph(own + added, word_starts(tokenizer))


def word_starts(tokenizer: Tokenizer) -> Set[int]:
    """Ids of the pieces that begin a word ('▁...'): whole-word matching."""
    return {i for i, piece in enumerate(tokenizer.pieces()) if piece.startswith(WORD_START)}


def _encoder(tokenizer: Tokenizer):
    def encode(text: str) -> List[int]:
        ids = tokenizer.encode(text)
        return ids if tokenizer.unk_id not in ids and tokenizer.has_known_pieces(ids) else []

    return encode


def _normalizer():
    from wenet_lite.data.tokenizer import normalize_text

    return normalize_text


_WARN_LINES = 3
"""skipped lines named in the warning; the rest are counted"""
_WARN_CHARS = 160
"""each named line is cut to this many characters"""


def _warn(skipped: Sequence[str]) -> None:
    """One warning for every skipped line: how many, and the first few, cut short (a client's
    list of a thousand bad lines is one short log line, not a megabyte)."""
    import logging

    if not skipped:
        return
    shown = [line if len(line) <= _WARN_CHARS else line[:_WARN_CHARS] + "..." for line in
             skipped[:_WARN_LINES]]  # fmt: skip
    more = len(skipped) - len(shown)
    logging.getLogger(__name__).warning(
        "%d hotword line(s) skipped: %s%s", len(skipped), "; ".join(shown),
        f"; and {more} more" if more else "",
    )  # fmt: skip


def read_hotwords(
    path: Union[str, Path],
    encode,
    default_score: float = HOTWORDS_SCORE,
    normalize=None,
) -> Tuple[List[Phrase], List[str]]:
    """Phrases of a hotwords file: one a line, optionally ending in ``:SCORE`` (per token, as
    sherpa-onnx writes it: ``NEW YORK :3.5``); blank lines and ``#`` comments are skipped.

    ``encode`` turns normalised text into token ids; ``normalize`` normalises a phrase as the
    transcripts are (case, spacing). Returns the phrases and the lines skipped because they
    have no tokens (each named). Raises ValueError naming the file and line for undecodable
    bytes, a score that is not a number, a phrase over ``MAX_PHRASE_TOKENS`` tokens, and a
    file without any phrase; FileNotFoundError for a missing file.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a hotwords file")
    if not path.is_file():
        raise FileNotFoundError(f"hotwords file not found: {path}")
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        where = f"{path}:{number}"
        try:
            lines.append((where, raw.decode("utf-8")))
        except UnicodeDecodeError as e:
            raise ValueError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    phrases, skipped = _parse_lines(lines, encode, default_score, normalize)
    if not phrases:
        raise ValueError(f"{path}: no hotword phrase in the file")
    return phrases, skipped


def _parse_lines(
    lines: Iterable[Tuple[str, str]], encode, default_score: float, normalize
) -> Tuple[List[Phrase], List[str]]:
    """(where, line) pairs -> phrases, and the lines skipped for having no tokens."""
    phrases: List[Phrase] = []
    skipped: List[str] = []
    for where, raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        text, score = _split_score(line, default_score, where)
        text = normalize(text) if normalize is not None else " ".join(text.split())
        tokens = tuple(encode(text)) if text else ()
        if not tokens:
            skipped.append(f"{where}: {line!r} has no pieces in the tokenizer: skipped")
            continue
        if len(tokens) > MAX_PHRASE_TOKENS:
            raise ValueError(
                f"{where}: a phrase of {len(tokens)} tokens; at most {MAX_PHRASE_TOKENS}"
            )
        phrases.append(Phrase(text, tokens, score))
    return phrases, skipped


def _split_score(line: str, default: float, where: str) -> Tuple[str, float]:
    """``PHRASE :SCORE`` -> (PHRASE, SCORE); a line without a trailing `` :...`` (a colon after
    a space) keeps the default, so ``RATIO 3:2`` is a phrase."""
    text, colon, value = line.rpartition(" :")
    if not colon or not text.strip():
        return line, default
    try:
        score = float(value)
    except ValueError:
        raise ValueError(f"{where}: hotword score {value.strip()!r} is not a number") from None
    if not score == score or score in (float("inf"), float("-inf")):
        raise ValueError(f"{where}: hotword score {value.strip()!r} is not a finite number")
    return text.strip(), score
