"""WeNet's attention decoders, their weights mapped into ours (wenet_lite.wenet.keys) with
WeNet's options (ReLU feed-forward, LayerNorm epsilon, <sos/eos> inside the vocabulary), give
WeNet's own log-probabilities (tests/fixtures/wenet, written by its make_golden.py from WeNet's
code). Switching the activation or the <sos/eos> id makes the comparison fail."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch

from wenet_lite.model.decoder import AttentionDecoder
from wenet_lite.wenet.keys import map_decoder
from wenet_lite.wenet.units import read_units

CASES = Path(__file__).parents[1] / "fixtures" / "wenet"
EPS = {"eps1e-12": 1e-12}


def _decoder(name: str, activation: str = "relu", eps=None, sos=None) -> AttentionDecoder:
    case = CASES / name
    state = torch.load(case / "final.pt", weights_only=True)
    units = read_units(case / "units.txt")
    heads = 8 if name == "gigaspeech" else 4
    decoder = AttentionDecoder(
        len(units), 32, heads, 64, 1, 1, 0.0, 0.0, activation,
        EPS.get(name, 1e-5) if eps is None else eps,
        units.index("<sos/eos>") if sos is None else sos,
    ).eval()  # fmt: skip
    mapped = {**map_decoder(state, "decoder.left_decoder", "l2r"),
              **map_decoder(state, "decoder.right_decoder", "r2l.0")}  # fmt: skip
    decoder.load_state_dict(mapped)  # strict: every key of ours is given
    assert not [k for k in state if k.startswith("decoder.")], "a decoder key was not read"
    return decoder


def _differences(decoder: AttentionDecoder, name: str) -> List[float]:
    golden = torch.load(CASES / name / "golden.pt", weights_only=True)
    hyps = golden["hyps"]
    targets = torch.zeros(len(hyps), max(map(len, hyps)), dtype=torch.long)
    for i, h in enumerate(hyps):
        targets[i, : len(h)] = torch.tensor(h)
    lens = torch.tensor([len(h) for h in hyps])
    memory = golden["full"][:1].repeat(len(hyps), 1, 1)
    memory_lens = golden["full_lens"][:1].repeat(len(hyps))
    with torch.no_grad():
        (l2r, _), (r2l, _) = decoder(memory, memory_lens, targets, lens)
    worst = []
    for ours, theirs in ((l2r, golden["decoder_l2r"]), (r2l, golden["decoder_r2l"])):
        for i, n in enumerate(lens.tolist()):  # positions sos..eos of each hypothesis
            worst.append(float((ours[i, : n + 1] - theirs[i, : n + 1]).abs().max()))
    return worst


@pytest.mark.parametrize("name", ["librispeech", "aishell", "gigaspeech", "batchnorm", "eps1e-12"])
def test_decoder_log_probs_equal_wenets(name: str) -> None:
    assert max(_differences(_decoder(name), name)) < 1e-4


@pytest.mark.parametrize(
    "name, option",
    [("librispeech", {"activation": "silu"}), ("aishell", {"sos": 5}),
     ("librispeech", {"sos": 2})],
)  # fmt: skip
def test_each_option_switched_off_breaks_parity(name: str, option: dict) -> None:
    """(The decoder's LayerNorm epsilon, 1e-12 against 1e-5, moves these log-probs by 5e-7
    only: its inputs are far from zero variance. The encoder's is checked with the encoder.)"""
    assert max(_differences(_decoder(name, **option), name)) > 1e-4
