"""The transducer losses against a plain reference: the lattice sum, the simple joiner's
lattice, and the pruned loss equal to the full one where its window covers every symbol."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.model.rnnt_loss import (
    lattice_log_prob,
    prune_ranges,
    simple_lattice,
    transducer_losses,
)
from wenet_lite.model.transducer import TransducerHead


def _reference(logits: torch.Tensor, targets: torch.Tensor, T: int, U: int) -> torch.Tensor:
    """-log P(y|x) of one utterance by the textbook recursion, node by node (float64).
    logits (T, U+1, V) of the full joiner."""
    logp = logits.double().log_softmax(-1)
    alpha = [[None] * (U + 1) for _ in range(T)]
    for t in range(T):
        for u in range(U + 1):
            terms = []
            if t == 0 and u == 0:
                terms.append(torch.zeros((), dtype=torch.float64))
            if t > 0:
                terms.append(alpha[t - 1][u] + logp[t - 1, u, 0])
            if u > 0:
                terms.append(alpha[t][u - 1] + logp[t, u - 1, targets[u - 1]])
            alpha[t][u] = torch.logsumexp(torch.stack(terms), 0)
    return -(alpha[T - 1][U] + logp[T - 1, U, 0])


def _full_lattice(logits: torch.Tensor, targets: torch.Tensor):
    """px, py of full logits (B, T, U+1, V)."""
    logp = logits.float().log_softmax(-1)
    U = targets.size(1)
    px = logp[:, :, :U].gather(3, targets.view(targets.size(0), 1, U, 1).expand(
        -1, logp.size(1), -1, 1)).squeeze(3)  # fmt: skip
    return px, logp[..., 0]


def _batch(seed: int = 0, B: int = 3, T: int = 7, U: int = 3, V: int = 6):
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(1, V, (B, U), generator=g)
    frames = torch.tensor([T, T - 2, T - 1][:B])
    tokens = torch.tensor([U, U - 1, U - 2][:B])
    return g, targets, frames, tokens


def test_the_lattice_sum_is_the_textbook_recursion() -> None:
    g, targets, frames, tokens = _batch()
    logits = torch.randn(3, 7, 4, 6, generator=g, requires_grad=True)
    px, py = _full_lattice(logits, targets)
    got = -lattice_log_prob(px, py, frames, tokens)
    for b in range(3):
        want = _reference(logits[b], targets[b], int(frames[b]), int(tokens[b]))
        assert abs(float(got[b].detach()) - float(want.detach())) < 1e-4, b
    # gradients too: one utterance against autograd through the reference
    (gx,) = torch.autograd.grad(got[1], logits)
    (gr,) = torch.autograd.grad(_reference(logits[1], targets[1], 5, 2), logits)
    assert torch.allclose(gx, gr.float(), atol=1e-5)


def test_the_simple_lattice_is_the_log_softmax_of_the_sum() -> None:
    g, targets, frames, tokens = _batch(1)
    am, lm = torch.randn(3, 7, 6, generator=g) * 3, torch.randn(3, 4, 6, generator=g) * 3
    px, py = simple_lattice(am, lm, targets)
    want_x, want_y = _full_lattice(am.unsqueeze(2) + lm.unsqueeze(1), targets)
    assert torch.allclose(px, want_x, atol=1e-4) and torch.allclose(py, want_y, atol=1e-4)


def test_the_smoothed_simple_lattice_mixes_the_three_log_probabilities() -> None:
    """k2's smoothing, against each term computed directly, arc by arc: the joint one, the
    predictor's alone and the encoder's against the mean token frequency of the valid
    positions; the control: scales of 0 give the plain lattice, and they change it."""
    g, targets, frames, tokens = _batch(1)
    am, lm = torch.randn(3, 7, 6, generator=g) * 2, torch.randn(3, 4, 6, generator=g) * 2
    plain = simple_lattice(am, lm, targets)
    for a, b in zip(simple_lattice(am, lm, targets, 0.0, 0.0, tokens), plain):
        assert torch.equal(a, b)
    lm_s, am_s = 0.25, 0.1
    px, py = simple_lattice(am, lm, targets, lm_s, am_s, tokens)
    assert not torch.allclose(px, plain[0], atol=1e-3)
    d_am, d_lm = am.double(), lm.double()
    lm_p = d_lm.softmax(-1)
    valid = [(b, u) for b in range(3) for u in range(int(tokens[b]) + 1)]
    unigram = sum(lm_p[b, u] for b, u in valid) / len(valid)  # (V,)
    B, T, U = px.shape
    for b in range(B):
        for t in range(T):
            joint = (d_am[b, t] + d_lm[b]).log_softmax(-1)  # (U+1, V)
            alone = d_lm[b].log_softmax(-1)
            heard = (d_am[b, t] + unigram.log()).log_softmax(-1)  # (V,)
            for u in range(U + 1):
                for arc, sym, got in (("y", 0, py[b, t, u]),) + (
                    (("x", int(targets[b, u]), px[b, t, u]),) if u < U else ()
                ):  # fmt: skip
                    want = ((1 - lm_s - am_s) * joint[u, sym] + lm_s * alone[u, sym]
                            + am_s * heard[sym])  # fmt: skip
                    assert abs(float(got) - float(want)) < 1e-4, (arc, b, t, u)


def _losses(head: TransducerHead, enc, frames, targets, tokens, s_range: int):
    return head.losses(enc, frames, targets, tokens, s_range)


def _full_loss(head: TransducerHead, enc, frames, targets, tokens) -> torch.Tensor:
    pred = head.predictor.after_each(targets)
    logits = head.joiner(enc.unsqueeze(2), pred.unsqueeze(1))  # (B, T, U+1, V)
    px, py = _full_lattice(logits, targets)
    return -lattice_log_prob(px, py, frames, tokens).sum()


@pytest.mark.parametrize("context", [1, 2])
def test_the_pruned_loss_is_the_full_loss_where_its_window_covers_every_symbol(context) -> None:
    torch.manual_seed(0)
    B, T, U, V, D = 3, 9, 4, 7, 8
    head = TransducerHead(D, V, 6, 5, context)
    g, targets, frames, tokens = _batch(2, B, T, U, V)
    enc = torch.randn(B, T, D, requires_grad=True)
    full = _full_loss(head, enc, frames, targets, tokens)
    want = torch.autograd.grad(full, [enc, *head.joiner.parameters()])
    simple, pruned = _losses(head, enc, frames, targets, tokens, U + 1)
    assert abs(float(pruned.detach()) - float(full.detach())) < 1e-4 * max(
        1.0, float(full.detach())
    )
    got = torch.autograd.grad(pruned, [enc, *head.joiner.parameters()])
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-4)
    assert torch.isfinite(simple) and float(simple) > 0
    # the negative control: a window narrower than the symbols loses paths, so more loss
    _, narrow = _losses(head, enc, frames, targets, tokens, 2)
    assert float(narrow) > float(full) + 1e-3


def test_pruned_windows_form_a_path() -> None:
    g = torch.Generator().manual_seed(3)
    B, T, U, S = 4, 12, 8, 3
    frames = torch.tensor([12, 10, 9, 12])
    tokens = torch.tensor([8, 7, 8, 2])
    starts = prune_ranges(torch.rand(B, T, U, generator=g), torch.rand(B, T, U + 1, generator=g),
                          frames, tokens, S)  # fmt: skip
    for b in range(B):
        s = starts[b, : frames[b]].tolist()
        assert s[0] == 0 and s[-1] == max(0, int(tokens[b]) + 1 - S)
        assert all(0 <= n - p <= S - 1 for p, n in zip(s, s[1:])), s


def test_an_utterance_no_path_fits_counts_zero() -> None:
    torch.manual_seed(1)
    head = TransducerHead(8, 7, 6, 5)
    targets = torch.randint(1, 7, (2, 6))
    enc = torch.randn(2, 3, 8)
    frames, tokens = torch.tensor([3, 3]), torch.tensor([6, 1])
    simple, pruned = head.losses(enc, frames, targets, tokens, 3)  # 6 tokens in 3 frames, S 3
    alone = head.losses(enc[1:], frames[1:], targets[1:], tokens[1:], 3)
    assert torch.isfinite(pruned) and abs(float(pruned) - float(alone[1])) < 1e-4
    assert abs(float(simple) - float(alone[0])) < 1e-4


def test_delay_penalty_moves_the_loss() -> None:
    torch.manual_seed(2)
    head = TransducerHead(8, 7, 6, 5)
    g, targets, frames, tokens = _batch(4, 3, 9, 3, 7)
    enc = torch.randn(3, 9, 8)
    plain = transducer_losses(enc, frames, head.predictor.after_each(targets), targets, tokens,
                              head.simple_am, head.simple_lm, lambda p: head.joiner(
                                  enc.unsqueeze(2), p), 4)  # fmt: skip
    same = head.losses(enc, frames, targets, tokens, 4)
    assert torch.allclose(torch.stack(plain), torch.stack(same), atol=1e-4)
    delayed = head.losses(enc, frames, targets, tokens, 4, delay_penalty=0.5)
    assert abs(float(delayed[1]) - float(same[1])) > 1e-3


def test_the_losses_equal_warprnnt_numba_where_it_is_installed() -> None:
    """NeMo's loss (warprnnt-numba, an optional reference: `pip install warprnnt-numba`) on the
    same full joiner: our lattice sum and the pruned loss with a covering window give its
    per-utterance values and gradients."""
    numba_loss = pytest.importorskip("warprnnt_numba").RNNTLossNumba
    torch.manual_seed(0)
    B, T, U, V, D = 3, 9, 4, 7, 8
    head = TransducerHead(D, V, 6, 5, 2)
    g, targets, frames, tokens = _batch(4, B, T, U, V)
    enc = torch.randn(B, T, D, requires_grad=True)
    pred = head.predictor.after_each(targets)
    logits = head.joiner(enc.unsqueeze(2), pred.unsqueeze(1))  # (B, T, U+1, V)
    theirs = numba_loss(blank=0, reduction="none")(logits, targets.int(), frames.int(),
                                                    tokens.int())  # fmt: skip
    px, py = _full_lattice(logits, targets)
    ours = -lattice_log_prob(px, py, frames, tokens)
    assert torch.allclose(ours, theirs.float(), atol=1e-4), (ours, theirs)
    want = torch.autograd.grad(theirs.sum(), [enc, *head.joiner.parameters()])
    _, pruned = _losses(head, enc, frames, targets, tokens, U + 1)
    assert abs(float(pruned) - float(theirs.sum())) < 1e-4 * float(theirs.sum())
    got = torch.autograd.grad(pruned, [enc, *head.joiner.parameters()])
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-4)
    # the control: a narrow window is not their loss
    _, narrow = _losses(head, enc, frames, targets, tokens, 2)
    assert float(narrow) > float(theirs.sum()) + 1e-3
