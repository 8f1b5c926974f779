"""CTC head: a linear projection to the vocabulary and log-softmax (id 0 is the blank).

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.model.linear import Linear

__all__ = ["CTCHead", "ctc_loss_sum"]


def ctc_loss_sum(
    log_probs: torch.Tensor, lens: torch.Tensor, targets: torch.Tensor, target_lens: torch.Tensor
) -> torch.Tensor:
    """CTC loss summed over the batch: the one loss of training and validation.

    Args: log_probs (B, T, V), lens (B,), targets (B, U) padded, target_lens (B,).
    Alignments that cannot exist (too few frames) count 0 rather than inf.
    """
    # cuDNN/CPU CTC want (T, B, V) and float32 log-probs even under autocast.
    x = log_probs.float().transpose(0, 1)  # (T, B, V)
    if x.is_cuda and torch.are_deterministic_algorithms_enabled():
        # CUDA's CTC backward adds into the gradient with atomics, in no fixed order; the CPU's
        # is deterministic. The gradient flows back to the device through the copy.
        loss = F.ctc_loss(
            x.cpu(), targets.cpu(), lens.cpu(), target_lens.cpu(), blank=0, reduction="sum",
            zero_infinity=True,
        )  # fmt: skip
        return loss.to(log_probs.device)
    return F.ctc_loss(x, targets, lens, target_lens, blank=0, reduction="sum", zero_infinity=True)


class CTCHead(nn.Module):
    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = Linear(d_model, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x (B, T, D). Returns: log-probabilities (B, T, V)."""
        return F.log_softmax(self.proj(x), dim=-1)

    def loss(
        self,
        x: torch.Tensor,
        lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
    ) -> torch.Tensor:
        """CTC loss summed over the batch and divided by the batch size.

        Args: x (B, T, D), lens (B,), targets (B, U) padded, target_lens (B,).
        """
        return ctc_loss_sum(self.forward(x), lens, targets, target_lens) / x.size(0)
