"""recipes/synthetic/local/plot_attention.py: the weights it draws have the chunk structure,
and it writes a PNG whose title names the utterance and the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from wenet_lite.config import load_config
from wenet_lite.model import build_model

CFG = load_config(Path(__file__).resolve().parents[2] / "conf" / "tiny_test.yaml")


@pytest.fixture(scope="module")
def plot_attention(load_tool):
    return load_tool("plot_attention")


def test_weights_see_their_chunk_and_left_chunks_only(plot_attention) -> None:
    torch.manual_seed(0)
    model = build_model(CFG, 40).eval()
    feats = torch.randn(200, CFG.features.num_mel_bins)
    chunk, left = 4, 1
    terms = plot_attention.attention_terms(model, feats, chunk, left, [0, 1], head=1)
    for weights, content, position in terms.values():
        t = weights.shape[0]
        chunks = np.arange(t) // chunk
        seen = (chunks[:, None] >= chunks[None, :]) & (chunks[:, None] - chunks[None, :] <= left)
        assert np.all(weights[~seen] == 0) and np.all(weights[seen] > 0)
        assert np.allclose(weights.sum(1), 1, atol=1e-5)
        assert np.all(np.isinf(content[~seen])) and np.all(np.isfinite(position[seen]))


def test_writes_a_png_titled_with_utterance_and_model(plot_attention, tmp_path: Path) -> None:
    model = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "model_v0.pt"
    audio = tmp_path / "utt-1.wav"
    sf.write(audio, np.random.default_rng(0).uniform(-0.3, 0.3, 48000).astype(np.float32), 16000)
    out = tmp_path / "attention.png"
    args = ["--model", str(model), "--audio", str(audio), "--out", str(out), "--chunk-size", "4"]
    title = plot_attention.main([*args, "--left-chunks", "1"])
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert title.startswith("utt-1.wav: Conformer 1 x 16 (4 heads, FFN 16, dynamic chunks)")
    assert "chunk 4 (0.16 s), 1 left chunks" in title and str(tmp_path) not in title
    with pytest.raises(SystemExit):
        plot_attention.main([*args, "--layers", "7"])  # a 1-block model
