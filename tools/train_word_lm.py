#!/usr/bin/env python3
"""Train the word n-gram LM that `wenet-lite decode --lm` fuses into prefix beam search.

Usage:
    python tools/train_word_lm.py --data data/synthetic/train-clean-100 --out exp/x/lm.json
        [--data more/parts ...] [--text extra.txt ...] [--order 2] [--discount 0.75]

Reads the transcripts of prepared parts (cuts.jsonl.gz) and/or text files (one sentence a
line, gzipped if the name ends in .gz, e.g. librispeech-lm-norm.txt.gz), normalises them as
the tokenizer does, and writes the counts as JSON (see wenet_lite/decode/lm.py), or, when
--out ends in .arpa or .arpa.gz, the same model as an ARPA back-off LM that other toolkits read
(`decode --lm` takes either). Counting happens in memory: fine for millions of words; for
LibriSpeech's 800 M-word LM text use KenLM's lmplz, or openslr.org/11's ARPA files. Train it on
training text only: test transcripts in the LM would make the WER meaningless (the synthetic
corpus's librispeech-lm-norm.txt.gz holds no dev or test sentence).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import List, Optional

from wenet_lite.decode.lm import WordLM, read_sentences


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", type=Path, action="append", default=[], help="prepared part")
    p.add_argument("--text", type=Path, action="append", default=[], help="text file")
    p.add_argument("--out", type=Path, required=True, help="lm.json, or lm.arpa[.gz]")
    p.add_argument("--order", type=int, choices=[2, 3], default=2, help="bigram or trigram")
    p.add_argument("--discount", type=float, default=0.75)
    args = p.parse_args(argv)
    if not args.data and not args.text:
        p.error("give --data and/or --text")
    try:
        lm = WordLM.train(read_sentences(args.data, args.text), args.discount, args.order)
    except FileNotFoundError as e:
        p.error(str(e))
    if args.out.name.lower().endswith((".arpa", ".arpa.gz")):
        lm.save_arpa(args.out)
    else:
        lm.save(args.out)
    counts = Counter(len(h.split()) + 1 for h, ws in lm.ngrams.items() for _ in ws)
    grams = ", ".join(f"{counts[n]} {('', '', 'bi', 'tri')[n]}grams" for n in sorted(counts))
    print(f"{args.out}: {len(lm.unigrams) - 1} words, {grams}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
