"""Checkpoints load safely (weights_only), fail clearly when broken, and average exactly."""

from pathlib import Path
from typing import List

import pytest
import torch

from wenet_lite import load_model
from wenet_lite.config import load_config
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.files.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from wenet_lite.files.model_file import model_payload
from wenet_lite.model import build_model
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


def _tamper(path: Path, tokenizer: Tokenizer, change) -> Path:
    _write(path, tokenizer, 0)
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)
    return path


def test_a_config_claiming_a_huge_model_is_refused_before_allocating(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    """A small file whose config makes a 4096-wide encoder (0.6 G parameters in two blocks):
    the shapes are compared on the meta device, so the refusal costs no memory."""
    import resource

    def huge(p):
        p["config"]["encoder"].update(d_model=4096, ffn_dim=16384, num_heads=4)

    path = _tamper(tmp_path / "huge.pt", tokenizer, huge)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match=r"huge.pt: weights do not match its config: "
                       r"\S+ is \(\d+(, \d+)*\), the config makes it \(.*4096"):  # fmt: skip
        load_model(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.update(tokenizer=None), "its 'tokenizer' is NoneType, not sentencepiece"),
        (lambda p: p.update(model="x"), "its 'model' is not a state dict"),
        (lambda p: p.update(config=[1, 2]), "its 'config' is a list, not a mapping"),
        (
            lambda p: p["model"].pop(next(iter(p["model"]))),
            "weights do not match its config: it lacks",
        ),
        (
            lambda p: p["model"].update(extra=torch.zeros(1)),
            "weights do not match its config: it has extra, which the model",
        ),
    ],
)
def test_wrong_parts_are_one_line(tokenizer, tmp_path, change, message) -> None:
    path = _tamper(tmp_path / "m.pt", tokenizer, change)
    with pytest.raises(CheckpointError, match=f"m.pt: {message}"):
        load_model(path)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_named(tokenizer, tmp_path, value) -> None:
    """One NaN in the CTC head decoded every file to nothing, silently; it is named."""

    def poison(p):
        key = next(k for k in p["model"] if k.startswith("ctc"))
        p["model"][key].view(-1)[3] = value

    path = _tamper(tmp_path / "nan.pt", tokenizer, poison)
    with pytest.raises(CheckpointError, match=r"nan.pt: weight ctc\S* holds 1 NaN or infinite"):
        load_model(path)
    _write(tmp_path / "ok.pt", tokenizer, 0)
    load_model(tmp_path / "ok.pt")  # the same file unpoisoned loads


def test_weights_that_are_views_of_fewer_values_are_refused(tokenizer, tmp_path) -> None:
    """Every weight given its shape as one expanded value: a file of a few KB that would have
    the model built whatever its size; the storage behind each weight is counted."""

    def expanded(p):
        p["model"] = {k: torch.zeros(1, dtype=v.dtype).expand(v.shape) for k, v in
                      p["model"].items()}  # fmt: skip

    path = _tamper(tmp_path / "views.pt", tokenizer, expanded)
    with pytest.raises(CheckpointError, match=r"views.pt: weight \S+ claims \d+ values but the "
                       r"file stores 1: not weights a model saved"):  # fmt: skip
        load_model(path)


def test_finite_weights_whose_outputs_overflow_are_refused(tokenizer, tmp_path) -> None:
    """Every weight x 1e30: finite, but the encoder's output is NaN, and every file would
    decode to nothing with no error; one second of silence through the model shows it."""

    def scaled(p):
        for value in p["model"].values():
            if value.is_floating_point():
                value.mul_(1e30)

    path = _tamper(tmp_path / "big.pt", tokenizer, scaled)
    with pytest.raises(CheckpointError, match="big.pt: its CTC head's outputs for a second of "
                       "silence are NaN or infinite"):  # fmt: skip
        load_model(path)


def test_weights_that_share_one_storage_are_refused(tokenizer, tmp_path) -> None:
    """Every float weight a view into one shared storage as large as the largest weight (each
    view's storage large enough alone): refused on what they claim together, before anything
    is built; the control: the same weights each with its own storage load."""

    def shared(p):
        floats = {k: v for k, v in p["model"].items() if v.is_floating_point()}
        block = torch.zeros(max(v.numel() for v in floats.values()))
        for k, v in floats.items():
            p["model"][k] = block[: v.numel()].view(v.shape)

    path = _tamper(tmp_path / "shared.pt", tokenizer, shared)
    with pytest.raises(CheckpointError, match=r"shared.pt: weights \S+ and \S+ \(and \d+ more\) "
                       r"are views of one stored block of \d+ bytes that claim \d+"):  # fmt: skip
        load_model(path)

    def own(p):
        for k, v in p["model"].items():
            p["model"][k] = torch.zeros_like(v) if v.is_floating_point() else v

    load_model(_tamper(tmp_path / "own.pt", tokenizer, own))


@pytest.mark.parametrize("head, prefix", [("transducer head", "transducer."),
                                          ("attention decoder", "decoder.")])  # fmt: skip
def test_every_head_is_run_at_load(tokenizer, tmp_path, head, prefix) -> None:
    """Only one head's weights x 1e30 (the CTC head and the encoder untouched): its outputs
    overflow where the load check runs it, and the file is refused naming it; the control:
    the same model unscaled loads."""
    import dataclasses

    cfg = dataclasses.replace(
        CFG, model=dataclasses.replace(CFG.model, transducer_weight=0.5),
        decoder=dataclasses.replace(CFG.decoder, type="bitransformer", num_blocks=1,
                                    r2l_num_blocks=1),
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg, tokenizer.vocab_size)
    save_checkpoint(model_payload(model, cfg, tokenizer), tmp_path / "whole.pt")
    load_model(tmp_path / "whole.pt")
    payload = model_payload(model, cfg, tokenizer)
    for key, value in payload["model"].items():
        if key.startswith(prefix) and value.is_floating_point():
            value.mul_(1e30)
    save_checkpoint(payload, tmp_path / "head.pt")
    with pytest.raises(CheckpointError, match=f"head.pt: its {head}'s outputs for a second of "
                       "silence are NaN or infinite"):  # fmt: skip
        load_model(tmp_path / "head.pt")


def test_config_sizes_whose_product_is_too_large_are_refused_before_building() -> None:
    """Each size within its own bound, together terabytes: refused by the parameter count on
    the meta device, naming the sizes; a real config builds."""
    import dataclasses

    enc = dataclasses.replace(CFG.encoder, d_model=8192, ffn_dim=65536, num_blocks=256,
                              num_heads=8)  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"encoder.d_model 8192, encoder.ffn_dim 65536 and "
        r"encoder.num_blocks 256 .* make a model of [\d,.]+ G parameters",
    ):
        build_model(dataclasses.replace(CFG, encoder=enc), 100)
    assert sum(p.numel() for p in build_model(CFG, 100).parameters()) > 0
