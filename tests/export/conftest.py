"""Tiny model files for the export tests: random weights, saved as `wenet-lite train` would.

``tiny_model_file`` needs nothing but torch and sentencepiece. ``speech_model_file`` is
calibrated on generated speech (the shared ``synthetic_corpus``) so that greedy CTC gives
varied, input-dependent text: with random weights the encoder output is dominated by a
frame-independent component, so its CTC projection is re-centred on the data and scaled.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import List, NamedTuple

import pytest
import torch

from wenet_lite.config import ExperimentConfig, TokenizerConfig, load_config
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.files.model_file import save_model
from wenet_lite.model import ASRModel, build_model

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "conf" / "tiny_test.yaml"
_WORDS = (
    "the a of to and in is it that was he for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find"
).split()


class ModelFile(NamedTuple):
    path: Path
    model: ASRModel
    tokenizer: Tokenizer
    cfg: ExperimentConfig


def _sentences(n: int, seed: int = 0) -> List[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def _random_model(cfg: ExperimentConfig, vocab_size: int) -> ASRModel:
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size).eval()
    with torch.no_grad():  # non-trivial CMVN so the exported buffers are exercised
        model.encoder.cmvn.mean.normal_()
        model.encoder.cmvn.istd.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="session")
def tiny_model_file(tmp_path_factory: pytest.TempPathFactory) -> ModelFile:
    """conf/tiny_test.yaml with random weights and a 50-piece tokenizer, saved as a model file."""
    d = tmp_path_factory.mktemp("tiny_model")
    cfg = load_config(TINY)
    tok_cfg = TokenizerConfig(model_type="unigram", vocab_size=50)
    tokenizer = Tokenizer.train(_sentences(300), tok_cfg, d / "tokenizer.model")
    model = _random_model(cfg, tokenizer.vocab_size)
    save_model(d / "model.pt", model, cfg, tokenizer)
    return ModelFile(d / "model.pt", model, tokenizer, cfg)


@pytest.fixture(scope="session")
def speech_files(synthetic_corpus) -> List[Path]:
    """The generated dev-clean utterances (FLAC, 16 kHz)."""
    return sorted((synthetic_corpus.root / "LibriSpeech" / "dev-clean").rglob("*.flac"))


@pytest.fixture(scope="session")
def speech_model_file(
    synthetic_corpus, speech_files: List[Path], tmp_path_factory: pytest.TempPathFactory
) -> ModelFile:
    """A random tiny model whose greedy output varies with the audio (see module docstring)."""
    from wenet_lite.features.audio import load_audio
    from wenet_lite.features.cmvn import load_cmvn
    from wenet_lite.features.fbank import compute_fbank

    cfg = load_config(TINY)
    tokenizer = Tokenizer.load(synthetic_corpus.tokenizer)
    model = _random_model(cfg, tokenizer.vocab_size)
    mean, istd = load_cmvn(synthetic_corpus.data / "cmvn.json")
    rate = cfg.features.sample_rate
    feats = [compute_fbank(load_audio(p, rate), rate, cfg.features) for p in speech_files[:3]]
    with torch.no_grad():
        model.encoder.cmvn.mean.copy_(mean)
        model.encoder.cmvn.istd.copy_(istd)
        out = torch.cat([model.encoder(f[None], torch.tensor([len(f)]), 4, 2)[0][0] for f in feats])
        weight, bias = model.ctc.proj.weight, model.ctc.proj.bias  # (D, V), (V,)
        weight.mul_(3.0 / out.std(0).unsqueeze(1))  # logits from the frame-to-frame variation
        bias.copy_(-(out.mean(0) @ weight))
        bias[0] += 2.0  # some blanks, as a trained model has
        bias[1] = -1e4  # no <unk>: sherpa-onnx and sentencepiece spell it differently
    d = tmp_path_factory.mktemp("speech_model")
    save_model(d / "model.pt", model, cfg, tokenizer)
    return ModelFile(d / "model.pt", model, tokenizer, cfg)


@pytest.fixture(scope="session")
def speech_u2_model_file(
    speech_model_file: ModelFile, tmp_path_factory: pytest.TempPathFactory
) -> ModelFile:
    """``speech_model_file`` with a random attention decoder (1 + 1 blocks)."""
    overrides = ["decoder.type=bitransformer", "decoder.num_blocks=1", "decoder.r2l_num_blocks=1"]
    cfg = load_config(TINY, overrides)
    torch.manual_seed(3)
    model = build_model(cfg, speech_model_file.tokenizer.vocab_size).eval()
    model.load_state_dict(speech_model_file.model.state_dict(), strict=False)
    d = tmp_path_factory.mktemp("speech_u2_model")
    save_model(d / "model.pt", model, cfg, speech_model_file.tokenizer)
    return ModelFile(d / "model.pt", model, speech_model_file.tokenizer, cfg)


def without_decoder(model_file: ModelFile, tmp_path: Path) -> Path:
    """The model of ``model_file`` without its attention decoder, saved in ``tmp_path``."""
    from wenet_lite.config import config_from_dict, config_to_dict

    data = config_to_dict(model_file.cfg)
    data["decoder"]["type"] = "none"
    cfg = config_from_dict(data)
    model = build_model(cfg, model_file.tokenizer.vocab_size)
    model.load_state_dict(model_file.model.state_dict(), strict=False)
    save_model(tmp_path / "plain.pt", model, cfg, model_file.tokenizer)
    return tmp_path / "plain.pt"
