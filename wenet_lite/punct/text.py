"""Written text <-> the labels a punctuation model predicts for each spoken word.

A word is what a recogniser writes (``DON'T``): lower-cased here (``don't``); its labels are
the mark written after it (none , . ? !) and its case (lower, Capitalised, UPPER, or mixed as
written: ``McDonald``). Marks other than those four fold into them (``;`` and ``:`` into a
comma, ``...`` into a period); quotes, brackets and dashes are dropped; a hyphen splits a
word, as speech does.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["CASES", "MARKS", "Labelled", "apply_labels", "baseline", "mixed_forms", "plain_word",
           "split_text"]  # fmt: skip

MARKS = ("", ",", ".", "?", "!")
"""the mark after a word: index 0 none"""
CASES = ("lower", "capital", "upper", "mixed")
"""how a word is written: lower, Capitalised, UPPER, or mixed as the training text wrote it"""

_TOKEN = re.compile(r"[^\s\-\u2010-\u2015]+")  # a hyphen or dash splits a word
_WORD = re.compile(r"[\w']+")  # letters, digits, apostrophes
_FOLD = {",": 1, ";": 1, ":": 1, ".": 2, "?": 3, "!": 4}


@dataclass(frozen=True)
class Labelled:
    """One word of written text: ``word`` as a recogniser would write it, lower-cased; the
    index of its mark in :data:`MARKS` and of its case in :data:`CASES`; ``written`` the
    word as the text wrote it (for mixed case)."""

    word: str
    mark: int
    case: int
    written: str


def plain_word(word: str) -> str:
    """A recogniser's word as the model reads it: lower case, no marks around it."""
    return word.strip('.,;:?!"()[]{}').lower()


def _case(written: str) -> int:
    """The case of the word before a clitic (``NASA's`` is upper, ``I'm`` capitalised)."""
    letters = [c for c in written.split("'")[0] or written if c.isalpha()]
    if not letters or all(c.islower() for c in letters):
        return 0
    if all(c.isupper() for c in letters):
        return 2 if len(letters) > 1 else 1  # "I", "A": capitals, not shouting
    if letters[0].isupper() and all(c.islower() for c in letters[1:]):
        return 1
    return 3


def _mark(tail: str) -> int:
    """The mark of the characters after a word: the last of . , ; : ? ! among them."""
    for c in reversed(tail):
        if c in _FOLD:
            return _FOLD[c]
    return 0


def split_text(line: str) -> List[Labelled]:
    """The words of a line of written text with their labels. A mark standing alone
    (``word , word``) belongs to the word before it; ``U.S.`` is two words, as spoken."""
    out: List[Labelled] = []
    for token in _TOKEN.findall(line):
        matches = list(_WORD.finditer(token))
        if not matches:  # marks alone
            mark = _mark(token)
            if out and mark:
                out[-1] = dataclasses.replace(out[-1], mark=mark)
            continue
        for k, match in enumerate(matches):
            written = match.group(0).strip("'")
            if not written:
                continue
            tail = token[match.end() : matches[k + 1].start() if k + 1 < len(matches) else None]
            out.append(Labelled(written.lower(), _mark(tail), _case(written), written))
    return out


def apply_labels(
    words: Sequence[str],
    marks: Sequence[int],
    cases: Sequence[int],
    mixed: Optional[Dict[str, str]] = None,
) -> List[str]:
    """Each word written with its case and followed by its mark."""
    out = []
    for word, mark, case in zip(words, marks, cases):
        low = word.lower()
        if case == 1:
            text = low[:1].upper() + low[1:]
        elif case == 2:  # the clitic stays lower: NASA's
            stem, apostrophe, rest = low.partition("'")
            text = stem.upper() + apostrophe + rest if stem else low.upper()
        elif case == 3:
            text = (mixed or {}).get(low) or low[:1].upper() + low[1:]
        else:
            text = low
        out.append(text + MARKS[mark])
    return out


def baseline(words: Sequence[str]) -> Tuple[List[int], List[int]]:
    """The labels of the plainest rule: the first word capitalised, a period at the end, and
    ``i`` (with ``i'm``, ``i'll``...) capitalised."""
    marks = [0] * len(words)
    cases = [1 if w == "i" or w.startswith("i'") else 0 for w in words]
    if words:
        marks[-1] = 2
        cases[0] = 1
    return marks, cases


def mixed_forms(lines: Iterable[Sequence[Labelled]]) -> Dict[str, str]:
    """The most frequent written form of each word the text writes in mixed case."""
    counts: Dict[str, Dict[str, int]] = {}
    for words in lines:
        for w in words:
            if w.case == 3:
                forms = counts.setdefault(w.word, {})
                forms[w.written] = forms.get(w.written, 0) + 1
    return {word: max(forms, key=lambda f: (forms[f], f)) for word, forms in counts.items()}
