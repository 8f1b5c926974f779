"""The transducer head beside CTC on the same encoder: a stateless predictor, a joiner, and the
simple projections of the pruned loss (rnnt_loss.py).

- **Predictor** (icefall's "stateless" decoder): the embeddings of the last ``context`` tokens
  (blank, id 0, before the first: a zero vector) mixed by a depthwise Conv1d and a ReLU. Its
  only state is those token ids, so a stream carries ``context`` integers, not an LSTM state.
- **Joiner**: ``out(tanh(enc_proj(frame) + pred_proj(prediction)))``, log-softmax over the
  vocabulary with id 0 the blank (CTC's blank too).
- **Simple projections** ``simple_am`` and ``simple_lm``: the joiner used to prune the lattice
  (their sum's log-softmax; see rnnt_loss.py).

Shapes: the legend in ``wenet_lite``; U+1 predictor positions (after the blank and each
token), S the window of a frame's symbol positions in the pruned loss, J the joiner's width.
"""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.model.linear import Linear
from wenet_lite.model.rnnt_loss import transducer_losses

__all__ = ["Joiner", "Predictor", "TransducerHead"]


class Predictor(nn.Module):
    """The last ``context`` tokens -> a (D',) prediction."""

    def __init__(self, vocab_size: int, dim: int, context: int = 2) -> None:
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)  # the blank: zeros
        self.conv = nn.Conv1d(dim, dim, context, groups=dim, bias=False) if context > 1 else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Args: ids (B, N + context - 1): N windows of ``context`` ids, oldest first.
        Returns: (B, N, D') the prediction after each window's last token."""
        x = self.embed(ids)  # (B, N + context - 1, D')
        if self.conv is not None:
            x = self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, N, D')
        return F.relu(x)

    def after_each(self, targets: torch.Tensor) -> torch.Tensor:
        """Args: targets (B, U) (padding: any id). Returns: (B, U+1, D') the prediction after
        the start (blanks) and after each token."""
        start = targets.new_zeros(targets.size(0), self.context)
        return self.forward(torch.cat([start, targets], dim=1))


class Joiner(nn.Module):
    def __init__(self, enc_dim: int, pred_dim: int, joiner_dim: int, vocab_size: int) -> None:
        super().__init__()
        self.enc_proj = Linear(enc_dim, joiner_dim)
        self.pred_proj = Linear(pred_dim, joiner_dim)
        self.out = Linear(joiner_dim, vocab_size)

    def forward(self, enc: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """Logits of frames ``enc`` (..., D) and predictions ``pred`` (..., D'), broadcast."""
        return self.joined(self.enc_proj(enc), self.pred_proj(pred))

    def joined(self, enc_j: torch.Tensor, pred_j: torch.Tensor) -> torch.Tensor:
        """Logits of projected frames (..., J) and projected predictions (..., J)."""
        return self.out(torch.tanh(enc_j + pred_j))


class TransducerHead(nn.Module):
    """Predictor, joiner and the simple projections; :meth:`losses` trains them."""

    def __init__(self, enc_dim: int, vocab_size: int, pred_dim: int, joiner_dim: int,
                 context: int = 2) -> None:  # fmt: skip
        super().__init__()
        self.predictor = Predictor(vocab_size, pred_dim, context)
        self.joiner = Joiner(enc_dim, pred_dim, joiner_dim, vocab_size)
        self.simple_am = Linear(enc_dim, vocab_size)
        self.simple_lm = Linear(pred_dim, vocab_size)

    def losses(
        self,
        enc: torch.Tensor,
        frames: torch.Tensor,
        targets: torch.Tensor,
        tokens: torch.Tensor,
        prune_range: int,
        delay_penalty: float = 0.0,
        smoothing: Tuple[float, float] = (0.0, 0.0),
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The simple and the pruned loss, each summed over the batch.

        Args: enc (B, T, D), frames (B,), targets (B, U), tokens (B,); ``smoothing`` the
        simple loss's (lm_scale, am_scale) (``rnnt_loss.simple_lattice``)."""
        pred = self.predictor.after_each(targets)  # (B, U+1, D')
        enc_j = self.joiner.enc_proj(enc)  # (B, T, J), once

        def joint(pred_g: torch.Tensor) -> torch.Tensor:  # (B, T, S, D') -> (B, T, S, V)
            return self.joiner.joined(enc_j.unsqueeze(2), self.joiner.pred_proj(pred_g))

        return transducer_losses(
            enc, frames, pred, targets, tokens, self.simple_am, self.simple_lm, joint,
            prune_range, delay_penalty, smoothing,
        )  # fmt: skip
