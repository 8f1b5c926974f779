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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple, Union

if TYPE_CHECKING:
    from wenet_lite.data.tokenizer import Tokenizer

__all__ = [
    "HOTWORDS_SCORE",
    "MAX_PHRASE_TOKENS",
    "ContextGraph",
    "Phrase",
    "load_context",
    "read_hotwords",
]

HOTWORDS_SCORE = 1.5
"""Default bonus per matched token (sherpa-onnx's default; README "Hotwords" has ours measured)."""
MAX_PHRASE_TOKENS = 100

ROOT = 0


@dataclass(frozen=True)
class Phrase:
    text: str
    """as written in the file (normalised as transcripts are)"""
    tokens: Tuple[int, ...]
    score: float
    """bonus per matched token"""


class ContextGraph:
    """The automaton of some phrases. States are ints (``ROOT`` = 0, the empty match)."""

    def __init__(self, phrases: Sequence[Phrase]) -> None:
        self.phrases = list(phrases)
        self._children: List[Dict[int, int]] = [{}]
        self._token_score: List[float] = [0.0]
        self._end: List[int] = [-1]  # phrase index ending at the node, or -1
        self._parent: List[int] = [-1]
        for index, phrase in enumerate(self.phrases):
            if not phrase.tokens:
                raise ValueError(f"hotword phrase {phrase.text!r} has no tokens")
            node = ROOT
            for token in phrase.tokens:
                child = self._children[node].get(token)
                if child is None:
                    child = self._new_node(node)
                    self._children[node][token] = child
                self._token_score[child] = max(self._token_score[child], phrase.score)
                node = child
            if self._end[node] < 0:
                self._end[node] = index
        self._link()
        self._moves: List[Dict[int, Tuple[int, float]]] = [{} for _ in self._children]

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

    def step(self, state: int, token: int) -> Tuple[int, float]:
        """The state after one more token, and the bonus it gains (negative: taken back)."""
        moves = self._moves[state]
        found = moves.get(token)
        if found is None:
            node = state
            while node != ROOT and token not in self._children[node]:
                node = self._fail[node]
            nxt = self._children[node].get(token, ROOT)
            found = moves[token] = (nxt, self.out[nxt] + self.held[nxt] - self.held[state])
        return found

    def final(self, state: int) -> float:
        """What the end of a segment takes back: the unfinished match's bonus (<= 0)."""
        return -self.held[state]

    def matches(self, tokens: Sequence[int]) -> List[Tuple[int, int, int]]:
        """Every whole-phrase occurrence in ``tokens``: (first, last + 1, phrase index)."""
        found = []
        state = ROOT
        for i, token in enumerate(tokens):
            state, _ = self.step(state, token)
            node = state
            while node != ROOT:
                phrase = self._end[node]
                if phrase >= 0:
                    found.append((i + 1 - len(self.phrases[phrase].tokens), i + 1, phrase))
                node = self._fail[node]
        return found


def load_context(
    path: Union[str, Path], tokenizer: Tokenizer, default_score: float = HOTWORDS_SCORE
) -> ContextGraph:
    """The graph of a hotwords file over ``tokenizer``'s pieces. A phrase the tokenizer cannot
    spell (a piece would be ``<unk>``) is reported in a warning, naming the line, and skipped."""
    import logging

    from wenet_lite.data.tokenizer import normalize_text

    def encode(text: str) -> List[int]:
        ids = tokenizer.encode(text)
        return ids if tokenizer.unk_id not in ids and tokenizer.has_known_pieces(ids) else []

    phrases, skipped = read_hotwords(path, encode, default_score, normalize_text)
    for line in skipped:
        logging.getLogger(__name__).warning("%s", line)
    return ContextGraph(phrases)


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
    phrases: List[Phrase] = []
    skipped: List[str] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise ValueError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
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
    if not phrases:
        raise ValueError(f"{path}: no hotword phrase in the file")
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
