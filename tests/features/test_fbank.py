"""Fbank: streaming equals offline bit for bit, sherpa-onnx's options, int16 scaling, dither."""

import math
from typing import List

import kaldi_native_fbank as knf
import numpy as np
import pytest
import torch

from wenet_lite.config import FeatureConfig
from wenet_lite.features.fbank import (
    HIGH_FREQ_HZ,
    LOW_FREQ_HZ,
    OnlineFbank,
    compute_fbank,
    fbank_options,
    num_frames,
)

CFG = FeatureConfig()  # 16 kHz, 80 bins, 25/10 ms, snip_edges false


def _speechy(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Two chirpy tones plus noise, with a stretch of digital silence, in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.1 * np.sin(2 * np.pi * 2500 * t)
    x = x + 0.02 * rng.standard_normal(len(t))
    x[len(x) // 3 : len(x) // 3 + 4000] = 0.0  # 0.25 s at 16 kHz
    return x.astype(np.float32)


def _stream(fbank: OnlineFbank, x: np.ndarray, sizes: List[int]) -> torch.Tensor:
    """Feed ``x`` in pieces of the given sizes, reading and discarding frames as they appear."""
    out, start, i, done = [], 0, 0, 0
    while start < len(x):
        piece = x[start : start + sizes[i % len(sizes)]]
        fbank.accept_waveform(16000, piece)
        start, i = start + len(piece), i + 1
        if fbank.num_frames_ready > done:
            out.append(fbank.get_frames(done, fbank.num_frames_ready - done))
            done = fbank.num_frames_ready
            fbank.discard_before(done)
    fbank.input_finished()
    out.append(fbank.get_frames(done, fbank.num_frames_ready - done))
    return torch.cat(out)


@pytest.mark.parametrize("snip_edges", [False, True])
@pytest.mark.parametrize("pieces", ["ones", "small", "frame_sized", "large"])
def test_online_equals_offline_exactly(snip_edges: bool, pieces: str) -> None:
    cfg = FeatureConfig(snip_edges=snip_edges)
    x = _speechy(0.6 if pieces == "ones" else 1.3)
    rng = np.random.default_rng(1)
    sizes = {
        "ones": [1],
        "small": rng.integers(1, 50, 97).tolist(),
        "frame_sized": rng.integers(150, 450, 31).tolist(),  # around shift 160 / window 400
        "large": rng.integers(401, 9000, 13).tolist(),
    }[pieces]
    offline = compute_fbank(x, 16000, cfg)
    online = _stream(OnlineFbank(cfg), x, sizes)
    assert offline.shape == (num_frames(len(x), cfg), 80)
    assert offline.dtype == torch.float32
    assert torch.equal(online, offline)


def test_online_with_seeded_dither_equals_offline() -> None:
    x = _speechy(0.8)
    offline = compute_fbank(x, 16000, CFG, dither=1.0, rng=np.random.default_rng(5))
    fbank = OnlineFbank(CFG, dither=1.0, rng=np.random.default_rng(5))
    assert torch.equal(_stream(fbank, x, [37, 1, 512, 3000]), offline)


@pytest.mark.parametrize("snip_edges", [False, True])
@pytest.mark.parametrize("shift_ms,length_ms", [(10.0, 25.0), (12.5, 30.0)])
def test_num_frames_matches_kaldi(snip_edges: bool, shift_ms: float, length_ms: float) -> None:
    cfg = FeatureConfig(snip_edges=snip_edges, frame_shift_ms=shift_ms, frame_length_ms=length_ms)
    x = _speechy(0.7)
    for n in [0, 1, 79, 80, 159, 160, 399, 400, 401, 481, 4000, 11111]:
        assert compute_fbank(x[:n], 16000, cfg).shape == (num_frames(n, cfg), 80), n


def test_options_are_sherpa_onnx_wenet_ctc_defaults() -> None:
    opts = fbank_options(CFG)
    assert opts.frame_opts.samp_freq == 16000 and opts.mel_opts.num_bins == 80
    assert opts.frame_opts.frame_shift_ms == 10 and opts.frame_opts.frame_length_ms == 25
    assert not opts.frame_opts.snip_edges and opts.frame_opts.dither == 0
    assert opts.frame_opts.window_type == "povey" and opts.frame_opts.remove_dc_offset
    assert opts.frame_opts.preemph_coeff == pytest.approx(0.97)
    assert opts.mel_opts.low_freq == 20 and opts.mel_opts.high_freq == -400
    assert not opts.use_energy and opts.use_log_fbank and opts.use_power


def test_options_agree_with_installed_sherpa_onnx() -> None:
    sherpa_onnx = pytest.importorskip("sherpa_onnx")
    ref = sherpa_onnx.FeatureExtractorConfig()  # what from_wenet_ctc builds, bar rate and dim
    assert (ref.low_freq, ref.high_freq) == (LOW_FREQ_HZ, HIGH_FREQ_HZ)
    assert ref.snip_edges == CFG.snip_edges and ref.dither == 0.0
    assert (ref.sampling_rate, ref.feature_dim) == (CFG.sample_rate, CFG.num_mel_bins)


def test_samples_are_scaled_to_int16_range() -> None:
    """Power features of x * 32768 are those of x plus 2 ln 32768 in every bin."""
    x = _speechy(0.5)
    x += 0.05 * np.random.default_rng(3).standard_normal(len(x)).astype(np.float32)
    ours = compute_fbank(x, 16000, CFG)
    raw = knf.OnlineFbank(fbank_options(CFG))
    raw.accept_waveform(16000, x)
    raw.input_finished()
    unscaled = torch.from_numpy(np.stack([raw.get_frame(i) for i in range(raw.num_frames_ready)]))
    above_floor = unscaled > math.log(1.19e-7) + 3  # knf floors power at float32 epsilon
    assert above_floor.float().mean() > 0.9
    diff = (ours - unscaled)[above_floor]
    assert diff.sub(2 * math.log(32768)).abs().max() < 1e-3


def test_dither_zero_is_deterministic_and_dither_changes_features() -> None:
    x = _speechy(0.5)
    clean = compute_fbank(x, 16000, CFG)
    assert torch.equal(clean, compute_fbank(x, 16000, CFG))
    a = compute_fbank(x, 16000, CFG, dither=1.0, rng=np.random.default_rng(0))
    b = compute_fbank(x, 16000, CFG, dither=1.0, rng=np.random.default_rng(0))
    c = compute_fbank(x, 16000, CFG, dither=1.0, rng=np.random.default_rng(1))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, clean)
    # Dither matters most on digital silence: it lifts the log floor there.
    silent = slice(len(x) // 3 // 160 + 3, (len(x) // 3 + 4000) // 160 - 3)
    assert (a[silent] - clean[silent]).mean() > 1.0
    assert (a - clean).abs().median() < 0.1  # speech frames barely move
    assert not torch.equal(compute_fbank(x, 16000, CFG, dither=1.0), clean)  # unseeded works too


def test_input_is_not_modified() -> None:
    x = _speechy(0.3)
    before = x.copy()
    compute_fbank(x, 16000, CFG, dither=1.0)
    np.testing.assert_array_equal(x, before)


def test_online_errors() -> None:
    fbank = OnlineFbank(CFG)
    with pytest.raises(ValueError, match="44100 Hz.*16000 Hz"):
        fbank.accept_waveform(44100, np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="shape"):
        fbank.accept_waveform(16000, np.zeros((100, 2), np.float32))
    with pytest.raises(ValueError, match="NaN or inf"):
        fbank.accept_waveform(16000, np.array([0.0, np.nan], np.float32))
    fbank.accept_waveform(16000, _speechy(0.2))
    ready = fbank.num_frames_ready
    with pytest.raises(ValueError, match="not available"):
        fbank.get_frames(0, ready + 1)
    fbank.discard_before(5)
    assert fbank.get_frames(5, 2).shape == (2, 80)
    with pytest.raises(ValueError, match=r"\[5, "):
        fbank.get_frames(4, 1)
    fbank.input_finished()
    assert fbank.finished
    with pytest.raises(RuntimeError, match="after input_finished"):
        fbank.accept_waveform(16000, np.zeros(10, np.float32))


@pytest.mark.parametrize("dither", [0.0, 1.0])
def test_compute_fbank_in_blocks_equals_one_pass(dither: float) -> None:
    """compute_fbank moves frames out block by block (bounded memory for an hour of audio):
    the same frames, bit for bit, as one pass over the whole signal, dither included."""
    from wenet_lite.config import FeatureConfig
    from wenet_lite.features import fbank as F

    cfg = FeatureConfig()
    x = (np.random.default_rng(0).standard_normal(F._FBANK_BLOCK * 2 + 12345) * 0.1).astype(
        np.float32
    )
    blocks = F.compute_fbank(x, cfg.sample_rate, cfg, dither, np.random.default_rng(3))
    one = F.OnlineFbank(cfg, dither=dither, rng=np.random.default_rng(3))
    one.accept_waveform(cfg.sample_rate, x)
    one.input_finished()
    assert torch.equal(blocks, one.get_frames(0, one.num_frames_ready))
    assert blocks.shape == (F.num_frames(len(x), cfg), cfg.num_mel_bins)


def test_high_freq_moves_the_top_mel_edge() -> None:
    """``features.high_freq``: 0 is the whole band (WeNet's features), the default stops 400 Hz
    short of Nyquist (sherpa-onnx's); only the upper bins change."""
    full = FeatureConfig(high_freq=0.0)
    assert fbank_options(full).mel_opts.high_freq == 0.0
    x = _speechy(0.5)
    x += 0.05 * np.random.default_rng(5).standard_normal(len(x)).astype(np.float32)
    default, whole = compute_fbank(x, 16000, CFG), compute_fbank(x, 16000, full)
    moved = (default - whole).abs().amax(dim=0)  # (F,)
    assert moved[-1] > 0.05 and moved[:5].max() < moved[-1]
    absolute = FeatureConfig(high_freq=7600.0)  # the same edge, given in Hz
    assert torch.allclose(compute_fbank(x, 16000, absolute), default, atol=1e-5)


@pytest.mark.parametrize("high_freq", [-8000.0, 9000.0, 10.0])
def test_a_high_freq_outside_the_band_names_the_key(high_freq: float) -> None:
    from wenet_lite.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=r"features\.high_freq: .*top mel edge"):
        config_from_dict({"features": {"high_freq": high_freq}})
