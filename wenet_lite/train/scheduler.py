"""Learning-rate schedule: linear warmup to the peak, then inverse-square-root decay (Noam)."""

from __future__ import annotations

import torch

__all__ = ["WarmupLR"]


class WarmupLR(torch.optim.lr_scheduler.LRScheduler):
    """lr(step) = peak * min(step / warmup, sqrt(warmup / step)), step counted from 1.

    Equal to the Transformer schedule (Vaswani et al. 2017, eq. 3) rescaled so that its
    maximum is the configured peak learning rate, reached at the end of warmup.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        # LRScheduler counts calls to step() in last_epoch; the lr set now serves the next
        # optimizer step, number last_epoch + 1.
        step = self.last_epoch + 1
        if self.warmup_steps <= 0:
            scale = 1.0
        else:
            scale = min(step / self.warmup_steps, (self.warmup_steps / step) ** 0.5)
        return [base * scale for base in self.base_lrs]
