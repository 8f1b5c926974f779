"""Shared fixtures (registered by tests/conftest.py): tiny random models that emit tokens, test
audio, bad audio files.

The corpus is the session's shared synthetic one (``synthetic_corpus`` in tests/conftest.py).

A random model's CTC output is almost all blank or one token, so equality tests on it would
pass vacuously. The ``tiny`` model's CTC head is therefore rigged: its blank logit is a linear
speech/silence classifier fitted (least squares) to the encoder outputs of the corpus, labelled
by frame energy, and the other logits are random projections. Speech frames then emit varying
tokens and pauses emit blanks, as a trained model would, so transcripts are non-empty and
endpointing sees real silences.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import torch

from wenet_lite.config import ExperimentConfig, load_config
from wenet_lite.data.manifest import load_cuts
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import save_model
from wenet_lite.model import ASRModel, build_model

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "conf" / "tiny_test.yaml"
RIG_CHUNK = 4  # the rig is fitted on chunk-masked outputs, what streaming tests decode


@dataclass(frozen=True)
class TinyModel:
    path: Path
    model: ASRModel
    tokenizer: Tokenizer
    cfg: ExperimentConfig


@pytest.fixture(scope="session")
def corpus(synthetic_corpus) -> Path:
    """The shared synthetic corpus's data dir (tests/conftest.py): test-clean has 10
    utterances of 1.5-5 s, 16 kHz FLAC; tokenizer.model is tiny_test's tokenizer."""
    return synthetic_corpus.data


@pytest.fixture(scope="session")
def test_audio(corpus: Path) -> List[np.ndarray]:
    """The test-clean utterances' samples, in manifest order."""
    return [
        load_audio(c.recording.sources[0].source, 16000) for c in load_cuts(corpus / "test-clean")
    ]


@pytest.fixture(scope="session")
def tiny(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    cfg = load_config(TINY)
    tmp = tmp_path_factory.mktemp("tiny")
    tokenizer = Tokenizer.load(corpus / "tokenizer.model")
    torch.manual_seed(0)
    model = build_model(cfg, tokenizer.vocab_size).eval()
    feats = [
        compute_fbank(load_audio(c.recording.sources[0].source, 16000), 16000, cfg.features)
        for c in load_cuts(corpus / "test-clean")
    ]
    _rig(model, feats)
    save_model(tmp / "model.pt", model, cfg, tokenizer)
    return TinyModel(tmp / "model.pt", model, tokenizer, cfg)


@pytest.fixture(scope="session")
def full_context_model(tiny: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained full-context: non-causal conv (random weights)."""
    overrides = ["encoder.causal_conv=false", "encoder.chunk.mode=full"]
    cfg = load_config(TINY, overrides)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("full") / "model.pt"
    save_model(path, build_model(cfg, tiny.tokenizer.vocab_size), cfg, tiny.tokenizer)
    return path


@torch.no_grad()
def _rig(model: ASRModel, feats: List[torch.Tensor]) -> None:
    """CMVN from the corpus, and a CTC head that emits tokens on speech, blanks on silence."""
    enc = model.encoder
    frames = torch.cat(feats)  # (sum T_in, F)
    enc.cmvn.mean.copy_(frames.mean(0))
    enc.cmvn.istd.copy_(1 / frames.std(0))
    outs, energy = [], []
    for f in feats:
        out, _ = enc(f[None], torch.tensor([f.size(0)]), RIG_CHUNK, -1)  # (1, T, D)
        outs.append(out[0])
        rate = enc.subsampling.rate
        energy.append(f.mean(1)[torch.arange(out.size(1)) * rate + rate - 1])  # (T,)
    x = torch.cat(outs)  # (N, D)
    e = torch.cat(energy)
    speech = torch.where(e > e.quantile(0.3), 1.0, -1.0)  # (N,)
    design = torch.cat([x, torch.ones(len(x), 1)], 1)  # (N, D+1)
    w = torch.linalg.lstsq(design, speech[:, None]).solution[:, 0]  # (D+1,)
    assert ((design @ w > 0) == (speech > 0)).float().mean() > 0.8, "speech classifier failed"
    d, v = x.size(1), model.ctc.proj.out_features
    gen = torch.Generator().manual_seed(0)
    # Random token logits of the centred outputs, scaled to unit spread per token, so that the
    # argmax follows what changes from frame to frame rather than one constant direction.
    mean = x.mean(0)  # (D,)
    weight = torch.randn(d, v, generator=gen)  # (D, V)
    weight /= ((x - mean) @ weight).std(0)
    bias = -mean @ weight  # (V,)
    weight[:, 0], bias[0] = -10 * w[:d], -10 * w[d]  # blank wins where the classifier says silence
    bias[1] = -100.0  # never <unk>: its text ' ⁇ ' would only obscure the checks
    model.ctc.proj.weight.copy_(weight)
    model.ctc.proj.bias.copy_(bias)


@pytest.fixture(scope="session")
def bad_audio(tmp_path_factory: pytest.TempPathFactory, test_audio) -> Dict[str, Path]:
    """One file per kind of bad input, ``{kind: path}``."""
    folder = tmp_path_factory.mktemp("bad")
    good = test_audio[0]
    kinds = ("missing", "not_audio", "zero_bytes", "empty", "corrupt_flac", "nan")
    paths = {kind: folder / f"{kind}.{'flac' if 'flac' in kind else 'wav'}" for kind in kinds}
    paths["not_audio"].write_text("this is not audio\n" * 50)
    paths["zero_bytes"].write_bytes(b"")
    sf.write(paths["empty"], np.zeros(0, np.float32), 16000)
    sf.write(folder / "whole.flac", good, 16000)
    data = (folder / "whole.flac").read_bytes()
    paths["corrupt_flac"].write_bytes(data[: len(data) // 2])  # cut off mid-stream
    with_nan = good.copy()
    with_nan[len(good) // 2] = np.nan
    sf.write(paths["nan"], with_nan, 16000, subtype="FLOAT")
    return paths


U2_OVERRIDES = [
    "decoder.type=bitransformer",
    "decoder.num_blocks=2",
    "decoder.r2l_num_blocks=1",
    "decoder.ffn_dim=64",
    "decoder.dropout=0.0",
]


@pytest.fixture(scope="session")
def tiny_u2(tiny: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """``tiny`` with an attention decoder of random weights (2 left-to-right blocks, 1
    right-to-left): its scores disagree with CTC's often enough to reorder n-bests."""
    cfg = load_config(TINY, U2_OVERRIDES)
    torch.manual_seed(1)
    model = build_model(cfg, tiny.tokenizer.vocab_size).eval()
    missing = model.load_state_dict(tiny.model.state_dict(), strict=False).missing_keys
    assert missing and all(k.startswith("decoder.") for k in missing)
    path = tmp_path_factory.mktemp("tiny_u2") / "model.pt"
    save_model(path, model, cfg, tiny.tokenizer)
    return TinyModel(path, model, tiny.tokenizer, cfg)
