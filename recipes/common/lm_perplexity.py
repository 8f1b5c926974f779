#!/usr/bin/env python3
"""Perplexity of word LMs on held-out text: compare LMs without decoding.

Usage:
    python recipes/common/lm_perplexity.py --lm exp/x/lm.json [--lm other.arpa.gz ...]
        --data data/synthetic/dev-clean [--data more/parts ...] [--text held_out.txt ...]

Reads the transcripts of prepared parts (cuts.jsonl.gz) and/or text files, normalised as the
tokenizer does, and prints one row per LM: perplexity over every word and each sentence's
</s> (an unknown word is scored as <unk>, as `decode --lm` scores it), and the share of words
outside the LM's vocabulary. Lower is better, but only between LMs with the same vocabulary
handling: an LM that knows fewer words gives <unk> more mass and can look better than it is.
Use dev text, never test text, to choose an LM.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from wenet_lite.search.lm import load_lm, perplexity, read_sentences


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lm", type=Path, action="append", required=True, help="JSON or ARPA LM")
    p.add_argument("--data", type=Path, action="append", default=[], help="prepared part")
    p.add_argument("--text", type=Path, action="append", default=[], help="text file")
    args = p.parse_args(argv)
    if not args.data and not args.text:
        p.error("give --data and/or --text")
    try:
        sentences = list(read_sentences(args.data, args.text))
    except FileNotFoundError as e:
        p.error(str(e))
    print("| LM | perplexity | sentences | words | outside the LM's vocabulary |")
    print("|---|---|---|---|---|")
    for path in args.lm:
        try:
            lm = load_lm(path)
            result = perplexity(lm, sentences)
        except (OSError, ValueError) as e:
            print(f"lm_perplexity.py: error: {e}", file=sys.stderr)
            return 2
        share = 100.0 * result.unknown / max(result.words, 1)
        print(
            f"| {path} | {result.perplexity:.1f} | {result.sentences} | {result.words} "
            f"| {result.unknown} ({share:.1f} %) |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
