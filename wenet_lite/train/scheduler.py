"""Learning-rate schedules: linear warmup to the peak, then inverse-square-root decay (Noam)
or a cosine decay that reaches a floor at the last step."""

from __future__ import annotations

import math

import torch

__all__ = ["WarmupLR"]


class WarmupLR(torch.optim.lr_scheduler.LRScheduler):
    """Linear warmup to the configured peak over ``warmup_steps``, then a decay.

    ``noam``: lr(step) = peak * min(step / warmup, sqrt(warmup / step)), step counted from 1:
    the Transformer schedule (Vaswani et al. 2017, eq. 3) rescaled so that its maximum is the
    configured peak. It suits open-ended training.

    ``cosine``: after warmup, peak * (f + (1 - f) * (1 + cos(pi * p)) / 2) with p the share of
    the steps from warmup to ``total_steps`` done and f = ``final_scale``. A run with a known
    step budget ends at a small learning rate instead of stopping midway down the Noam curve,
    which is worth several WER points on a short run.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int,
        kind: str = "noam",
        total_steps: int = 0,
        final_scale: float = 0.0,
    ) -> None:
        if kind not in ("noam", "cosine"):
            raise ValueError(f"unknown schedule {kind!r} (noam or cosine)")
        if kind == "cosine" and total_steps <= warmup_steps:
            raise ValueError(
                f"a cosine schedule needs total_steps ({total_steps}) > warmup_steps "
                f"({warmup_steps})"
            )
        self.warmup_steps = warmup_steps
        self.kind = kind
        self.total_steps = total_steps
        self.final_scale = final_scale
        super().__init__(optimizer)

    def scale(self, step: int) -> float:
        """The factor applied to the peak learning rate for optimizer step ``step`` (from 1)."""
        if step < self.warmup_steps:
            return step / self.warmup_steps
        if self.kind == "noam":
            return (self.warmup_steps / step) ** 0.5 if self.warmup_steps > 0 else 1.0
        done = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        f = self.final_scale
        return f + (1.0 - f) * 0.5 * (1.0 + math.cos(math.pi * done))

    def state_dict(self) -> dict:
        """Only the position: the shape (warmup, kind, total steps, peak) comes from the config,
        so a run resumed with a larger ``train.max_steps`` follows its new cosine length."""
        return {"last_epoch": self.last_epoch, "_step_count": self._step_count}

    def load_state_dict(self, state_dict: dict) -> None:
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = int(state_dict["_step_count"])
        self._last_lr = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def get_lr(self) -> list[float]:
        # LRScheduler counts calls to step() in last_epoch; the lr set now serves the next
        # optimizer step, number last_epoch + 1.
        scale = self.scale(self.last_epoch + 1)
        return [base * scale for base in self.base_lrs]
