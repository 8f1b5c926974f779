#!/usr/bin/env python3
"""Write the hotword lists the recipe measures biasing with.

Usage:
    python recipes/synthetic/local/hotword_lists.py --train-data data/synthetic/train-clean-100 \
        --test data/synthetic/test-clean [--lm-text corpus/librispeech-lm-norm.txt.gz] \
        --out-dir exp/synthetic/hotwords [--seed 0]

Writes OUT/unseen.txt: every word of the test transcripts that never occurs in the training
transcripts (the words a model trained on them cannot have learnt to spell), one a line; and
OUT/unrelated.txt: as many words that do not occur in the test transcripts, drawn (seeded) from
the words of the LM text (or, without one, of the training text) that the training transcripts
do not have either, so both lists are rare words and only their relevance differs. When the
LM text has too few such words (a large corpus whose training text covers its vocabulary), the
rest are the rarest training words outside the test, and the tool says how many. Prints the
two counts.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path
from typing import List, Optional

from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.fileio import open_text, write_text_atomic


def _words(parts: List[Path]) -> Counter:
    """How often each word occurs in the transcripts of ``parts``."""
    return Counter(
        w for part in parts for c in load_cuts(part) for w in normalize_text(cut_text(c)).split()
    )


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--train-data", type=Path, action="append", required=True, help="train part")
    p.add_argument("--test", type=Path, required=True, help="prepared test part")
    p.add_argument("--lm-text", type=Path, help="text to draw the unrelated words from")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    train, test = _words(args.train_data), set(_words([args.test]))
    unseen = sorted(test - set(train))
    if args.lm_text is not None:
        with open_text(args.lm_text) as f:
            pool = {w for line in f for w in normalize_text(line).split()}
        candidates = sorted(pool - test - set(train))
    else:
        candidates = sorted(set(train) - test)
    rng = random.Random(args.seed)
    unrelated = rng.sample(candidates, min(len(candidates), len(unseen)))
    short = len(unseen) - len(unrelated)
    if short > 0 and args.lm_text is not None:
        rarest = sorted((w for w in train if w not in test), key=lambda w: (train[w], w))
        unrelated += rarest[:short]
        print(
            f"{args.lm_text}: only {len(candidates)} words outside the training and test "
            f"transcripts; the other {min(short, len(rarest))} unrelated words are the rarest "
            "training words"
        )
    if len(unrelated) < len(unseen):
        raise SystemExit(
            f"error: only {len(unrelated)} words outside {args.test}'s transcripts to draw "
            f"{len(unseen)} unrelated hotwords from"
        )
    unrelated.sort()
    write_text_atomic(args.out_dir / "unseen.txt", "".join(w + "\n" for w in unseen))
    write_text_atomic(args.out_dir / "unrelated.txt", "".join(w + "\n" for w in unrelated))
    print(f"{args.out_dir}/unseen.txt: {len(unseen)} words; unrelated.txt: {len(unrelated)}")


if __name__ == "__main__":
    main()
