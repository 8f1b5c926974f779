"""The training loop: micro-batches, gradient accumulation, optimizer steps, epoch ends.

:class:`Trainer` gets everything built (see ``trainer.py``) and owns the mutable progress.
Rules that keep DDP ranks in lockstep (a rank that skips a collective hangs the others):

- every rank gets the same number of batches per epoch (the sampler guarantees it), and every
  batch runs forward and backward through the DDP wrapper, even one whose utterances were all
  skipped: it runs a one-frame dummy utterance with its loss multiplied by 0, so the gradient
  all-reduce still happens and adds nothing;
- a step is skipped when the gradient norm is not finite; gradients are all-reduced before the
  norm is taken, so every rank sees the same norm and skips the same steps;
- logging, dev scoring, skip counts and checkpoints run their collectives on every rank at the
  same steps; only rank 0 writes.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple, Union

import torch
from torch import nn
from tqdm import tqdm

from wenet_lite.config import ExperimentConfig
from wenet_lite.data.dataset import SKIP_REASONS, Batch, merge_counts, spec_augment_batch
from wenet_lite.data.sampler import BucketingSampler
from wenet_lite.data.shard_sampler import ShardSampler
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model import ASRModel
from wenet_lite.model.asr import PARTS
from wenet_lite.model.mask import sample_chunk
from wenet_lite.train.dist import DistInfo, all_reduce_sum
from wenet_lite.train.evaluate import DevResult, eval_settings, evaluate
from wenet_lite.train.precision import autocast_for

__all__ = ["Progress", "TrainParts", "Trainer"]

_log = logging.getLogger("wenet_lite.train")


@dataclass
class Progress:
    """Everything that changes while training; saved in checkpoints."""

    step: int = 0
    """optimizer steps taken (including skipped non-finite ones)"""
    epoch: int = 1
    batches_done: int = 0
    """batches of ``epoch`` already trained on (this rank's share)"""
    nonfinite_steps: int = 0
    empty_batches: int = 0
    """batches of this rank (this run) whose utterances were all skipped"""
    load_skips: Dict[str, int] = field(default_factory=dict)
    """utterances skipped while loading in this epoch on this rank (restored on rank 0 only)"""
    skipped: Dict[str, Dict[str, Dict[str, int]]] = field(
        default_factory=lambda: {"train": {}, "dev": {}}
    )
    """skipped.json: split -> epoch -> reason -> count"""
    losses: Dict[int, float] = field(default_factory=dict)
    """step -> this rank's mean loss per utterance (this run only; not saved)"""
    dev_loss: Optional[float] = None


@dataclass
class TrainParts:
    """What :class:`Trainer` needs, built by ``trainer.train``."""

    cfg: ExperimentConfig
    exp_dir: Path
    dist: DistInfo
    model: ASRModel
    wrapped: nn.Module
    """``model`` or its DistributedDataParallel wrapper"""
    tokenizer: Tokenizer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: Optional[Any]
    sampler: Union[BucketingSampler, ShardSampler]
    train_loader: Any
    dev_loader: Optional[Any]
    train_filtered: Dict[str, int]
    dev_filtered: Dict[str, int]
    chunk_gen: torch.Generator
    dummy: Batch
    writer: Optional[Any]
    save: Callable[[Trainer, bool], None]
    progress_bar: bool = True
    fbank: Optional[nn.Module] = None
    """the fbank of batches that carry samples (``data.fbank: device``), on the device"""


@dataclass
class _Window:
    """What the steps since the last log line add up to. The step's numbers stay on the
    device until :meth:`Trainer._read_back` (every ``log_interval`` steps and before a
    checkpoint): reading a CUDA tensor makes the host wait for the GPU."""

    sums: torch.Tensor
    """(7,) float64 on the device: loss of the steps with a finite loss, those steps, the
    loss's parts (``model.asr.PARTS``: CTC, attention, transducer, consistency) of the forward
    passes with finite parts, those passes"""
    audio_seconds: float = 0.0
    start: float = field(default_factory=time.time)
    pending: List[Tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = field(
        default_factory=list
    )
    """(step, loss, skipped, gradient norm) of the steps not yet read back"""


MAX_NONFINITE_RUN = 100
"""optimizer steps in a row with a non-finite gradient norm before training stops: a model or
learning rate that diverged would otherwise run to its last step doing nothing"""


class DivergedError(ValueError):
    """Training cannot go on: every recent step's gradient was NaN or infinite."""


class Trainer:
    def __init__(self, parts: TrainParts, progress: Progress) -> None:
        self.p = parts
        self.state = progress
        self.cfg = parts.cfg
        self._window = self._new_window()
        self._nonfinite_run = 0  # skipped steps in a row (the same on every rank)

    def _new_window(self) -> _Window:
        return _Window(torch.zeros(3 + len(PARTS), dtype=torch.float64, device=self.p.dist.device))

    def run(self) -> Progress:
        """Train until ``train.max_epochs`` or ``train.max_steps``; returns the progress."""
        max_steps = self.cfg.train.max_steps
        while self.state.epoch <= self.cfg.train.max_epochs:
            if max_steps and self.state.step >= max_steps:
                break
            if self._train_epoch():
                self._end_epoch()
        self._read_back()
        return self.state

    def _train_epoch(self) -> bool:
        """One epoch (or its rest, after resume); False when max_steps stopped it early."""
        st, p = self.state, self.p
        p.sampler.set_epoch(st.epoch)  # keeps a resumed epoch's skip (same epoch)
        total = p.sampler.num_batches()
        accum = self.cfg.train.accum_grad
        bar = tqdm(
            total=total,
            initial=st.batches_done,
            desc=f"epoch {st.epoch}",
            unit="batch",
            disable=not (p.progress_bar and p.dist.is_main),
            dynamic_ncols=True,
        )
        losses: List[torch.Tensor] = []
        with bar:
            for batch in p.train_loader:
                st.batches_done += 1
                last = st.batches_done == total
                sync = st.batches_done % accum == 0 or last
                losses.append(self._forward_backward(batch, sync, accum))
                bar.update(1)
                if sync:
                    self._optimizer_step(torch.stack(losses).mean(), bar)
                    losses = []
                    if self._stop_mid_epoch(last):
                        return False
        return True

    def _stop_mid_epoch(self, last: bool) -> bool:
        interval, max_steps = self.cfg.train.checkpoint_interval, self.cfg.train.max_steps
        stop = bool(max_steps) and self.state.step >= max_steps and not last
        if stop:
            self._score_dev()  # the final weights get a dev score even when no epoch ends here
        if stop or (interval and self.state.step % interval == 0 and not last):
            self._save(False)
        return stop

    def _save(self, end_of_epoch: bool) -> None:
        self._read_back()  # the checkpoint's progress counts every step taken
        self.p.save(self, end_of_epoch)

    def _end_epoch(self) -> None:
        st, p = self.state, self.p
        load = self._reduce_skips(st.load_skips)
        self._record_skips("train", merge_counts(dict(p.train_filtered), load))
        self._score_dev()
        st.epoch += 1
        st.batches_done = 0
        st.load_skips = {}
        p.sampler.set_epoch(st.epoch)
        self._save(True)

    def _score_dev(self) -> None:
        p = self.p
        if p.dev_loader is not None:
            dev = self._validate()
            self._record_skips("dev", merge_counts(dict(p.dev_filtered), dev.skipped))

    def _forward_backward(self, batch: Batch, sync: bool, accum: int) -> torch.Tensor:
        """Forward and backward of one micro-batch; its loss per utterance, a device scalar
        (NaN for a batch whose utterances were all skipped)."""
        st, p = self.state, self.p
        merge_counts(st.load_skips, batch.skipped)
        chunk_size, left = sample_chunk(self.cfg.encoder.chunk, p.chunk_gen)
        frames = float(batch.feats_lens.sum())
        self._window.audio_seconds += frames * self.cfg.features.frame_shift_ms / 1000
        empty = not batch.ids
        if empty:
            st.empty_batches += 1
            batch = p.dummy
        feats, feats_lens = self._features(batch)  # (B, T_in, F), (B,) on the device
        targets, target_lens = batch.targets, batch.target_lens
        views = 1
        if not empty and self.cfg.specaug.enabled and st.step >= self.cfg.specaug.start_step:
            feats, views = self._augment(feats, batch, st.epoch, st.step)
            if views == 2:  # the same utterances again, other masks
                feats_lens, targets = feats_lens.repeat(2), targets.repeat(2, 1)
                target_lens = target_lens.repeat(2)
        dev = p.dist.device
        no_sync = getattr(p.wrapped, "no_sync", None)
        ctx = no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext()
        with ctx:
            with self.autocast():
                loss, _, parts = p.wrapped(
                    feats,
                    feats_lens,
                    targets.to(dev, non_blocking=True),
                    target_lens.to(dev, non_blocking=True),
                    chunk_size,
                    left,
                    step=st.step,
                    views=views,
                )
            if empty:
                loss = loss * 0.0  # keeps DDP's all-reduce in step, contributes nothing
            scaled = loss / accum
            (p.scaler.scale(scaled) if p.scaler is not None else scaled).backward()
        if empty:
            return torch.full((), math.nan, dtype=torch.float64, device=dev)
        parts = parts.detach().double()  # (4,) PARTS
        finite = torch.isfinite(parts).all()
        self._window.sums[2 : 2 + len(PARTS)] += torch.where(finite, parts, 0.0)
        self._window.sums[2 + len(PARTS)] += finite
        return loss.detach().double()

    def _augment(
        self, feats: torch.Tensor, batch: Batch, epoch: int, step: int
    ) -> Tuple[torch.Tensor, int]:
        """SpecAugment of the batch, and how many views it holds: with CR-CTC from its start
        step two (the utterances twice, each with its own masks; time masks widened), else
        one."""
        cfg, seed = self.cfg, self.cfg.train.seed
        if cfg.model.cr_ctc_weight <= 0.0 or step < cfg.model.cr_start_step:
            return spec_augment_batch(feats, batch.feats_lens, batch.ids, cfg.specaug, seed,
                                      epoch), 1  # fmt: skip
        wide = dataclasses.replace(cfg.specaug, num_time_masks=round(
            cfg.specaug.num_time_masks * cfg.model.cr_time_mask_ratio))  # fmt: skip
        views = [spec_augment_batch(feats, batch.feats_lens, batch.ids, wide, seed, epoch, view)
                 for view in ("specaug", "specaug-2")]  # fmt: skip
        return torch.cat(views), 2

    def _features(self, batch: Batch) -> Tuple[torch.Tensor, torch.Tensor]:
        """(B, T_in, F) fbank and (B,) lengths on the device: copied from the workers' batch,
        or computed here from its samples (``data.fbank: device``)."""
        dev = self.p.dist.device
        lens = batch.feats_lens.to(dev, non_blocking=True)
        if batch.samples is None:
            return batch.feats.to(dev, non_blocking=True), lens
        samples = batch.samples.to(dev, non_blocking=True)
        sample_lens = batch.sample_lens.to(dev, non_blocking=True)
        feats, _ = self.p.fbank(samples, sample_lens, int(batch.feats_lens.max()))
        return feats, lens

    def autocast(self) -> ContextManager:
        return autocast_for(self.cfg.train.precision, self.p.dist.device, self.cfg.encoder.d_model)

    def _optimizer_step(self, loss: torch.Tensor, bar: tqdm) -> None:
        """Clip, step (skipped on the device when the gradient norm is not finite), schedule.
        Nothing here waits for the device; the numbers are read every ``log_interval``."""
        st, p = self.state, self.p
        if p.scaler is not None:
            p.scaler.unscale_(p.optimizer)
        norm = nn.utils.clip_grad_norm_(p.model.parameters(), self.cfg.train.grad_clip)
        skipped = ~torch.isfinite(norm)
        if p.scaler is not None:
            p.scaler.step(p.optimizer)  # skips the step itself on inf/NaN gradients
            p.scaler.update()
        else:
            p.optimizer.found_inf = skipped.float()  # the fused step does nothing when 1
            p.optimizer.step()
        p.optimizer.zero_grad(set_to_none=True)
        lr = p.optimizer.param_groups[0]["lr"]
        p.scheduler.step()
        st.step += 1
        w = self._window
        finite = torch.isfinite(loss)
        w.sums[0] += torch.where(finite, loss, 0.0)
        w.sums[1] += finite
        w.pending.append((st.step, loss, skipped, norm))
        if st.step % self.cfg.train.log_interval == 0:
            self._log_window(lr, self._read_back(), bar)

    def _read_back(self) -> float:
        """Bring the pending steps' numbers to the host: per-step losses, skipped steps (each
        logged). Returns the last step's gradient norm (NaN when none is pending)."""
        pending, st = self._window.pending, self.state
        if not pending:
            return math.nan
        rows = [torch.stack([x, skip.double(), n.double()]) for _, x, skip, n in pending]
        values = torch.stack(rows).tolist()
        for (step, *_), (loss, skipped, _) in zip(pending, values):
            st.losses[step] = loss
            if skipped:
                st.nonfinite_steps += 1
                self._nonfinite_run += 1
                _log.warning("step %d: non-finite gradient norm, step skipped", step)
            else:
                self._nonfinite_run = 0
            if self._nonfinite_run >= MAX_NONFINITE_RUN:
                raise DivergedError(
                    f"steps {step - self._nonfinite_run + 1}-{step}: {self._nonfinite_run} steps "
                    "in a row had a NaN or infinite gradient and were skipped; the model (its "
                    "initial weights?) or the learning rate diverged"
                )
        pending.clear()
        return values[-1][2]

    def _log_window(self, lr: float, norm: float, bar: tqdm) -> None:
        """Average over the last interval and all ranks (a collective on every rank)."""
        w = self._window
        seconds_now = torch.tensor([w.audio_seconds], dtype=torch.float64, device=w.sums.device)
        totals = all_reduce_sum(torch.cat([w.sums, seconds_now]))
        loss_sum, steps, *part_sums, parts, seconds = totals.tolist()
        # Audio seconds of all ranks per wall second; NaN loss when every step was non-finite.
        speed = seconds / max(time.time() - w.start, 1e-9)
        loss = loss_sum / steps if steps else float("nan")
        self._window = self._new_window()
        st = self.state
        bar.set_postfix(loss=f"{loss:.3g}", audio_s_per_s=f"{speed:.1f}")
        means = {name: (total / parts if parts else math.nan)
                 for name, total in zip(PARTS, part_sums)}  # fmt: skip
        shown = self._parts_shown() if parts else []
        detail = ", ".join(f"{name} {means[name]:.4f}" for name in shown)
        _log.info(
            "epoch %d step %d: loss %.4f%s lr %.3g grad_norm %.3g audio %.1f s/s (%.1f s) "
            "nonfinite %d",
            st.epoch, st.step, loss, f" ({detail})" if detail else "", lr, norm, speed,
            seconds, st.nonfinite_steps,
        )  # fmt: skip
        tb = self.p.writer
        if tb is not None:
            tb.add_scalar("train/loss", loss, st.step)
            for name in shown:
                tb.add_scalar(f"train/{name}_loss", means[name], st.step)
            tb.add_scalar("train/lr", lr, st.step)
            tb.add_scalar("train/grad_norm", norm, st.step)
            tb.add_scalar("train/audio_seconds_per_second", speed, st.step)
            frames = speed * 1000 / self.cfg.features.frame_shift_ms
            tb.add_scalar("train/frames_per_second", frames, st.step)
            tb.add_scalar("train/nonfinite_steps", st.nonfinite_steps, st.step)

    def _parts_shown(self) -> List[str]:
        """The loss's parts the model has, when it has more than CTC's."""
        m = self.p.model
        has = [True, m.decoder is not None, m.transducer is not None, m.cr_ctc_weight > 0]
        shown = [name for name, present in zip(PARTS, has) if present]
        return shown if len(shown) > 1 else []

    def _validate(self) -> DevResult:
        p, st = self.p, self.state
        settings = eval_settings(self.cfg.encoder.chunk)
        dev = evaluate(p.model, p.dev_loader, p.tokenizer, settings, p.dist.device, self.autocast)
        st.dev_loss = dev.loss
        wers = ", ".join(f"WER[{k}] {100 * v:.2f}%" for k, v in dev.wer.items())
        _log.info("epoch %d dev: %d utts, loss %.4f, %s", st.epoch, dev.num_utts, dev.loss, wers)
        if p.writer is not None:
            p.writer.add_scalar("dev/loss", dev.loss, st.step)
            for name, wer in dev.wer.items():
                p.writer.add_scalar(f"dev/wer_{name}", 100 * wer, st.step)
        return dev

    def _reduce_skips(self, counts: Dict[str, int]) -> Dict[str, int]:
        local = torch.tensor([float(counts.get(r, 0)) for r in SKIP_REASONS], dtype=torch.float64)
        total = all_reduce_sum(local.to(self.p.dist.device)).tolist()
        return {r: int(n) for r, n in zip(SKIP_REASONS, total)}

    def _record_skips(self, split: str, counts: Dict[str, int]) -> None:
        full = {r: int(counts.get(r, 0)) for r in SKIP_REASONS}
        self.state.skipped[split][str(self.state.epoch)] = full
        if any(full.values()):
            text = ", ".join(f"{n} {r}" for r, n in full.items() if n)
            _log.warning("epoch %d %s: skipped %s", self.state.epoch, split, text)

    def current_skips(self) -> Tuple[Dict[str, Dict[str, Dict[str, int]]], Dict[str, int]]:
        """(skipped.json history including the epoch in progress, that epoch's load-time skips
        summed over ranks); a collective."""
        st = self.state
        load = self._reduce_skips(st.load_skips)
        history = {split: dict(epochs) for split, epochs in st.skipped.items()}
        if st.batches_done:
            counts = merge_counts(dict(self.p.train_filtered), load)
            history["train"][str(st.epoch)] = {r: counts.get(r, 0) for r in SKIP_REASONS}
        return history, load
