"""The transducer losses: the RNN-T lattice, its "simple" bound and the pruned loss.

An utterance of T frames and U tokens has a lattice of (T, U+1) nodes: at node (t, u) the
joiner either emits token y[u] (``px[t, u]``, to node (t, u+1)) or a blank (``py[t, u]``, to
node (t+1, u)); the loss is minus the log of the sum over paths from (0, 0) through a final
blank at (T-1, U) (Graves 2012). :func:`lattice_log_prob` sums it with one vectorised step per
anti-diagonal of the lattice (T+U steps), in the autograd graph.

The full joiner on every node costs B x T x (U+1) x V memory: 3 to 4 GB for 32 utterances of
10 s and 500 pieces. The pruned loss (Kuang et al. 2022, k2's algorithm) avoids it:

1. a "simple" joiner, the sum of a linear projection of the encoder frame and one of the
   predictor output, has log-probabilities whose normaliser is one matrix product: its
   lattice (:func:`simple_lattice`) costs B x T x (U+1), and its loss is a training loss too;
2. the gradient of that loss with respect to its arcs is each arc's posterior occupancy: for
   each frame the window of S consecutive symbol positions holding the most of it is kept
   (:func:`prune_ranges`: starting at 0, ending at U, windows never moving back, consecutive
   windows overlapping so that a path exists);
3. the full joiner runs on those B x T x S nodes only (S ~ 5), and the lattice outside them is
   impossible (:func:`pruned_lattice`).

When S covers every position (S >= U+1) the pruned loss is the full loss (tested against a
plain reference). Shapes: the legend in ``wenet_lite``; S is the window of symbol positions
a frame keeps, J the joiner's width.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

__all__ = [
    "NEG",
    "lattice_log_prob",
    "prune_ranges",
    "pruned_lattice",
    "simple_lattice",
    "transducer_losses",
]

NEG = -1e30
"""log-probability of an impossible arc: finite, so that sums of impossible paths keep finite
gradients (0, as their weight is exp(-1e30))"""


def _logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = torch.maximum(a, b)
    return m + torch.log(torch.exp(a - m) + torch.exp(b - m))


def lattice_log_prob(
    px: torch.Tensor, py: torch.Tensor, frames: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """log P(y | x) of each utterance: the sum over its lattice's paths, with gradients.

    Args: px (B, T, U) emission log-probs (node (t, u) -> (t, u+1)), py (B, T, U+1) blank
    log-probs (node (t, u) -> (t+1, u)), frames (B,) valid T of each, tokens (B,) valid U.
    Returns: (B,) log-probabilities (about NEG where no path fits).

    The forward sum (alpha) and, for the gradients, the backward sum (beta) each take one
    vectorised step per anti-diagonal; an arc's gradient is its posterior occupancy,
    ``exp(alpha + arc + beta - log P)`` (no autograd graph of the T+U steps is kept).
    """
    return _Lattice.apply(px, py, frames, tokens)


def _diagonals(T: int, U1: int, device: torch.device):
    """For each anti-diagonal d: the t and u of its nodes inside the (T, U+1) lattice (a slice
    of one arange: no mask whose size the host would wait for on a GPU)."""
    t = torch.arange(T, device=device)
    for d in range(T + U1 - 1):
        ts = t[max(0, d - U1 + 1) : min(d, T - 1) + 1]
        yield d, ts, d - ts


class _Lattice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, px, py, frames, tokens):  # type: ignore[override]
        B, T, U1 = py.shape
        neg = torch.full((), NEG, dtype=py.dtype, device=py.device)
        into_by_symbol = torch.cat([neg.expand(B, T, 1), px.to(py.dtype)], dim=2)  # (B,T,U+1)
        alpha = torch.full((B, T, U1), NEG, dtype=py.dtype, device=py.device)
        alpha[:, 0, 0] = 0.0
        for d, ts, us in _diagonals(T, U1, py.device):
            if d == 0:
                continue
            prev_t = (ts - 1).clamp_min(0)
            from_blank = torch.where(ts > 0, alpha[:, prev_t, us] + py[:, prev_t, us], neg)
            prev_u = (us - 1).clamp_min(0)
            from_symbol = torch.where(us > 0, alpha[:, ts, prev_u] + into_by_symbol[:, ts, us], neg)
            alpha[:, ts, us] = _logaddexp(from_blank, from_symbol)
        b = torch.arange(B, device=py.device)
        last_t = (frames - 1).clamp_min(0)
        log_prob = alpha[b, last_t, tokens] + py[b, last_t, tokens]
        ctx.save_for_backward(px, py, frames, tokens, alpha, log_prob)
        return log_prob

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        px, py, frames, tokens, alpha, log_prob = ctx.saved_tensors
        B, T, U1 = py.shape
        neg = torch.full((), NEG, dtype=py.dtype, device=py.device)
        t = torch.arange(T, device=py.device).view(1, T, 1)
        u = torch.arange(U1, device=py.device).view(1, 1, U1)
        inside = (t < frames.view(B, 1, 1)) & (u <= tokens.view(B, 1, 1))  # (B, T, U+1)
        end = (t == frames.view(B, 1, 1) - 1) & (u == tokens.view(B, 1, 1))
        px_ext = torch.cat([px.to(py.dtype), neg.expand(B, T, 1)], dim=2)  # none out of row U
        # beta after each arc: past a blank, beta[t+1, u] (0 past the final blank, log 1)
        beta = torch.full((B, T + 1, U1 + 1), NEG, dtype=py.dtype, device=py.device)
        for _, ts, us in reversed(list(_diagonals(T, U1, py.device))):
            after_blank = torch.where(end[:, ts, us], torch.zeros_like(neg), beta[:, ts + 1, us])
            value = _logaddexp(py[:, ts, us] + after_blank, px_ext[:, ts, us] + beta[:, ts, us + 1])
            beta[:, ts, us] = torch.where(inside[:, ts, us], value, neg)
        fits = (log_prob > NEG / 2).view(B, 1, 1)
        scale = torch.where(fits, grad.view(B, 1, 1), torch.zeros_like(neg))
        lp = torch.where(fits, log_prob.view(B, 1, 1), torch.zeros_like(neg))
        after_blank = torch.where(end, torch.zeros_like(neg), beta[:, 1:, :U1])
        grad_py = (
            torch.where(inside & fits, (alpha + py + after_blank - lp).clamp_max(0.0).exp(), 0.0)
            * scale
        )
        occupancy_x = alpha[:, :, :-1] + px.to(py.dtype) + beta[:, :T, 1:U1] - lp
        grad_px = (
            torch.where(inside[:, :, :-1] & fits, occupancy_x.clamp_max(0.0).exp(), 0.0) * scale
        )
        return grad_px.to(px.dtype), grad_py, None, None


def simple_lattice(
    am: torch.Tensor, lm: torch.Tensor, targets: torch.Tensor,
    lm_scale: float = 0.0, am_scale: float = 0.0, tokens: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The lattice of the simple joiner ``log_softmax(am[t] + lm[u])``, smoothed (k2's
    ``rnnt_loss_smoothed``) when ``lm_scale`` or ``am_scale`` > 0: each arc's log-probability
    is then ``(1 - lm_scale - am_scale)`` times the joint one, plus ``lm_scale`` times the
    predictor's alone (``log_softmax(lm[u])``: it learns the token sequence from the first
    step, whatever the encoder says), plus ``am_scale`` times the encoder's against the
    tokens' mean frequency (``log_softmax(am[t] + log unigram)``).

    Args: am (B, T, V), lm (B, U+1, V) projections, targets (B, U) (padding: any id), tokens
    (B,) each utterance's U (the unigram is the mean of its valid positions; None: all).
    Returns: px (B, T, U), py (B, T, U+1).
    """
    px, py = _joint_lattice(am.float(), lm.float(), targets)
    if not lm_scale and not am_scale:
        return px, py
    am, lm = am.float(), lm.float()
    lm_logp = lm.log_softmax(dim=2)  # (B, U+1, V): the predictor alone
    U = targets.size(1)
    px_lm = lm_logp[:, :U].gather(2, targets.unsqueeze(2)).squeeze(2).unsqueeze(1)  # (B, 1, U)
    py_lm = lm_logp[:, :, 0].unsqueeze(1)  # (B, 1, U+1)
    valid = torch.ones(lm.shape[:2], dtype=torch.bool, device=lm.device)
    if tokens is not None:  # positions 0..U_b of each utterance
        valid = torch.arange(U + 1, device=lm.device).view(1, -1) <= tokens.view(-1, 1)
    probs = lm_logp.exp() * valid.unsqueeze(2)
    unigram = (probs.sum(dim=(0, 1)) / valid.sum()).clamp_min(1e-30).log()  # (V,)
    am_logp = (am + unigram).log_softmax(dim=2) - unigram  # (B, T, V): log p(v) - log u(v)
    am_y = am_logp.gather(2, targets.unsqueeze(1).expand(-1, am.size(1), -1))  # (B, T, U)
    px_am = am_y + unigram[targets].unsqueeze(1)
    py_am = (am_logp[:, :, :1] + unigram[0]).expand_as(py)
    joint = 1.0 - lm_scale - am_scale
    px = joint * px + lm_scale * px_lm + am_scale * px_am
    py = joint * py + lm_scale * py_lm + am_scale * py_am
    return px, py


def _joint_lattice(
    am: torch.Tensor, lm: torch.Tensor, targets: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """px (B, T, U), py (B, T, U+1) of ``log_softmax(am[t] + lm[u])`` (float32 inputs), its
    normaliser one matrix product."""
    am_max = am.max(dim=2, keepdim=True).values.detach()  # (B, T, 1)
    lm_max = lm.max(dim=2, keepdim=True).values.detach()  # (B, U+1, 1)
    norm = torch.bmm((am - am_max).exp(), (lm - lm_max).exp().transpose(1, 2))  # (B, T, U+1)
    norm = norm.clamp_min(1e-30).log() + am_max + lm_max.transpose(1, 2)
    U = targets.size(1)
    am_y = am.gather(2, targets.unsqueeze(1).expand(-1, am.size(1), -1))  # (B, T, U)
    lm_y = lm[:, :U].gather(2, targets.unsqueeze(2)).squeeze(2)  # (B, U)
    px = am_y + lm_y.unsqueeze(1) - norm[:, :, :U]
    py = am[:, :, :1] + lm[:, :, 0].unsqueeze(1) - norm  # (B, T, U+1)
    return px, py


@torch.no_grad()
def prune_ranges(
    px_grad: torch.Tensor, py_grad: torch.Tensor, frames: torch.Tensor, tokens: torch.Tensor,
    s_range: int,
) -> torch.Tensor:  # fmt: skip
    """Each frame's first symbol position: (B, T) ``starts``, the window being
    ``starts[t] .. starts[t] + s_range - 1``, chosen where the simple lattice's occupancy
    (``px_grad`` (B, T, U) and ``py_grad`` (B, T, U+1), the gradients of its log-probability)
    is largest, then made a window sequence a path can cross: 0 at the first frame, U+1-S at
    each utterance's last (the window ends at U), never moving back, moving at most S-1."""
    B, T, U1 = py_grad.shape
    S = s_range
    occupancy = py_grad.clone()
    occupancy[:, :, : U1 - 1] += px_grad
    if S >= U1:
        return torch.zeros(B, T, dtype=torch.long, device=py_grad.device)
    sums = occupancy.cumsum(2)
    sums = torch.cat([torch.zeros_like(sums[:, :, :1]), sums], dim=2)  # (B, T, U+2)
    windows = sums[:, :, S:] - sums[:, :, :-S]  # (B, T, U+2-S): window starting at 0..U+1-S
    highest = (tokens + 1 - S).clamp_min(0)  # (B,) the last start that keeps the window in 0..U
    starts_at = torch.arange(windows.size(2), device=py_grad.device)
    windows = windows.masked_fill(starts_at.view(1, 1, -1) > highest.view(B, 1, 1), -1.0)
    starts = windows.argmax(2)  # (B, T)
    t = torch.arange(T, device=py_grad.device)
    end = (frames - 1).view(B, 1)
    starts = torch.where(t.view(1, T) >= end, highest.view(B, 1), starts)
    starts[:, 0] = 0
    for i in range(1, T):  # never back, at most S-1 forward
        starts[:, i] = torch.minimum(torch.maximum(starts[:, i], starts[:, i - 1]),
                                     starts[:, i - 1] + S - 1)  # fmt: skip
    for i in range(T - 2, -1, -1):  # reach the last window from this one
        starts[:, i] = torch.maximum(starts[:, i], starts[:, i + 1] - (S - 1))
    return torch.minimum(starts, highest.view(B, 1))


def pruned_lattice(
    logits: torch.Tensor, starts: torch.Tensor, targets: torch.Tensor, U: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The full joiner's lattice on the kept nodes, NEG elsewhere.

    Args: logits (B, T, S, V) of the nodes (t, starts[t] + k), starts (B, T), targets (B, U).
    Returns: px (B, T, U), py (B, T, U+1).
    """
    B, T, S, _ = logits.shape
    logp = logits.float().log_softmax(dim=3)
    u = starts.unsqueeze(2) + torch.arange(S, device=logits.device)  # (B, T, S)
    padded = torch.cat([targets, targets.new_zeros(B, S + 1)], dim=1)  # ids past U: never used
    symbols = padded.gather(1, u.view(B, -1)).view(B, T, S)
    px_kept = logp.gather(3, symbols.unsqueeze(3)).squeeze(3)  # (B, T, S)
    py_kept = logp[..., 0]  # (B, T, S)
    py = torch.full((B, T, U + 1 + S), NEG, dtype=logp.dtype, device=logits.device)
    py = py.scatter(2, u, py_kept)[:, :, : U + 1]
    px = torch.full((B, T, U + 1 + S), NEG, dtype=logp.dtype, device=logits.device)
    px = px.scatter(2, u, px_kept)[:, :, :U]
    return px, py


def transducer_losses(
    enc: torch.Tensor,
    frames: torch.Tensor,
    pred: torch.Tensor,
    targets: torch.Tensor,
    tokens: torch.Tensor,
    simple_am: Callable[[torch.Tensor], torch.Tensor],
    simple_lm: Callable[[torch.Tensor], torch.Tensor],
    joint: Callable[[torch.Tensor], torch.Tensor],
    prune_range: int,
    delay_penalty: float = 0.0,
    smoothing: Tuple[float, float] = (0.0, 0.0),
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The simple and the pruned loss, each summed over the batch.

    Args: enc (B, T, D) encoder frames, frames (B,), pred (B, U+1, D') the predictor's
    outputs (after a blank and each token), targets (B, U), tokens (B,); ``simple_am`` and
    ``simple_lm`` the simple joiner's projections (to V), ``joint(pred_g)`` the full joiner of
    each frame with its window's predictor outputs (B, T, S, D'), giving (B, T, S, V).
    ``delay_penalty`` (k2's): emitting at a late frame costs more, pulling the emissions
    earlier (streaming latency). ``smoothing``: the simple loss's (lm_scale, am_scale)
    (:func:`simple_lattice`); its occupancy chooses the pruned windows. An utterance no path
    fits counts 0.
    """
    px_s, py_s = simple_lattice(simple_am(enc), simple_lm(pred), targets, *smoothing, tokens)
    if delay_penalty:
        px_s = px_s + _delay(px_s, frames, delay_penalty)
    simple = lattice_log_prob(px_s, py_s, frames, tokens)
    starts = prune_ranges(*_occupancy(simple, px_s, py_s, frames, tokens), frames, tokens,
                          prune_range)  # fmt: skip
    S = prune_range
    u = starts.unsqueeze(2) + torch.arange(S, device=enc.device)  # (B, T, S)
    u = u.clamp_max(pred.size(1) - 1)
    B, T = starts.shape
    pred_g = pred.gather(1, u.view(B, T * S, 1).expand(-1, -1, pred.size(2)))
    logits = joint(pred_g.view(B, T, S, -1))  # (B, T, S, V)
    px, py = pruned_lattice(logits, starts, targets, targets.size(1))
    if delay_penalty:
        px = px + _delay(px, frames, delay_penalty)
    pruned = lattice_log_prob(px, py, frames, tokens)
    fits = (simple > NEG / 2) & (pruned > NEG / 2)
    zero = torch.zeros((), dtype=simple.dtype, device=enc.device)
    return -torch.where(fits, simple, zero).sum(), -torch.where(fits, pruned, zero).sum()


def _occupancy(
    log_prob: torch.Tensor, px: torch.Tensor, py: torch.Tensor, frames: torch.Tensor,
    tokens: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The arcs' posterior occupancy: the gradients of the lattice's log-probability (through
    the graph already built when there is one; else the sum again, on detached copies, as in
    validation under ``no_grad``)."""
    if log_prob.requires_grad:
        gx, gy = torch.autograd.grad(log_prob.sum(), (px, py), retain_graph=True)
        return gx, gy
    with torch.enable_grad():
        x, y = px.detach().requires_grad_(), py.detach().requires_grad_()
        gx, gy = torch.autograd.grad(lattice_log_prob(x, y, frames, tokens).sum(), (x, y))
    return gx, gy


def _delay(px: torch.Tensor, frames: torch.Tensor, penalty: float) -> torch.Tensor:
    """(B, T, 1): ``penalty * ((T_b - 1) / 2 - t)``, added to emissions (k2's delay penalty)."""
    t = torch.arange(px.size(1), device=px.device, dtype=px.dtype).view(1, -1, 1)
    return penalty * ((frames.to(px.dtype).view(-1, 1, 1) - 1) / 2 - t)
