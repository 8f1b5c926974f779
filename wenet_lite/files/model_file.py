"""Model files as models: what `decode`, `stream`, `export` and the trainer read and write.

A model file (a training checkpoint or an averaged model, in the format of
``wenet_lite.files.checkpoint``) holds the state dict, the resolved config and the tokenizer, so it
alone rebuilds the model: dims are never passed as flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch

from wenet_lite.config import ExperimentConfig, config_from_dict, config_to_dict
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.files.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from wenet_lite.model import ASRModel, build_model

__all__ = [
    "check_finite",
    "check_outputs",
    "check_state",
    "load_model",
    "model_payload",
    "save_model",
]


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

    The file's parts are checked before any memory is given to the model: their types, the
    weights' shapes against a skeleton of its config built on the meta device (a small file
    whose config claims a huge model is refused, not allocated), and every weight finite.

    Raises FileNotFoundError for a missing file and CheckpointError for a truncated, corrupt,
    foreign, too new or inconsistent one, both naming the path.
    """
    payload = load_checkpoint(path)
    state, config, tokenizer_bytes = payload["model"], payload["config"], payload.get("tokenizer")
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()
    ):
        raise CheckpointError(path, "its 'model' is not a state dict (names -> tensors)")
    if not isinstance(config, dict):
        raise CheckpointError(path, f"its 'config' is a {type(config).__name__}, not a mapping")
    if not isinstance(tokenizer_bytes, (bytes, bytearray)):
        kind = type(tokenizer_bytes).__name__
        raise CheckpointError(path, f"its 'tokenizer' is {kind}, not sentencepiece model bytes")
    try:
        cfg = config_from_dict(config)
        tokenizer = Tokenizer.from_bytes(bytes(tokenizer_bytes))
    except (KeyError, ValueError) as e:
        raise CheckpointError(path, f"config or tokenizer inside is unusable: {e}") from None
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        skeleton = build_model(cfg, tokenizer.vocab_size)
    check_state(skeleton.state_dict(), state, path)
    try:
        model = build_model(cfg, tokenizer.vocab_size)
    except ValueError as e:  # sizes beyond what is built
        raise CheckpointError(path, str(e)) from None
    model.load_state_dict(state)
    model = model.to(device or torch.device("cpu")).eval()
    check_outputs(model, cfg.features.num_mel_bins, path)
    return model, tokenizer, cfg


def check_outputs(model: ASRModel, num_mel_bins: int, path: Union[str, Path]) -> None:
    """CheckpointError when the model's CTC log-probabilities for one second of silence are not
    finite: finite weights can still overflow (every weight x 1e30), and such a model would
    decode every input to nothing without a word of warning."""
    device = next(model.parameters()).device
    feats = torch.zeros(1, 100, num_mel_bins, device=device)  # (B, T_in, F)
    with torch.inference_mode():
        log_probs, _ = model.ctc_log_probs(feats, torch.tensor([100], device=device))
    if not bool(torch.isfinite(log_probs).all()):
        raise CheckpointError(
            path, "its outputs for a second of silence are NaN or infinite (weights too large "
            "for float32 arithmetic?): the model would decode to nothing"
        )  # fmt: skip


def check_state(
    expected: Dict[str, torch.Tensor], state: Dict[str, torch.Tensor], path: Union[str, Path]
) -> None:
    """CheckpointError naming the first weight that is missing, unexpected, of another shape
    than ``expected``'s or not finite (NaN or infinity decode silently to nothing)."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        what = (f"lacks {missing[0]}" if missing else
                f"has {unexpected[0]}, which the model of its config does not have")  # fmt: skip
        more = len(missing) + len(unexpected) - 1
        others = f" (and {more} other name(s) differ)" if more else ""
        raise CheckpointError(path, f"weights do not match its config: it {what}{others}")
    for key, want in expected.items():
        got = state[key]
        if tuple(got.shape) != tuple(want.shape):
            raise CheckpointError(
                path, f"weights do not match its config: {key} is {tuple(got.shape)}, the "
                f"config makes it {tuple(want.shape)}"
            )  # fmt: skip
        stored = got.untyped_storage().nbytes()
        if stored < got.numel() * got.element_size():  # e.g. one value expanded to a shape
            raise CheckpointError(
                path, f"weight {key} claims {got.numel()} values but the file stores "
                f"{stored // max(got.element_size(), 1)}: not weights a model saved"
            )  # fmt: skip
    check_finite(state, path)


def check_finite(state: Dict[str, torch.Tensor], path: Union[str, Path]) -> None:
    """CheckpointError naming the first floating-point weight with NaN or infinity."""
    for key, value in state.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise CheckpointError(
                path, f"weight {key} holds {bad} NaN or infinite value(s) of {value.numel()}: "
                "the model would decode to nothing"
            )  # fmt: skip
