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
from wenet_lite.weights import finite_problem, weights_problem

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
    """CheckpointError when any head's outputs for one second of silence are not finite: the
    CTC head's log-probabilities, the transducer's joiner after the start (blanks) and after a
    token, the attention decoder's score of one token. Finite weights can still overflow
    (every weight x 1e30), and such a head would decode every input to nothing, or to
    garbage, without a word of warning."""
    device = next(model.parameters()).device
    feats = torch.zeros(1, 100, num_mel_bins, device=device)  # (B, T_in, F)
    with torch.inference_mode():
        out, lens = model.encoder(feats, torch.tensor([100], device=device))  # (1, T, D)
        heads = {"CTC head": model.ctc(out)}
        if model.transducer is not None:
            heads["transducer head"] = _joiner_outputs(model, out)
        if model.decoder is not None:
            one = torch.ones(1, 1, dtype=torch.long, device=device)
            heads["attention decoder"] = model.decoder.score(
                out, lens, one, torch.ones(1, dtype=torch.long, device=device), 0.5
            )  # fmt: skip
    for name, values in heads.items():
        if not bool(torch.isfinite(values).all()):
            raise CheckpointError(
                path, f"its {name}'s outputs for a second of silence are NaN or infinite "
                "(weights too large for float32 arithmetic?): the model would decode to "
                "nothing, or to garbage"
            )  # fmt: skip


def _joiner_outputs(model: ASRModel, out: torch.Tensor) -> torch.Tensor:
    """(2, T, V) joiner logits over the frames ``out`` (1, T, D) after the start (blanks) and
    after a token in the predictor's context (where an overflow shows first)."""
    head = model.transducer
    assert head is not None
    context = head.predictor.context
    ids = torch.zeros(2, context, dtype=torch.long, device=out.device)
    ids[1, -1] = 1
    pred = head.predictor(ids)[:, -1]  # (2, D')
    return head.joiner(out.expand(2, -1, -1), pred.unsqueeze(1))


def check_state(
    expected: Dict[str, torch.Tensor], state: Dict[str, torch.Tensor], path: Union[str, Path]
) -> None:
    """CheckpointError naming the first weight that is missing, unexpected, of another shape
    than ``expected``'s, stored as less data than it claims or not finite (NaN or infinity
    decode silently to nothing): :func:`wenet_lite.weights.weights_problem`."""
    problem = weights_problem(expected, state)
    if problem is not None:
        raise CheckpointError(path, problem)


def check_finite(state: Dict[str, torch.Tensor], path: Union[str, Path]) -> None:
    """CheckpointError naming the first floating-point weight with NaN or infinity."""
    problem = finite_problem(state)
    if problem is not None:
        raise CheckpointError(path, problem)
