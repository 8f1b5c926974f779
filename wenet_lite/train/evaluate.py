"""Validation: CTC loss and greedy-search WER on the dev set, summed over DDP ranks.

A streaming model (chunk mode static or dynamic) is scored twice, in full context and at the
config's decode chunk (``encoder.chunk.size`` with ``left_chunks``), because the two can drift
apart during training; the loss (used to pick the best checkpoints) is the full-context one.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Dict, Iterable, List, Tuple

import torch

from wenet_lite.config import ChunkConfig
from wenet_lite.data.dataset import SKIP_REASONS, Batch, merge_counts
from wenet_lite.data.tokenizer import Tokenizer, normalize_text
from wenet_lite.evaluation.wer import ErrorCounts, word_errors
from wenet_lite.model import ASRModel
from wenet_lite.model.ctc import ctc_loss_sum
from wenet_lite.search.ctc_search import ctc_greedy_search
from wenet_lite.train.dist import all_reduce_sum

__all__ = ["DevResult", "eval_settings", "evaluate"]


@dataclass
class DevResult:
    loss: float
    """mean CTC loss per utterance, full context"""
    num_utts: int
    wer: Dict[str, float] = field(default_factory=dict)
    """word error rate (fraction) per setting name ("full", "chunk16", ...)"""
    skipped: Dict[str, int] = field(default_factory=dict)


def eval_settings(chunk: ChunkConfig) -> List[Tuple[str, int, int]]:
    """(name, chunk_size, num_left_chunks) pairs the dev set is decoded with."""
    settings = [("full", 0, -1)]
    if chunk.mode != "full":
        settings.append((f"chunk{chunk.size}", chunk.size, chunk.left_chunks))
    return settings


@torch.no_grad()
def evaluate(
    model: ASRModel,
    batches: Iterable[Batch],
    tokenizer: Tokenizer,
    settings: List[Tuple[str, int, int]],
    device: torch.device,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
) -> DevResult:
    """Score every batch on this rank, then sum the counts over ranks (a collective)."""
    was_training = model.training
    model.eval()
    loss_sum, num_utts = 0.0, 0
    errors = {name: ErrorCounts() for name, _, _ in settings}
    skipped: Dict[str, int] = {}
    for batch in batches:
        merge_counts(skipped, batch.skipped)
        if not batch.ids:
            continue
        feats, lens = batch.feats.to(device), batch.feats_lens.to(device)  # (B, T_in, F), (B,)
        for name, chunk_size, left in settings:
            with autocast():
                log_probs, out_lens = model.ctc_log_probs(feats, lens, chunk_size, left)
            if name == "full":
                targets, target_lens = batch.targets.to(device), batch.target_lens.to(device)
                loss_sum += float(ctc_loss_sum(log_probs, out_lens, targets, target_lens))
            errors[name] += _batch_errors(log_probs, out_lens, batch.texts, tokenizer)
        num_utts += len(batch.ids)
    model.train(was_training)
    return _reduce(loss_sum, num_utts, errors, skipped, device)


def _batch_errors(
    log_probs: torch.Tensor, lens: torch.Tensor, refs: List[str], tokenizer: Tokenizer
) -> ErrorCounts:
    total = ErrorCounts()
    for hyp, ref in zip(ctc_greedy_search(log_probs.float().cpu(), lens.cpu()), refs):
        total += word_errors(normalize_text(ref), tokenizer.decode(hyp.tokens))
    return total


def _reduce(
    loss_sum: float,
    num_utts: int,
    errors: Dict[str, ErrorCounts],
    skipped: Dict[str, int],
    device: torch.device,
) -> DevResult:
    names = list(errors)
    local = [loss_sum, float(num_utts)]
    for name in names:
        local += [float(errors[name].errors), float(errors[name].ref_len)]
    local += [float(skipped.get(r, 0)) for r in SKIP_REASONS]
    total = all_reduce_sum(torch.tensor(local, dtype=torch.float64, device=device)).tolist()
    count = int(total[1])
    wer = {name: total[2 + 2 * i] / max(total[3 + 2 * i], 1.0) for i, name in enumerate(names)}
    skips = total[2 + 2 * len(names) :]
    return DevResult(
        loss=total[0] / max(count, 1),
        num_utts=count,
        wer=wer,
        skipped={r: int(n) for r, n in zip(SKIP_REASONS, skips)},
    )
