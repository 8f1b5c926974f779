#!/usr/bin/env python3
"""The fortune text as written (cased, punctuated), one fortune a line, for
`wenet-lite train-punct`: the text the synthetic corpus's sentences come from. Attribution
lines ("-- Author") and fortunes with characters other than letters, digits and common marks
(ASCII art, overstrikes) are left out; "Mr." and the like are expanded as the corpus speaks
them.

    python recipes/synthetic/local/fortune_text.py --out data/synthetic/fortunes.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_synthetic_librispeech import _EXPAND, APT_HINT, FORTUNE_DIR, fortune_files  # noqa: E402

_PLAIN = re.compile(r"[A-Za-z0-9 ,.;:!?'\"()-]+")


def fortunes(text_dir: Path):
    for path in fortune_files(text_dir):
        body = path.read_bytes().decode("utf-8", errors="replace")
        for entry in re.split(r"^%$", body, flags=re.MULTILINE):
            lines = [ln for ln in entry.splitlines() if not ln.strip().startswith("--")]
            joined = " ".join(" ".join(lines).split())
            for pattern, repl in _EXPAND:
                joined = pattern.sub(repl, joined)
            if joined and _PLAIN.fullmatch(joined) and any(c.islower() for c in joined):
                yield joined


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text-dir", type=Path, default=FORTUNE_DIR)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if not fortune_files(args.text_dir):
        raise SystemExit(f"error: no fortune files in {args.text_dir}; install: {APT_HINT}")
    seen = set()
    lines = [f for f in fortunes(args.text_dir) if not (f in seen or seen.add(f))]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    words = sum(len(line.split()) for line in lines)
    print(f"{args.out}: {len(lines)} fortunes, {words} words")


if __name__ == "__main__":
    main()
