"""WeNet's conformer encoders and CTC heads, their weights mapped into ours
(wenet_lite.wenet.keys.map_encoder) with WeNet's options (absolute key positions, the conv's
left padding, the final norm, the LayerNorm epsilon), give WeNet's own outputs for whole
utterances, full context and chunk-masked (tests/fixtures/wenet, written by its make_golden.py
from WeNet's code). Each option switched off makes the comparison fail."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
import yaml

from wenet_lite.config import config_from_dict
from wenet_lite.model import ASRModel, build_model
from wenet_lite.wenet.keys import map_encoder
from wenet_lite.wenet.units import read_units

CASES = Path(__file__).parents[1] / "fixtures" / "wenet"
NAMES = ["librispeech", "aishell", "gigaspeech", "batchnorm", "eps1e-12"]
WENET = {"pos_enc": "wenet", "conv_pad": "wenet", "final_norm": True}


def _model(name: str, **changes) -> ASRModel:
    case = CASES / name
    train = yaml.safe_load((case / "train.yaml").read_text())
    enc = train["encoder_conf"]
    encoder = {
        "d_model": enc["output_size"], "num_heads": enc["attention_heads"],
        "ffn_dim": enc["linear_units"], "num_blocks": enc["num_blocks"],
        "subsampling_rate": {"conv2d": 4, "conv2d6": 6, "conv2d8": 8}[enc["input_layer"]],
        "conv_kernel": enc["cnn_module_kernel"], "causal_conv": enc["causal"],
        "conv_norm": enc["cnn_module_norm"], "norm_eps": 1e-12 if name == "eps1e-12" else 1e-5,
        "chunk": {"mode": "dynamic" if enc["causal"] else "full"}, **WENET,
    }  # fmt: skip
    encoder.update(changes)
    cfg = config_from_dict({"features": {"num_mel_bins": 80}, "encoder": encoder})
    state = torch.load(case / "final.pt", weights_only=True)
    model = build_model(cfg, len(read_units(case / "units.txt"))).eval()
    mapped = map_encoder(state, encoder["d_model"])
    if not encoder["final_norm"]:
        mapped = {k: v for k, v in mapped.items() if not k.startswith("encoder.final_norm")}
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    assert not unexpected and all(k.startswith("decoder") for k in missing), missing
    assert not [k for k in state if k.startswith(("encoder.", "ctc."))], "a key was not read"
    return model


def _worst(model: ASRModel, name: str) -> Dict[str, float]:
    golden = torch.load(CASES / name / "golden.pt", weights_only=True)
    feats, lens = golden["feats"], golden["lens"]
    found = {}
    with torch.no_grad():
        full, out_lens = model.encoder(feats, lens)
        assert out_lens.tolist() == golden["full_lens"].tolist()
        # Row 0 fills the batch; row 1 is padded, and WeNet's padding enters a centred conv
        # (it masks before the pointwise conv), which ours keeps out: compare row 0 there.
        rows = 2 if model.encoder.causal_conv else 1
        found["full"] = _valid_diff(full, golden["full"], out_lens, rows)
        found["ctc"] = _valid_diff(model.ctc(full), golden["ctc_full"], out_lens, rows)
        for left in (-1, 4):
            key = f"chunk16_{left}"
            if key in golden:
                out, _ = model.encoder(feats, lens, 16, left)
                found[key] = _valid_diff(out, golden[key], out_lens, 2)
    return found


def _valid_diff(ours: torch.Tensor, theirs: torch.Tensor, lens: torch.Tensor, rows: int) -> float:
    """Largest difference over the frames of the first ``rows`` utterances (not padding)."""
    return max(float((ours[i, :n] - theirs[i, :n]).abs().max()) for i, n in
               enumerate(lens.tolist()[:rows]))  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_encoder_and_ctc_equal_wenets(name: str) -> None:
    worst = _worst(_model(name), name)
    assert max(worst.values()) < 1e-4, worst


@pytest.mark.parametrize(
    "name, change",
    [("librispeech", {"pos_enc": "xl"}), ("librispeech", {"conv_pad": "zero"}),
     ("librispeech", {"final_norm": False}), ("eps1e-12", {"norm_eps": 1e-5})],
)  # fmt: skip
def test_each_option_switched_off_breaks_parity(name: str, change: dict) -> None:
    """Off, each option moves the outputs far beyond float rounding (the LayerNorm epsilon
    least: 5e-5 on these small random models against 5e-7 with it)."""
    right = max(_worst(_model(name), name).values())
    wrong = max(_worst(_model(name, **change), name).values())
    assert wrong > 1e-5 and wrong > 20 * right, (wrong, right)
