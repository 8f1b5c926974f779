"""Transducer search: batched equals alone, chunk by chunk equals one shot, and modified beam
search against a brute-force sum over every path."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from wenet_lite.model.transducer import TransducerHead
from wenet_lite.search.transducer_search import (
    TransducerSearch,
    transducer_beam_search,
    transducer_greedy_search,
)


def _head(V: int = 6, context: int = 2, scale: float = 3.0) -> TransducerHead:
    torch.manual_seed(0)
    head = TransducerHead(8, V, 8, 8, context)
    with torch.no_grad():
        for p in head.parameters():
            p.mul_(scale)  # peaky enough to emit tokens, and several a frame
    return head.eval()


def _enc(B: int = 3, T: int = 20, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, T, 8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("context", [1, 2])
def test_greedy_batched_equals_alone_and_chunks_equal_one_shot(context) -> None:
    head, enc = _head(context=context), _enc()
    lens = torch.tensor([20, 13, 17])
    together = transducer_greedy_search(head, enc, lens)
    assert any(len(h.tokens) > len(set(h.timestamps)) for h in together), "some frame emits twice"
    for b in range(3):
        alone = transducer_greedy_search(head, enc[b : b + 1, : lens[b]], lens[b : b + 1])[0]
        assert alone.tokens == together[b].tokens and alone.timestamps == together[b].timestamps
        assert alone.score == pytest.approx(together[b].score, abs=1e-4)
    search = TransducerSearch(head)
    states = [search.new_state() for _ in range(3)]
    for start in range(0, 20, 4):  # chunks of 4 frames, the streams' lengths cut inside them
        left = [max(0, min(4, n - start)) for n in lens.tolist()]
        search.step(enc[:, start : start + 4], left, states)
    for b in range(3):
        h = states[b].hypotheses()[0]
        assert h.tokens == together[b].tokens and h.timestamps == together[b].timestamps
    # the control: another head gives other tokens (the test can tell)
    other = transducer_greedy_search(_head(context=context, scale=2.0), enc, lens)
    assert [h.tokens for h in other] != [h.tokens for h in together]


def test_max_symbols_bounds_each_frame() -> None:
    head, enc = _head(), _enc()
    lens = torch.tensor([20, 20, 20])
    for n in (1, 2):
        for h in transducer_greedy_search(head, enc, lens, max_symbols=n):
            assert max((h.timestamps.count(t) for t in set(h.timestamps)), default=0) <= n


def test_beam_one_is_greedy_with_one_symbol_a_frame() -> None:
    head, enc = _head(), _enc()
    lens = torch.tensor([20, 11, 16])
    greedy = transducer_greedy_search(head, enc, lens, max_symbols=1)
    beam = transducer_beam_search(head, enc, lens, beam=1)
    assert [h[0].tokens for h in beam] == [h.tokens for h in greedy]


def test_a_wide_beam_finds_the_most_probable_sequence() -> None:
    """With a beam over every path of a short utterance (one symbol a frame), the best
    hypothesis is the token sequence of the highest total probability, by enumeration."""
    head, enc = _head(V=3, scale=1.5), _enc(1, 4, seed=3)
    enc_j = head.joiner.enc_proj(enc[0])
    totals = {}
    with torch.no_grad():
        for choice in itertools.product(range(3), repeat=4):  # per frame: blank or a token
            tokens, logp = (), 0.0
            for t, c in enumerate(choice):
                ctx = ((0, 0) + tokens)[-2:]
                pred = head.joiner.pred_proj(head.predictor(torch.tensor([ctx]))[:, -1])
                lp = head.joiner.out(torch.tanh(enc_j[t] + pred[0])).log_softmax(-1)
                logp += float(lp[c])
                tokens = tokens + (c,) if c else tokens
            totals[tokens] = totals.get(tokens, 0.0) + math.exp(logp)
    best = max(totals, key=totals.get)
    found = transducer_beam_search(head, enc, torch.tensor([4]), beam=81, nbest=3)[0]
    assert tuple(found[0].tokens) == best
    assert found[0].score == pytest.approx(math.log(totals[best]), abs=1e-4)
    assert [tuple(h.tokens) for h in found] == sorted(totals, key=totals.get, reverse=True)[:3]


def test_hotwords_lift_a_phrase_in_the_beam_and_an_unfinished_one_gains_nothing() -> None:
    """A hotword phrase the best hypothesis lacks ends up in the result with a bonus large
    enough; a phrase the audio never completes leaves the result as it was (its partial
    bonus is taken back at the end)."""
    from wenet_lite.search.context import ContextGraph, Phrase

    head, enc = _head(V=3, scale=1.5), _enc(1, 4, seed=3)
    lens = torch.tensor([4])
    plain = [tuple(h.tokens) for h in transducer_beam_search(head, enc, lens, 81, nbest=5)[0]]
    phrase = next(p for p in plain if len(p) == 3 and not _contains(plain[0], p))

    def best(graph: ContextGraph) -> tuple:
        return tuple(transducer_beam_search(head, enc, lens, 81, context=graph)[0][0].tokens)

    lifted = best(ContextGraph([Phrase("lifted", phrase, 5.0)]))
    assert lifted != plain[0] and _contains(lifted, phrase)
    assert best(ContextGraph([Phrase("never", (1, 2, 1, 2, 1), 5.0)])) == plain[0]


def _contains(tokens: tuple, phrase: tuple) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))
