"""Docs, help texts and comments speak of the project alone: no issue numbers, rounds or
release history outside CHANGELOG.md (peers' issues may be cited by the peer's name)."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEERS = re.compile(
    r"(sherpa-onnx|wenet|icefall|k2|lhotse|pytorch|torch|onnx|executorch)\S*\s*$", re.I
)
NUMBERED = re.compile(r"\b(issues?|PR|pull request|fixes|closes) ?#?\d+", re.I)
BANNED = [
    re.compile(r"\b(our|this|the) issue'?s?\b(?! (tracker|of))", re.I),
    re.compile(r"\b(this|next|last|previous) (round|session)\b", re.I),
    re.compile(r"\bthis release's\b", re.I),
    re.compile(r"\bround \d+\b", re.I),
    re.compile(r"\bprevious releases?'s?\b", re.I),
]
"""a phrase from how the work was organised (a websocket's "this session" is allowed below)"""
ALLOWED = [re.compile(r"this session's (own|hotword)", re.I)]


def _banned(line: str) -> bool:
    """A banned phrase; a numbered issue counts unless a peer's name comes just before it."""
    if any(b.search(line) for b in BANNED):
        return True
    return any(not PEERS.search(line[: m.start()]) for m in NUMBERED.finditer(line))


def _files():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    for name in listed.stdout.split():
        if (
            name == "CHANGELOG.md"
            or name.startswith("tests/fixtures/")
            or name == Path(__file__).name
        ):
            continue
        if name.endswith((".py", ".md", ".sh", ".yaml", ".toml", ".html", ".js", ".txt")) or \
                name == "Makefile":  # fmt: skip
            yield REPO / name


def test_no_words_from_how_the_work_was_organised() -> None:
    found = []
    for path in _files():
        if path.name == "test_words.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(a.search(line) for a in ALLOWED):
                continue
            if _banned(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_the_patterns_catch_what_they_mean() -> None:
    """Negative control: the patterns find the phrases they are for."""
    caught = ["as issue 25 asked", "the issue's target", "in this round", "round 3",
              "the previous release's run", "fixes #12", "this session took"]  # fmt: skip
    for text in caught:
        assert _banned(text), text
    for text in ["sherpa-onnx issue #514", "k2-fsa/sherpa-onnx#514", "k2-fsa/sherpa-onnx"]:
        assert not _banned(text), text
