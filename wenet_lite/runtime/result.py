"""What a recogniser returns: text, tokens and words with times in seconds, and a confidence.

Token times come from CTC search (``Hypothesis.timestamps``: the first encoder frame of each
token's run on the best alignment). CTC posteriors are spiky, so a token's time is when the
model committed to it, usually a little after the sound starts. Words are runs of tokens split
at sentencepiece's word-start marker '▁'; a word ends one encoder frame after its last token.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from wenet_lite.data.tokenizer import WORD_START, Tokenizer
from wenet_lite.search.ctc_search import Hypothesis, frames_to_seconds

if TYPE_CHECKING:
    from wenet_lite.search.context import ContextGraph

__all__ = ["SpanStage", "TextStage", "Word", "Result", "hotword_tokens", "join_words",
           "make_result", "merge_results", "normalized", "punctuated", "shifted", "spell",
           "token_logprobs", "unspaced"]  # fmt: skip


class TextStage(typing.Protocol):
    """A stage that rewrites recognised words one for one (a punctuator, or a stream's): each
    output word stands where its input word stood, so it keeps that word's times."""

    def words(self, words: Sequence[str]) -> List[str]:
        """The words as written."""


class SpanStage(typing.Protocol):
    """A stage that rewrites spans of recognised words (inverse text normalisation): each
    output word names the first and last input word it came from, in order."""

    def spans(self, words: Sequence[str]) -> List[Tuple[int, int, str]]:
        """(first, last, written text) of each output word."""


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    """seconds from the start of the stream: time of the word's first token"""
    end: float
    """seconds: one encoder frame after the word's last token"""
    hotword: bool = False
    """every token of the word lies in a whole hotword phrase the search matched"""
    confidence: float = 1.0
    """in [0, 1]: the mean peak posterior of the word's tokens (see ``Hypothesis.peaks``)"""
    speaker: Optional[str] = None
    """who said it (``S1``, ``S2``, ...), where speaker labels were asked for"""


@dataclass(frozen=True)
class Result:
    """A recognised segment (or a whole stream, see :func:`merge_results`)."""

    text: str
    token_ids: List[int]
    tokens: List[str]
    """sentencepiece pieces of ``token_ids``"""
    timestamps: List[float]
    """seconds from the start of the stream, one per token"""
    words: List[Word]
    confidence: float
    """in [0, 1], see ``Hypothesis.confidence``"""
    start: float
    """seconds: where the segment starts in the stream"""
    end: float
    """seconds: how far the segment's decoded audio reaches"""
    is_final: bool
    """False for a partial result, which may still change"""
    token_confidences: Tuple[float, ...] = ()
    """in [0, 1], one per token: its peak posterior (``Hypothesis.peaks``); a word's
    confidence is the mean of its tokens'"""


def make_result(
    hyp: Hypothesis,
    tokenizer: Tokenizer,
    first_frame: int,
    num_frames: int,
    subsampling_rate: int,
    frame_shift_s: float,
    is_final: bool,
    context: Optional[ContextGraph] = None,
    with_words: bool = True,
    pause: Optional[float] = None,
) -> Result:
    """Turn a segment's hypothesis into a :class:`Result`.

    Args:
        hyp: search result over the segment's encoder frames (timestamps relative to it).
        first_frame: index in the stream of the segment's first encoder frame.
        num_frames: encoder frames decoded in the segment.
        context: the hotword graph of the search, to mark the words it matched.
        with_words: False leaves ``words`` empty (a server's partial results need only the
            text and tokens, and grouping words costs half the spelling).
        pause: seconds of silence between two tokens that end a word even without a
            word-start piece after them (None: pieces alone decide), so no word spans a pause.
    """
    frames = [first_frame + t for t in hyp.timestamps]
    times = _seconds(frames, subsampling_rate, frame_shift_s)
    start, end = _seconds([first_frame, first_frame + num_frames], subsampling_rate, frame_shift_s)
    pieces = [tokenizer.id_to_piece(i) for i in hyp.tokens]
    frame_s = subsampling_rate * frame_shift_s
    return Result(
        text=spell(tokenizer, hyp.tokens),
        token_ids=list(hyp.tokens),
        tokens=pieces,
        timestamps=times,
        words=_words(
            hyp.tokens,
            pieces,
            times,
            tokenizer,
            frame_s,
            hotword_tokens(hyp.tokens, context),
            hyp.peaks,
            pause,
        )
        if with_words
        else [],
        confidence=hyp.confidence,
        start=start,
        end=end,
        is_final=is_final,
        token_confidences=tuple(round(p, 4) for p in hyp.peaks),
    )


def spell(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of token ids with whitespace collapsed (a hypothesis may hold a bare '▁' piece
    next to a word-start piece, which sentencepiece spells as two spaces)."""
    return " ".join(tokenizer.decode(ids).split())


def hotword_tokens(tokens: Sequence[int], context: Optional[ContextGraph]) -> List[bool]:
    """For each token, whether it lies in a whole hotword phrase matched in ``tokens``."""
    marked = [False] * len(tokens)
    if context is not None:
        for first, end, _ in context.matches(tokens):
            marked[first:end] = [True] * (end - first)
    return marked


def _seconds(frames: Sequence[int], subsampling_rate: int, frame_shift_s: float) -> List[float]:
    # Rounded to the microsecond so that 58 * 0.04 prints as 2.32, not 2.3200000000000003.
    return [round(t, 6) for t in frames_to_seconds(frames, subsampling_rate, frame_shift_s)]


def _words(
    ids: Sequence[int],
    pieces: Sequence[str],
    times: Sequence[float],
    tokenizer: Tokenizer,
    frame_s: float,
    hotword: Sequence[bool],
    peaks: Sequence[float],
    pause: Optional[float] = None,
) -> List[Word]:
    """Tokens grouped into words: a new word at a word-start piece, at each character of an
    unspaced script (CJK: every character a word with its own time), and after a silence of
    ``pause`` seconds from one token's end (its time plus a frame) to the next token."""
    groups: List[List[int]] = []  # token positions of each word
    alone = [unspaced(piece) for piece in pieces]  # a character that is a word by itself
    for i, piece in enumerate(pieces):
        starts = (
            not groups
            or piece.startswith(WORD_START)
            or alone[i]
            or alone[i - 1]
            or (pause is not None and times[i] - times[i - 1] - frame_s >= pause)
        )
        if starts:
            groups.append([])
        groups[-1].append(i)
    words = []
    for group in groups:
        text = tokenizer.decode([ids[i] for i in group]).strip()
        if text:  # a bare '▁' at the end of a char-model hypothesis spells nothing
            end = round(times[group[-1]] + frame_s, 6)
            sure = sum(peaks[i] for i in group) / len(group)
            words.append(Word(text, times[group[0]], end, all(hotword[i] for i in group),
                              round(sure, 4)))  # fmt: skip
    return words


def token_logprobs(result: Result) -> List[float]:
    """The natural log of each token's confidence (a peak posterior), as protocols that
    carry per-token log probabilities write them; -23.03 (log 1e-10) at the floor."""
    return [round(math.log(max(c, 1e-10)), 4) for c in result.token_confidences]


def unspaced(text: str) -> bool:
    """Whether ``text`` (a piece, a word) is written without spaces between words: Han,
    kana, Hangul syllables and the other wide characters (CJK) alone."""
    text = text.lstrip(WORD_START)
    return bool(text) and all(unicodedata.east_asian_width(c) in "WF" for c in text)


def join_words(words: Sequence[str]) -> str:
    """Words as text: a space between two words unless both are :func:`unspaced`."""
    out = ""
    for i, w in enumerate(words):
        if i and not (unspaced(words[i - 1]) and unspaced(w)):
            out += " "
        out += w
    return out


def merge_results(results: Sequence[Result], is_final: bool) -> Result:
    """One result for consecutive segments of a stream: texts joined with a space."""
    ids = [i for r in results for i in r.token_ids]
    # Token-weighted mean; without any token, the plain mean of the blank-path confidences.
    weights = [len(r.token_ids) if ids else 1 for r in results]
    confidence = sum(w * r.confidence for w, r in zip(weights, results)) / max(sum(weights), 1)
    return Result(
        text=" ".join(r.text for r in results if r.text),
        token_ids=ids,
        tokens=[p for r in results for p in r.tokens],
        timestamps=[t for r in results for t in r.timestamps],
        words=[w for r in results for w in r.words],
        confidence=confidence if results else 1.0,
        start=results[0].start if results else 0.0,
        end=results[-1].end if results else 0.0,
        is_final=is_final,
        token_confidences=tuple(c for r in results for c in r.token_confidences),
    )


def shifted(result: Result, seconds: float) -> Result:
    """The result with every time moved by ``seconds`` (a piece of a file, in file time)."""
    words = [
        dataclasses.replace(w, start=round(w.start + seconds, 6), end=round(w.end + seconds, 6))
        for w in result.words
    ]
    return dataclasses.replace(
        result, words=words, timestamps=[round(t + seconds, 6) for t in result.timestamps],
        start=round(result.start + seconds, 6), end=round(result.end + seconds, 6),
    )  # fmt: skip


def punctuated(result: Result, punctuator: Optional[TextStage]) -> Result:
    """The result with its words cased and each followed by its mark (times unchanged), its
    text their join; as it was without a punctuator or words."""
    if punctuator is None or not result.words:
        return result
    texts = punctuator.words([w.text for w in result.words])
    words = [dataclasses.replace(w, text=t) for w, t in zip(result.words, texts)]
    return dataclasses.replace(result, words=words, text=join_words(texts))


def normalized(result: Result, itn: Optional[SpanStage]) -> Result:
    """The result with spans of its words written as ``itn`` writes them (numbers as digits):
    a written word starts where its first spoken word starts and ends where its last ends, its
    confidence their lowest, a hotword if they all were; tokens and their times stay spoken.
    As it was without a stage or words."""
    if itn is None or not result.words:
        return result
    spoken = result.words
    words = []
    for first, last, text in itn.spans([w.text for w in spoken]):
        span = spoken[first : last + 1]
        words.append(Word(text, span[0].start, span[-1].end, all(w.hotword for w in span),
                          min(w.confidence for w in span)))  # fmt: skip
    return dataclasses.replace(result, words=words, text=join_words([w.text for w in words]))
