"""Files written by earlier wenet_lite versions keep working, and a newer format is refused.

``tests/fixtures/legacy/`` holds a one-block model file (before model files had a
``format_version``) and its TorchScript export (chunk 4, left 2; state as a plain tuple), both
written by commit c163eb2, with that export's CTC log-probs for fixed random features.
"""

from pathlib import Path

import pytest
import torch

from wenet_lite import load_model
from wenet_lite.files.checkpoint import FORMAT_VERSION, CheckpointError, load_checkpoint

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy"


def test_old_model_file_loads_and_streams_as_its_old_export() -> None:
    ref = torch.load(LEGACY / "reference_v0.pt", weights_only=True)
    assert "format_version" not in torch.load(LEGACY / "model_v0.pt", weights_only=True)
    model, tokenizer, cfg = load_model(LEGACY / "model_v0.pt")
    assert tokenizer.vocab_size == ref["log_probs"].size(-1)
    with torch.no_grad():
        out = model.encoder.forward_chunk_by_chunk(ref["feats"], 4, 2)
        log_probs = model.ctc(out)[:, : ref["log_probs"].size(1)]
    assert (log_probs - ref["log_probs"]).abs().max() < 1e-5


def test_old_torchscript_export_still_runs() -> None:
    ref = torch.load(LEGACY / "reference_v0.pt", weights_only=True)
    module = torch.jit.load(str(LEGACY / "model_v0.ts"))
    meta = module.metadata()
    window, shift = int(meta["window_size"]), int(meta["window_shift"])
    state, outs = module.init_state(1), []
    feats = ref["feats"]
    for start in range(0, feats.size(1) - window + 1, shift):
        log_probs, state = module.forward_chunk(feats[:, start : start + window], state)
        outs.append(log_probs)
    # Written on another CPU: its kernels may round differently (1e-7), as in the test above.
    assert (torch.cat(outs, 1) - ref["log_probs"]).abs().max() < 1e-5


def test_newer_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    payload = torch.load(LEGACY / "model_v0.pt", weights_only=True)
    path = tmp_path / "future.pt"
    torch.save({**payload, "format_version": FORMAT_VERSION + 1}, path)
    with pytest.raises(CheckpointError, match=f"{path}: .*format {FORMAT_VERSION + 1}.*upgrade"):
        load_checkpoint(path)
    assert issubclass(CheckpointError, ValueError)  # one `except ValueError` in the CLI
