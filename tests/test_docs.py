"""The docs: the site builds with ``mkdocs build --strict`` (no broken links or anchors), and
every ``wenet-lite ...`` command line in the docs and README parses with the CLI's parser, so
a renamed or removed flag fails here."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
         REPO / "benchmarks" / "README.md"]  # fmt: skip


def commands(text: str) -> Iterator[str]:
    """``wenet-lite`` command lines in fenced code blocks, continuation lines joined."""
    fence = False
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence, pending = not fence, ""
            continue
        if not fence:
            continue
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        for part in re.split(r"\s(?:&&|\|\||\||;)\s", line):
            part = part.strip()
            if part.startswith(("wenet-lite ", ".venv/bin/wenet-lite ")) and not re.match(
                r"\S+ \S+:", part
            ):  # "wenet-lite decode: error: ..." is output, not a command
                yield part


def _argv(command: str) -> list:
    words = shlex.split(command, comments=True)
    argv = []
    for w in words[1:]:
        if w in (">", "2>", "&", "<") or w.startswith((">", "2>")):
            break  # a redirection: the rest is not wenet-lite's
        argv.append(w)
    return argv


def all_commands() -> Iterator[Tuple[str, str]]:
    for page in PAGES:
        for command in commands(page.read_text(encoding="utf-8")):
            yield f"{page.relative_to(REPO)}", command


def test_every_command_line_in_the_docs_parses() -> None:
    from wenet_lite.cli import build_parser

    parser = build_parser()
    found = list(all_commands())
    assert len(found) > 30, "the docs should show the commands"
    bad = []
    for where, command in found:
        try:
            parser.parse_args(_argv(command))
        except SystemExit:
            bad.append(f"{where}: {command}")
    assert not bad, "\n".join(bad)


def test_a_renamed_flag_would_fail() -> None:
    """Negative control: the check rejects a flag the CLI does not have."""
    from wenet_lite.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(_argv("wenet-lite stream --model m.pt --no-such-flag a.wav"))
    assert list(commands("```bash\nwenet-lite decode \\\n  --model m.pt --data d\n```")) == [
        "wenet-lite decode --model m.pt --data d"
    ]


MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.mark.skipif(not MKDOCS.exists() and shutil.which("mkdocs") is None,
                    reason="mkdocs is in the [dev] extra")  # fmt: skip
def test_the_site_builds_strictly(tmp_path) -> None:
    mkdocs = MKDOCS
    cmd = [str(mkdocs if mkdocs.exists() else "mkdocs"), "build", "--strict", "--site-dir",
           str(tmp_path / "site")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "configs" / "index.html").is_file()


def test_pages_stay_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
    long = [p.name for p in (REPO / "docs").glob("*.md") if len(p.read_text().splitlines()) > 320]
    assert not long, long
