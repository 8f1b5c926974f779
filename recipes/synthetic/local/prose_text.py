#!/usr/bin/env python3
"""Written prose from Debian packages, a paragraph a line, for `wenet-lite train-punct` and
for scoring a punctuation model on text of a kind it never saw.

``--docs OUT``: the paragraphs of the reStructuredText documentation that Debian installs with
``python3-doc`` (Python's manuals) and ``linux-doc`` (the Linux kernel's), the markup removed:
technical English in long sentences, a different kind of text from the fortunes. A
paragraph that shares a run of 8 words with the licences is left out (the manuals quote the
GFDL and the GPL's notice: the legal prose scored on must be text the model never saw).
``--legal OUT``: the paragraphs of the licences every Debian system holds in
``/usr/share/common-licenses`` (GPL, LGPL, Apache, MPL, GFDL, Artistic): legal English, kept
apart to score on.

A paragraph is kept when it reads as prose: it starts with a capital, ends with a mark, holds
at least 8 words, and nearly all its tokens are plain words (code, tables, lists and headings
are left out).

    python recipes/synthetic/local/prose_text.py --docs data/synthetic/docs.txt \
        --legal data/synthetic/legal.txt
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
from pathlib import Path
from typing import Iterable, Iterator, List, Tuple

DOC_ROOTS = (Path("/usr/share/doc/python3-doc"), Path("/usr/share/doc/linux-doc"))
"""python3-doc's sources live under /usr/share/doc/python3.X/html/_sources (found by glob)"""
LICENCES = Path("/usr/share/common-licenses")
RST = (".rst", ".rst.gz", ".rst.txt")
APT_HINT = "sudo apt-get install python3-doc linux-doc"

_HEADING_RULE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
_ROLE = re.compile(r":[\w:+-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")  # :func:`name <target>` -> name
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`_{1,2}")  # `text <url>`_ -> text
_REF = re.compile(r"`([^`]+)`_{1,2}")
_LITERAL = re.compile(r"``([^`]+)``")
_EMPHASIS = re.compile(r"\*{1,2}([^*\s][^*]*?)\*{1,2}")
_FOOTNOTE = re.compile(r"\s*\[[#*\w-]*\]_")
_PLAIN_TOKEN = re.compile(r"^[(\"']?[A-Za-z][a-z]*(?:'[a-z]+)?[)\"']?[,.;:?!]?[)\"']?$")
_BAD_START = (".. ", "::", ":", "*", "-", "+", "|", "#", "=", ">>>", "...")


def _paragraphs(lines: Iterable[str]) -> Iterator[List[str]]:
    block: List[str] = []
    for line in lines:
        if line.strip():
            block.append(line.rstrip("\n"))
        elif block:
            yield block
            block = []
    if block:
        yield block


def _prose(paragraph: str, min_words: int = 8, plain_share: float = 0.9) -> bool:
    tokens = paragraph.split()
    if len(tokens) < min_words or not paragraph[0].isupper() or paragraph[-1] not in ".?!":
        return False
    plain = sum(bool(_PLAIN_TOKEN.match(t)) for t in tokens)
    return plain >= plain_share * len(tokens)


def rst_paragraphs(text: str) -> Iterator[str]:
    """The prose paragraphs of a reStructuredText source, inline markup removed."""
    for block in _paragraphs(text.splitlines()):
        first = block[0]
        if first[:1].isspace() or first.lstrip().startswith(_BAD_START):
            continue  # indented (code, quotes, directive bodies), directives, lists, tables
        if any(_HEADING_RULE.match(line) for line in block) or block[-1].rstrip().endswith("::"):
            continue  # headings, and a paragraph that introduces code
        joined = " ".join(line.strip() for line in block)
        for pattern in (_ROLE, _LINK, _REF, _LITERAL, _EMPHASIS):
            joined = pattern.sub(r"\1", joined)
        joined = _FOOTNOTE.sub("", joined)
        if _prose(joined):
            yield joined


def text_paragraphs(text: str) -> Iterator[str]:
    """The prose paragraphs of plain text wrapped at a width (a licence)."""
    for block in _paragraphs(text.splitlines()):
        joined = " ".join(line.strip() for line in block)
        if _prose(joined):
            yield joined


def _read(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def doc_sources() -> List[Path]:
    roots = [*sorted(Path("/usr/share/doc").glob("python3.*/html/_sources")), *DOC_ROOTS]
    found: List[Path] = []
    for root in roots:
        if root.is_dir():
            found += sorted(p for p in root.rglob("*") if p.name.endswith(RST))
    return found


SHARED_RUN = 8
"""a documentation paragraph sharing this many words in a row with a licence is left out"""


def _runs(paragraph: str, n: int = SHARED_RUN) -> Iterator[Tuple[str, ...]]:
    words = [w.strip(".,;:?!\"'()[]").lower() for w in paragraph.split()]
    return (tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def unseen(paragraphs: List[str], held: Iterable[str]) -> Tuple[List[str], int]:
    """The paragraphs that share no run of :data:`SHARED_RUN` words (case and marks aside)
    with any of ``held``, and how many were left out."""
    runs = {run for para in held for run in _runs(para)}
    kept = [para for para in paragraphs if runs.isdisjoint(_runs(para))]
    return kept, len(paragraphs) - len(kept)


def docs(max_words: int, seed: int) -> List[str]:
    """Documentation paragraphs, each once and none quoting a licence (:func:`unseen`),
    shuffled, up to ``max_words`` words."""
    found = _once(para for path in doc_sources() for para in rst_paragraphs(_read(path)))
    out, quoting = unseen(found, legal())
    if quoting:
        print(f"{quoting} documentation paragraphs quote a licence: left out")
    random.Random(seed).shuffle(out)
    kept, words = [], 0
    for para in out:
        if max_words and words >= max_words:
            break
        kept.append(para)
        words += len(para.split())
    return kept


def legal() -> List[str]:
    """The licences' paragraphs, each once, in file order."""
    files = [p for p in sorted(LICENCES.iterdir()) if p.is_file()] if LICENCES.is_dir() else []
    return _once(para for path in files for para in text_paragraphs(_read(path)))


def _once(paragraphs: Iterable[str]) -> List[str]:
    """The paragraphs in order, each the first time it comes (licences and manuals repeat)."""
    return list(dict.fromkeys(paragraphs))


def _write(path: Path, lines: List[str], what: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    words = sum(len(line.split()) for line in lines)
    print(f"{path}: {len(lines)} paragraphs of {what}, {words} words")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=Path, help="write the documentation prose here")
    p.add_argument("--legal", type=Path, help="write the licences' prose here")
    p.add_argument("--max-words", type=int, default=3_000_000,
                   help="at most this many words of documentation (0: all)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not (args.docs or args.legal):
        p.error("give --docs OUT, --legal OUT or both")
    if args.docs:
        if not doc_sources():
            raise SystemExit(f"error: no reStructuredText documentation found; install: {APT_HINT}")
        _write(args.docs, docs(args.max_words, args.seed), "documentation")
    if args.legal:
        lines = legal()
        if not lines:
            raise SystemExit(f"error: no licence text in {LICENCES} (Debian's base-files has it)")
        _write(args.legal, lines, "licences")


if __name__ == "__main__":
    main()
