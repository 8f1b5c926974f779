"""Numbers as digits: English inverse text normalisation by ``wetext``'s prebuilt grammars (the
``itn`` extra: ``pip install 'wenet_lite[itn]'``, no pynini), as spans.

A recogniser's words are spoken forms (``TWENTY THREE DOLLARS``); :meth:`Itn.spans` gives the
written words (``$23``), each with the first and last spoken word it came from, so that a
written word takes its times and confidence from them (``runtime.result.normalized``).
Punctuation runs before it (it reads spoken words, as its model was trained): the grammars read
the words lower case without marks, a written span keeps the mark after its last spoken word
and the capital of its first; words no grammar rewrites stay as they are.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Sequence

__all__ = ["Itn", "ItnError", "Span"]

_MARK = re.compile(r"[.,;:?!]+$")
_SENTENCE_END = re.compile(r"[.?!]$")


class ItnError(ValueError):
    """ITN cannot run (its package is missing or broken): names the extra."""


class Span(NamedTuple):
    """A written word and the spoken words it came from (``first`` .. ``last``, inclusive)."""

    first: int
    last: int
    text: str


class Itn:
    """English inverse text normalisation over a recogniser's words."""

    def __init__(self, language: str = "en") -> None:
        if language != "en":
            raise ItnError(f"ITN language {language!r}: the grammars here are English ('en')")
        try:
            from wetext import Normalizer
        except ImportError as e:
            raise ItnError(
                "inverse text normalisation needs wetext, which is not installed or cannot be "
                f"imported ({e}): pip install 'wenet_lite[itn]'"
            ) from None
        self._normalizer = Normalizer(lang="en", operator="itn")

    def spans(self, words: Sequence[str]) -> List[Span]:
        """The written words of ``words`` in order, each with the spoken words it came from;
        a word the grammars leave is its own span, as it was given. Each sentence (ended by a
        word with ``.``, ``?`` or ``!``) is read alone: no number runs across its end."""
        out: List[Span] = []
        start = 0
        for i, word in enumerate(words):
            if _SENTENCE_END.search(word) or i == len(words) - 1:
                out += [Span(s.first + start, s.last + start, s.text)
                        for s in self._sentence(words[start : i + 1])]  # fmt: skip
                start = i + 1
        return out

    def _sentence(self, words: Sequence[str]) -> List[Span]:
        plain = [_MARK.sub("", w).lower() for w in words]
        starts, position = [], 0
        for w in plain:  # each word's first character in the text the grammars read
            starts.append(position)
            position += len(w) + 1
        text = " ".join(plain)
        if not text.strip():
            return [Span(i, i, w) for i, w in enumerate(words)]
        result = self._normalizer.normalize_with_mapping(text)
        out: List[Span] = []
        done = 0  # spoken words taken
        for m in sorted(result.mappings, key=lambda m: m.input_start):
            if m.kind != "replace":
                continue
            first = _word_at(starts, m.input_start)
            last = _word_at(starts, max(m.input_end - 1, m.input_start))
            if first < done:  # overlapping rewrites: keep the first
                continue
            out += [Span(i, i, words[i]) for i in range(done, first)]
            written = _written(m.output_text, words[first : last + 1])
            out += [Span(first, last, t) for t in written.split()]
            done = last + 1
        out += [Span(i, i, words[i]) for i in range(done, len(words))]
        return out


def _word_at(starts: List[int], char: int) -> int:
    """The index of the word whose characters hold ``char``."""
    index = 0
    for i, start in enumerate(starts):
        if start <= char:
            index = i
    return index


def _written(text: str, spoken: Sequence[str]) -> str:
    """A written span in the case of its spoken words (upper case where they all are, as a
    recogniser writes them; else the capital of the first, punctuation's), with the mark after
    the last."""
    first, last = spoken[0], spoken[-1]
    if all(w == w.upper() for w in spoken):
        text = text.upper()
    elif first[:1].isupper() and text[:1].islower():
        text = text[:1].upper() + text[1:]  # a sentence's first word
    mark = _MARK.search(last)
    if mark and not text.endswith(mark.group(0)):
        text += mark.group(0)
    return text
