"""Checkpoints load safely (weights_only), fail clearly when broken, and average exactly."""

from pathlib import Path
from typing import List

import pytest
import torch

from wenet_lite import load_model
from wenet_lite.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from wenet_lite.config import load_config
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.model import build_model
from wenet_lite.model_io import model_payload
from wenet_lite.train.average import average_checkpoints

CFG = load_config("conf/tiny_test.yaml")
EXECUTED: List[str] = []


class _Payload:
    """Unpickling this would run code: exactly what weights_only=True must refuse."""

    def __reduce__(self):
        return (EXECUTED.append, ("pickled code ran",))


@pytest.fixture(scope="module")
def tokenizer(synthetic_corpus) -> Tokenizer:
    return Tokenizer.load(synthetic_corpus.tokenizer)


def _write(path: Path, tokenizer: Tokenizer, seed: int, **extra) -> dict:
    torch.manual_seed(seed)
    model = build_model(CFG, tokenizer.vocab_size)
    payload = model_payload(model, CFG, tokenizer, **extra)
    save_checkpoint(payload, path)
    return payload["model"]


def test_pickled_objects_are_refused(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "step_1.pt"
    _write(path, tokenizer, 0)
    payload = torch.load(path, weights_only=True)
    payload["extra"] = _Payload()
    torch.save(payload, path)  # a plain pickle, as an attacker could write it
    with pytest.raises(CheckpointError, match=f"{path}: not a readable model file.*refused"):
        load_model(path)
    assert EXECUTED == []


def test_truncated_checkpoint_names_the_file(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "step_2.pt"
    _write(path, tokenizer, 0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=f"{path}: not a readable model file"):
        load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        load_model(tmp_path / "nothing.pt")


def test_average_is_the_mean_and_loads(tokenizer: Tokenizer, tmp_path: Path) -> None:
    states = [
        _write(tmp_path / f"step_{s}.pt", tokenizer, seed=s, step=s, dev_loss=float(loss))
        for s, loss in ((10, 5.0), (20, 3.0), (30, 4.0))
    ]
    out = average_checkpoints(tmp_path, 2)
    assert out == tmp_path / "avg_2.pt"
    model, tok, cfg = load_model(out)
    assert cfg == CFG and tok.to_bytes() == tokenizer.to_bytes()
    for key, value in model.state_dict().items():
        if value.is_floating_point():
            expected = (states[1][key].double() + states[2][key].double()) / 2
            assert torch.equal(value, expected.float()), key
    best = load_checkpoint(average_checkpoints(tmp_path, 2, best=True))
    assert best["averaged_from"] == ["step_20.pt", "step_30.pt"]
    assert load_checkpoint(average_checkpoints(tmp_path, 1, best=True))["averaged_from"] == [
        "step_20.pt"
    ]
    with pytest.raises(ValueError, match="asked to average 4 checkpoints"):
        average_checkpoints(tmp_path, 4)
