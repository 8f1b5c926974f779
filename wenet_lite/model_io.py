"""Model files as models: what `decode`, `stream`, `export` and the trainer read and write.

A model file (a training checkpoint or an averaged model, in the format of
``wenet_lite.checkpoint``) holds the state dict, the resolved config and the tokenizer, so it
alone rebuilds the model: dims are never passed as flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch

from wenet_lite.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from wenet_lite.config import ExperimentConfig, config_from_dict, config_to_dict
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model import ASRModel, build_model

__all__ = ["load_model", "save_model", "model_payload"]


def model_payload(
    model: ASRModel, cfg: ExperimentConfig, tokenizer: Tokenizer, **extra: Any
) -> Dict[str, Any]:
    """The dict a model file holds; ``extra`` adds training state (optimizer, step, ...)."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    payload = {"model": state, "config": config_to_dict(cfg), "tokenizer": tokenizer.to_bytes()}
    payload.update(extra)
    return payload


def save_model(
    path: Union[str, Path], model: ASRModel, cfg: ExperimentConfig, tokenizer: Tokenizer
) -> None:
    """Write a model file atomically (no optimizer state)."""
    save_checkpoint(model_payload(model, cfg, tokenizer), path)


def load_model(
    path: Union[str, Path], device: Optional[torch.device] = None
) -> Tuple[ASRModel, Tokenizer, ExperimentConfig]:
    """Rebuild the model from a checkpoint or averaged model file, in eval mode.

    Raises FileNotFoundError for a missing file and CheckpointError for a truncated, corrupt,
    foreign or too new one, both naming the path.
    """
    payload = load_checkpoint(path)
    try:
        cfg = config_from_dict(payload["config"])
        tokenizer = Tokenizer.from_bytes(payload["tokenizer"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(path, f"config or tokenizer inside is unusable: {e}") from None
    model = build_model(cfg, tokenizer.vocab_size)
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as e:
        raise CheckpointError(path, f"weights do not match its config: {e}") from None
    return model.to(device or torch.device("cpu")).eval(), tokenizer, cfg
