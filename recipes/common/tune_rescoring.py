#!/usr/bin/env python3
"""Choose attention rescoring's weights on a dev set: one n-best pass, every weight pair.

Usage:
    python recipes/common/tune_rescoring.py --model exp/synthetic/avg_5.pt \
        --data data/synthetic/dev-clean \
        [--beam 20] [--token-min-logp -5] [--chunk-size 16] \
        [--ctc-weights 0.1 0.3 0.5 1.0] [--reverse-weights 0.0 0.3 0.5]

Decodes the set once (the encoder, the prefix beam's n-best, and each hypothesis' left-to-right
and right-to-left decoder scores), then scores every (ctc weight, reverse weight) pair from
those numbers, which is what `decode --mode attention_rescoring --ctc-weight W
--reverse-weight R` would give for each. Prints a table of WER per pair, the prefix beam alone
and its n-best's oracle WER (what a perfect rescorer would reach), and the best pair.
--chunk-size decodes chunk-masked (the streaming encoder output).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from tqdm import tqdm

from wenet_lite.data.manifest import cut_samples, cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.evaluation.wer import sum_counts, word_errors
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import load_model
from wenet_lite.search.ctc_search import ctc_prefix_beam_search

Candidate = Tuple[str, float, float, float]  # text, search score, l2r score, r2l score


@torch.no_grad()
def candidates(args: argparse.Namespace) -> List[Tuple[str, List[Candidate]]]:
    """Per utterance: its reference and the rescoring candidates with their three scores."""
    model, tokenizer, cfg = load_model(args.model)
    if model.decoder is None:
        raise SystemExit(f"error: {args.model} has no attention decoder")
    rate = cfg.features.sample_rate
    out: List[Tuple[str, List[Candidate]]] = []
    for cut in tqdm(list(load_cuts(args.data)), desc="n-best", unit="utt"):
        feats = compute_fbank(cut_samples(cut, rate), rate, cfg.features)
        enc, lens = model.encoder(feats[None], torch.tensor([feats.size(0)]), args.chunk_size, -1)
        nbest = ctc_prefix_beam_search(
            model.ctc(enc)[0], args.beam, args.beam, token_min_logp=args.token_min_logp
        )
        spoken = [h for h in nbest if h.num_tokens] if nbest[0].num_tokens else nbest[:1]
        ref = normalize_text(cut_text(cut))
        if not spoken[0].num_tokens:
            out.append((ref, [("", spoken[0].score, 0.0, 0.0)]))
            continue
        width = max(h.num_tokens for h in spoken)
        hyps = torch.zeros(len(spoken), width, dtype=torch.long)
        for i, h in enumerate(spoken):
            hyps[i, : h.num_tokens] = torch.tensor(h.tokens)
        hyp_lens = torch.tensor([h.num_tokens for h in spoken])
        memory = enc.expand(len(spoken), -1, -1)
        memory_lens = lens.expand(len(spoken))
        l2r = model.decoder.score(memory, memory_lens, hyps, hyp_lens, 0.0).tolist()
        r2l = model.decoder.score(memory, memory_lens, hyps, hyp_lens, 1.0).tolist()
        texts = [tokenizer.decode(h.tokens) for h in spoken]
        out.append((ref, list(zip(texts, [h.score for h in spoken], l2r, r2l))))
    return out


def wer(utts: List[Tuple[str, List[Candidate]]], ctc: Optional[float], reverse: float) -> float:
    """WER % of the pair's choices (``ctc`` None: the prefix beam's best)."""

    def total(c: Candidate) -> float:
        return (1 - reverse) * c[2] + reverse * c[3] + (ctc or 0.0) * c[1]

    picks = [cands[0] if ctc is None else max(cands, key=total) for _, cands in utts]
    counts = sum_counts(word_errors(ref, pick[0]) for (ref, _), pick in zip(utts, picks))
    return 100 * counts.rate


def main(argv: Optional[List[str]] = None) -> Dict[str, float]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True, help="a prepared dev part")
    p.add_argument("--beam", type=int, default=20)
    p.add_argument("--token-min-logp", type=float, default=-5.0)
    p.add_argument("--chunk-size", type=int, default=0, help="0: full context")
    p.add_argument("--ctc-weights", type=float, nargs="+", default=[0.1, 0.3, 0.5, 1.0])
    p.add_argument("--reverse-weights", type=float, nargs="+", default=[0.0, 0.3, 0.5])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    utts = candidates(args)
    results = {"prefix beam": wer(utts, None, 0.0)}
    oracle = sum_counts(
        min((word_errors(ref, c[0]) for c in cands), key=lambda e: e.errors) for ref, cands in utts
    )
    print(f"prefix beam {args.beam} alone: WER {results['prefix beam']:.2f} %; its n-best's "
          f"oracle (the best candidate of each utterance): {100 * oracle.rate:.2f} %")  # fmt: skip
    print("| ctc weight | " + " | ".join(f"reverse {r}" for r in args.reverse_weights) + " |")
    print("|---|" + "---|" * len(args.reverse_weights))
    for c in args.ctc_weights:
        row = []
        for r in args.reverse_weights:
            results[f"{c}/{r}"] = wer(utts, c, r)
            row.append(f"{results[f'{c}/{r}']:.2f}")
        print(f"| {c} | " + " | ".join(row) + " |")
    best = min((k for k in results if "/" in k), key=lambda k: results[k])
    print(f"best: ctc weight / reverse weight {best}: WER {results[best]:.2f} %")
    return results


if __name__ == "__main__":
    main()
