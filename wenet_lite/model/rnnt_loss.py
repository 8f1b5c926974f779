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

from typing import Callable, Tuple

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
    """log P(y | x) of each utterance: the sum over its lattice's paths.

    Args: px (B, T, U) emission log-probs (node (t, u) -> (t, u+1)), py (B, T, U+1) blank
    log-probs (node (t, u) -> (t+1, u)), frames (B,) valid T of each, tokens (B,) valid U.
    Returns: (B,) log-probabilities (about NEG where no path fits).
    """
    B, T, U1 = py.shape
    neg = torch.full((), NEG, dtype=py.dtype, device=py.device)
    t = torch.arange(T, device=py.device)
    # arcs into node (t, u): a blank from (t-1, u), an emission from (t, u-1)
    into_by_blank = torch.cat([neg.expand(B, 1, U1), py[:, :-1]], dim=1)  # (B, T, U+1)
    into_by_symbol = torch.cat([neg.expand(B, T, 1), px.to(py.dtype)], dim=2)  # (B, T, U+1)
    alpha = torch.where(t == 0, torch.zeros_like(neg), neg).expand(B, T)  # diagonal 0
    last = frames - 1 + tokens  # (B,) the diagonal of each utterance's final node
    found = alpha[:, 0]
    for d in range(1, T + U1 - 1):  # diagonal d: the nodes (t, d - t), alpha indexed by t
        u = d - t
        index = u.clamp(0, U1 - 1).view(1, T, 1).expand(B, T, 1)
        from_before = torch.cat([neg.expand(B, 1), alpha[:, :-1]], dim=1)  # alpha[t-1]
        alpha = _logaddexp(from_before + into_by_blank.gather(2, index).squeeze(2),
                           alpha + into_by_symbol.gather(2, index).squeeze(2))  # fmt: skip
        alpha = torch.where((u >= 0) & (u < U1), alpha, neg)
        here = alpha.gather(1, (frames - 1).clamp_min(0).view(B, 1)).squeeze(1)
        found = torch.where(last == d, here, found)
    final_py = py.gather(1, (frames - 1).view(B, 1, 1).expand(B, 1, U1)).squeeze(1)  # (B, U+1)
    return found + final_py.gather(1, tokens.view(B, 1)).squeeze(1)


def simple_lattice(
    am: torch.Tensor, lm: torch.Tensor, targets: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The lattice of the simple joiner ``log_softmax(am[t] + lm[u])``.

    Args: am (B, T, V), lm (B, U+1, V) projections, targets (B, U) (padding: any id).
    Returns: px (B, T, U), py (B, T, U+1).
    """
    am, lm = am.float(), lm.float()
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
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The simple and the pruned loss, each summed over the batch.

    Args: enc (B, T, D) encoder frames, frames (B,), pred (B, U+1, D') the predictor's
    outputs (after a blank and each token), targets (B, U), tokens (B,); ``simple_am`` and
    ``simple_lm`` the simple joiner's projections (to V), ``joint(pred_g)`` the full joiner of
    each frame with its window's predictor outputs (B, T, S, D'), giving (B, T, S, V).
    ``delay_penalty`` (k2's): emitting at a late frame costs more, pulling the emissions
    earlier (streaming latency). An utterance no path fits counts 0.
    """
    px_s, py_s = simple_lattice(simple_am(enc), simple_lm(pred), targets)
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
