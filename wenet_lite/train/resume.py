"""Training checkpoints: what a run saves so that ``--resume`` continues it exactly.

A training checkpoint is a model file (``model``, ``config``, ``tokenizer``: what
``load_model`` reads) plus ``optimizer``, ``scheduler``, ``scaler`` (fp16 only), ``sampler``
(``{"epoch", "batches_done", ...}``: where the next batch comes from), ``rng`` (the chunk-size
generator and every rank's torch/CUDA RNG state, for dropout), ``step``, ``epoch`` (the epoch
the sampler resumes in), ``nonfinite_steps``, ``skipped`` (the skipped.json history),
``epoch_load_skips`` (load-time skips of the epoch in progress, summed over ranks) and, in
epoch-end checkpoints, ``dev_loss``. Everything is tensors and builtins, so it loads with
``weights_only=True``.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import torch
import torch.distributed as dist

from wenet_lite.fileio import write_text_atomic
from wenet_lite.files.checkpoint import (
    CheckpointError,
    list_checkpoints,
    prune_checkpoints,
    save_checkpoint,
)
from wenet_lite.files.model_file import model_payload
from wenet_lite.train.dist import DistInfo

if TYPE_CHECKING:
    from wenet_lite.train.loop import Progress, Trainer, TrainParts

__all__ = ["agreed_checkpoints", "restore_training_state", "save_training_checkpoint"]

_log = logging.getLogger("wenet_lite.train")


def _gather_rng(chunk_gen: torch.Generator, info: DistInfo) -> Dict[str, Any]:
    """RNG states of every rank (a collective), for rank 0 to save."""
    mine = {"torch": torch.get_rng_state()}
    if info.device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(info.device)
    ranks: List[Any] = [mine]
    if dist.is_initialized():
        ranks = [None] * info.world_size
        dist.all_gather_object(ranks, mine)
    return {"chunk": chunk_gen.get_state(), "ranks": ranks}


def save_training_checkpoint(trainer: Trainer, end_of_epoch: bool) -> None:
    """Write ``step_N.pt`` and ``skipped.json`` (call on every rank; rank 0 writes)."""
    p, st = trainer.p, trainer.state
    history, epoch_skips = trainer.current_skips()  # collectives first, on every rank
    rng = _gather_rng(p.chunk_gen, p.dist)
    if not p.dist.is_main:
        return
    extra: Dict[str, Any] = dict(
        optimizer=p.optimizer.state_dict(),
        scheduler=p.scheduler.state_dict(),
        sampler=p.sampler.state_dict(st.batches_done),
        rng=rng,
        step=st.step,
        epoch=st.epoch,
        nonfinite_steps=st.nonfinite_steps,
        skipped=history,
        epoch_load_skips=epoch_skips,
    )
    if p.scaler is not None:
        extra["scaler"] = p.scaler.state_dict()
    if end_of_epoch and st.dev_loss is not None:
        extra["dev_loss"] = st.dev_loss
    path = p.exp_dir / f"step_{st.step}.pt"
    save_checkpoint(model_payload(p.model, p.cfg, p.tokenizer, **extra), path)
    prune_checkpoints(p.exp_dir, p.cfg.train.keep_checkpoints)
    write_text_atomic(p.exp_dir / "skipped.json", json.dumps(history, indent=1) + "\n")
    _log.info("saved %s", path)


def restore_training_state(
    parts: TrainParts, progress: Progress, path: Path, payload: Dict[str, Any]
) -> None:
    """Load optimizer, scheduler, sampler, RNG and progress from the training checkpoint
    ``payload`` read from ``path`` (named in errors)."""
    try:
        parts.optimizer.load_state_dict(payload["optimizer"])
        parts.scheduler.load_state_dict(payload["scheduler"])
        if parts.scaler is not None and "scaler" in payload:
            parts.scaler.load_state_dict(payload["scaler"])
        sampler_state = payload["sampler"]
        progress.epoch = int(sampler_state["epoch"])
        written_by = int(sampler_state["world_size"])
        if written_by == parts.dist.world_size:
            progress.batches_done = parts.sampler.load_state_dict(sampler_state)
        else:
            state = {**sampler_state, "world_size": parts.dist.world_size}
            parts.sampler.load_state_dict(state)  # the checks other than the world size
            progress.batches_done = parts.sampler.load_resized(sampler_state)
            _log.warning(
                "%s was written by %d rank(s), this run has %d: epoch %d resumes past the same "
                "share of its batches, drawn for %d rank(s) (not the uninterrupted run's order)",
                path, written_by, parts.dist.world_size, progress.epoch, parts.dist.world_size,
            )  # fmt: skip
        progress.step = int(payload["step"])
        progress.nonfinite_steps = int(payload["nonfinite_steps"])
        progress.skipped = payload["skipped"]
        # Every rank adds its own count; rank 0 alone carries the ranks' sum so far.
        progress.load_skips = dict(payload["epoch_load_skips"]) if parts.dist.is_main else {}
        _restore_rng(parts, path, payload["rng"])
    except KeyError as e:
        raise CheckpointError(path, f"lacks training state {e} (an averaged model?)") from None


def _restore_rng(parts: TrainParts, path: Path, rng: Dict[str, Any]) -> None:
    info = parts.dist
    parts.chunk_gen.set_state(rng["chunk"])
    ranks = rng["ranks"]
    if info.rank >= len(ranks):  # a rank the checkpoint's run did not have: a seeded state
        torch.manual_seed(parts.cfg.train.seed * 1000 + info.rank)
        return
    torch.set_rng_state(ranks[info.rank]["torch"])
    if info.device.type == "cuda" and "cuda" in ranks[info.rank]:
        torch.cuda.set_rng_state(ranks[info.rank]["cuda"], info.device)


def agreed_checkpoints(exp: Path, resume: bool, info: DistInfo) -> Tuple[List[Path], bool]:
    """The checkpoints in ``exp`` and whether to resume, as rank 0 sees them, on every rank:
    ranks on other nodes must read the same file (the experiment dir on storage every node
    reads), or fail naming it rather than start from another state."""
    found = list_checkpoints(exp)
    if info.world_size == 1:
        return found, resume
    shared = [[p.name for p in found], resume]
    dist.broadcast_object_list(shared, src=0)
    names, resume = shared
    missing = [n for n in names[-1:] if resume and not (exp / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"rank {info.rank} ({socket.gethostname()}) cannot read {exp / missing[0]}, which "
            "rank 0 resumes from: put the experiment dir on storage every node reads"
        )
    return [exp / n for n in names], resume
