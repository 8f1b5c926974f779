"""The streams' batched fbank: bit for bit the same frames however the audio is cut and
whichever streams share a call, Kaldi's online frame counts, and kaldi-native-fbank's numbers
within float32 rounding (the tolerance of test_torch_fbank)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.features.test_fbank import _speechy
from wenet_lite.config import FeatureConfig
from wenet_lite.features.fbank import OnlineFbank, compute_fbank
from wenet_lite.features.stream_fbank import FbankStream, compute_ready, offline_fbank
from wenet_lite.features.torch_fbank import TorchFbank, reflect_index


def _feed(streams, audios, rng, knfs=None) -> None:
    """Feed every stream its audio in random pieces, interleaved, computing ready frames of a
    random subset of the streams together now and then."""
    pos = [0] * len(streams)
    while any(p < len(a) for p, a in zip(pos, audios)):
        for i, (s, a) in enumerate(zip(streams, audios)):
            if pos[i] >= len(a):
                continue
            n = int(rng.integers(1, 2500))
            s.accept_waveform(16000, a[pos[i] : pos[i] + n])
            if knfs is not None:
                knfs[i].accept_waveform(16000, a[pos[i] : pos[i] + n])
                assert s.num_frames_ready == knfs[i].num_frames_ready  # Kaldi's online count
            pos[i] += n
        if rng.random() < 0.6:
            compute_ready([s for s in streams if rng.random() < 0.7])
    for s in streams:
        s.input_finished()
    if knfs is not None:
        for s, k in zip(streams, knfs):
            k.input_finished()
            assert s.num_frames_ready == k.num_frames_ready


@pytest.mark.parametrize("snip_edges", [False, True])
def test_streamed_and_batched_equal_offline_bit_for_bit(snip_edges: bool) -> None:
    cfg = FeatureConfig(snip_edges=snip_edges)
    rng = np.random.default_rng(0)
    audios = [_speechy(s, seed=i) for i, s in enumerate((2.3, 0.9, 1.7, 0.03))]
    for trial in range(3):
        streams = [FbankStream(cfg) for _ in audios]
        _feed(streams, audios, rng, [OnlineFbank(cfg) for _ in audios])
        if trial == 0:
            compute_ready(streams)  # the ends of all streams in one call
        for s, a in zip(streams, audios):
            want = offline_fbank(a, cfg)
            assert torch.equal(s.get_frames(0, s.num_frames_ready), want)


_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _DEVICES)
def test_streams_on_a_device_compute_there_and_equal_the_cpu_features(device: str) -> None:
    cfg = FeatureConfig()
    audios = [_speechy(s, seed=i) for i, s in enumerate((1.9, 0.6, 1.1, 0.02, 2.4))]
    on_device = [FbankStream(cfg, device) for _ in audios]
    on_cpu = [FbankStream(cfg) for _ in audios]
    _feed(on_device, audios, np.random.default_rng(3))
    _feed(on_cpu, audios, np.random.default_rng(3))
    compute_ready(on_device)  # every stream's ends in one call there
    for d, c in zip(on_device, on_cpu):
        got = d.get_frames(0, d.num_frames_ready)
        assert got.device.type == device
        # The trainer's tolerance for its device fbank (test_torch_fbank); bit for bit on
        # the CPU, where the device path is the CPU one.
        want = c.get_frames(0, c.num_frames_ready)
        if device == "cpu":
            assert torch.equal(got, want)
        else:
            assert (got.cpu() - want).abs().max() < 5e-3


def test_equal_to_kaldi_native_fbank_within_rounding() -> None:
    rng = np.random.default_rng(1)
    lengths = (0, 50, 100, 119, 200, 399, 400, 401, 555, 16000, 40000)
    diffs = []
    for snip in (False, True):
        cfg = FeatureConfig(snip_edges=snip)
        for n in lengths:
            x = rng.uniform(-0.5, 0.5, n).astype(np.float32)
            ours, knf = offline_fbank(x, cfg), compute_fbank(x, 16000, cfg)
            assert ours.shape == knf.shape, (snip, n)  # short signals mirror more than once
            diffs.append((ours - knf).abs().flatten())
    diff = torch.cat(diffs)
    assert float((diff > 1e-3).float().mean()) < 1e-3
    assert float(diff.max()) < 5e-3


def test_reflection_is_kaldis_repeated_mirror() -> None:
    n = 100
    index = torch.arange(-450, 450)
    want = []
    for i in index.tolist():  # Kaldi's ExtractWindow loop
        while i < 0 or i >= n:
            i = -i - 1 if i < 0 else 2 * n - 1 - i
        want.append(i)
    assert reflect_index(index, n).tolist() == want


def test_frames_are_read_freed_and_checked() -> None:
    cfg = FeatureConfig()
    s = FbankStream(cfg)
    s.accept_waveform(16000, _speechy(1.0))
    ready = s.num_frames_ready
    assert s.num_pending == ready  # nothing computed until asked
    first = s.get_frames(10, 5).clone()  # computes this stream alone
    assert s.num_pending == 0
    s.discard_before(12)
    assert torch.equal(s.get_frames(12, 3), first[2:])
    with pytest.raises(ValueError, match=r"frames \[5, 7\) are not available"):
        s.get_frames(5, 2)
    with pytest.raises(ValueError, match="resample them first"):
        s.accept_waveform(8000, np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        s.accept_waveform(16000, np.array([0.0, np.nan], np.float32))
    s.input_finished()
    with pytest.raises(RuntimeError, match="after input_finished"):
        s.accept_waveform(16000, np.zeros(10, np.float32))
    other = FbankStream(FeatureConfig(num_mel_bins=40))
    other.accept_waveform(16000, _speechy(0.5))
    s2 = FbankStream(cfg)
    s2.accept_waveform(16000, _speechy(0.5))
    with pytest.raises(ValueError, match="different feature settings"):
        compute_ready([s2, other])


def test_the_row_blocked_mel_product_is_what_keeps_rows_exact() -> None:
    """Negative control: the plain mel product of a few rows (another GEMM kernel) rounds
    differently from the same rows among many, on CPUs whose BLAS does that."""
    fbank = TorchFbank(FeatureConfig())
    frames = torch.from_numpy(_speechy(1.0) * 32768.0).unfold(0, 400, 160)  # (R, K)
    many = fbank.log_mel(frames, row_invariant=True)
    for rows in (1, 3, 7, 16, 33):
        few = fbank.log_mel(frames[5 : 5 + rows], row_invariant=True)
        assert torch.equal(few, many[5 : 5 + rows])
    plain = fbank.log_mel(frames)
    if all(torch.equal(fbank.log_mel(frames[5 : 5 + r]), plain[5 : 5 + r]) for r in (1, 3, 7)):
        pytest.skip("this CPU's GEMM rounds few rows as it does many: nothing to control")


@pytest.mark.parametrize("blocks", [1, 2])
def test_offline_fbank_of_whole_blocks(blocks: int, monkeypatch) -> None:
    """A length of exactly k blocks (10 s, 20 s at 16 kHz) ends with the k-th block: no
    empty block after the stream is finished, the frames of one call over the whole input."""
    from wenet_lite.features import stream_fbank

    monkeypatch.setattr(stream_fbank, "_BLOCK", 4000)  # the same loop, a shorter block
    cfg = FeatureConfig()
    audio = _speechy(blocks * 4000 / 16000, seed=3)[: blocks * 4000]
    assert len(audio) == blocks * 4000
    stream = FbankStream(cfg)
    stream.accept_waveform(16000, audio)
    stream.input_finished()
    assert torch.equal(offline_fbank(audio, cfg), stream.get_frames(0, stream.num_frames_ready))
