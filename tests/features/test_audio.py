"""Audio loading: formats, channel mixing, resampling, speed perturbation and bad inputs."""

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from wenet_lite.features.audio import (
    AudioError,
    load_audio,
    pcm16_to_float,
    read_audio_blocks,
    read_pcm16,
    speed_perturb,
)


def _sine(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _dominant_freq(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1.0 / rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("ext,subtype", [("wav", "PCM_16"), ("flac", "PCM_16"), ("wav", "FLOAT")])
def test_mono_16k_roundtrip(tmp_path: Path, ext: str, subtype: str) -> None:
    x = _sine(0.5, 16000)
    path = tmp_path / f"a.{ext}"
    sf.write(path, x, 16000, subtype=subtype)
    y = load_audio(path, 16000)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=1.0 / 32768)


def test_44k_stereo_becomes_16k_mono(tmp_path: Path) -> None:
    left, right = _sine(1.5, 44100, 1000.0, 0.6), _sine(1.5, 44100, 1000.0, 0.2)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), 44100)
    y = load_audio(path, 16000)
    assert y.ndim == 1 and y.dtype == np.float32
    assert abs(len(y) - 24000) <= 1  # 1.5 s at 16 kHz
    assert _dominant_freq(y, 16000) == pytest.approx(1000.0, abs=2.0)
    # mixing averages the channels: amplitude (0.6 + 0.2) / 2
    assert np.abs(y[1000:-1000]).max() == pytest.approx(0.4, abs=0.01)


def test_out_of_range_float_is_clipped(tmp_path: Path) -> None:
    path = tmp_path / "loud.wav"
    sf.write(path, 2.0 * _sine(0.2, 16000, amp=1.0), 16000, subtype="FLOAT")
    y = load_audio(path, 16000)
    assert y.max() == 1.0 and y.min() == -1.0


def _write_bad(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "nope.wav"
    if kind == "text":
        path = tmp_path / "text.wav"
        path.write_text("this is not audio\n" * 20)
        return path
    if kind == "truncated_flac":
        noise = np.random.default_rng(0).uniform(-0.5, 0.5, 32000).astype(np.float32)
        sf.write(tmp_path / "full.flac", noise, 16000)
        data = (tmp_path / "full.flac").read_bytes()
        path = tmp_path / "cut.flac"
        path.write_bytes(data[: len(data) // 2])
        return path
    if kind == "empty":
        path = tmp_path / "empty.wav"
        sf.write(path, np.zeros(0, np.float32), 16000)
        return path
    assert kind == "nan"
    x = _sine(0.2, 16000)
    x[100], x[200] = np.nan, np.inf
    path = tmp_path / "nan.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    return path


@pytest.mark.parametrize(
    "kind,words",
    [
        ("missing", "not found"),
        ("text", "cannot decode"),
        ("truncated_flac", "cannot decode"),
        ("empty", "no samples"),
        ("nan", "2 non-finite"),
    ],
)
def test_bad_input_names_the_file(tmp_path: Path, kind: str, words: str) -> None:
    path = _write_bad(tmp_path, kind)
    with pytest.raises(AudioError, match=words) as info:
        load_audio(path, 16000)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)
    # The block reader of `stream` is the same reader: the same error, kind and words.
    with pytest.raises(AudioError, match=words) as blocks:
        list(read_audio_blocks(path, 0.05))
    assert blocks.value.kind == info.value.kind and str(path) in str(blocks.value)


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    for read in (lambda p: load_audio(p, 16000), lambda p: list(read_audio_blocks(p))):
        with pytest.raises(AudioError, match=f"{tmp_path}: is a directory"):
            read(tmp_path)


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_perturb_changes_duration_and_pitch(factor: float) -> None:
    x = _sine(1.0, 16000, 500.0)
    y = speed_perturb(x, 16000, factor)
    assert y.dtype == np.float32
    assert abs(len(y) - round(16000 / factor)) <= 1
    assert _dominant_freq(y, 16000) == pytest.approx(500.0 * factor, rel=0.01)
    assert np.abs(y).max() <= 1.0


def test_speed_perturb_identity_is_a_copy() -> None:
    x = _sine(0.1, 16000)
    y = speed_perturb(x, 16000, 1.0)
    np.testing.assert_array_equal(x, y)
    assert y is not x


def test_pcm16_bytes() -> None:
    ints = np.array([0, 1, -1, 32767, -32768], dtype="<i2")
    y = pcm16_to_float(ints.tobytes())
    np.testing.assert_array_equal(y, ints.astype(np.float32) / 32768)
    with pytest.raises(ValueError, match="even number"):
        pcm16_to_float(b"\x00\x01\x02")


class _Trickle(io.RawIOBase):
    """A pipe that hands out at most 3 bytes per read."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        piece, self._data = self._data[: min(n, 3)], self._data[min(n, 3) :]
        return piece


def test_read_pcm16_loops_over_short_reads_until_eof() -> None:
    ints = np.arange(-50, 50, dtype="<i2") * 300
    stream = _Trickle(ints.tobytes())
    first = read_pcm16(stream, 64)
    rest = read_pcm16(stream, 64)
    assert len(first) == 64 and len(rest) == 36 and len(read_pcm16(stream, 64)) == 0
    np.testing.assert_array_equal(np.concatenate([first, rest]), ints / np.float32(32768))
    with pytest.raises(AudioError, match="middle of a 16-bit sample"):
        read_pcm16(_Trickle(b"\x01\x02\x03"), 4)


def test_a_cut_off_wav_warns_with_what_was_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """libsndfile counts a WAV's frames from its size: a cut-off file reads as a valid, shorter
    one. The header's data size says how long it was."""
    import logging

    x = _sine(1.0, 16000)
    sf.write(tmp_path / "whole.wav", x, 16000, subtype="PCM_16")
    data = (tmp_path / "whole.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[: 44 + 2 * 4000])  # header + 0.25 s
    with caplog.at_level(logging.WARNING):
        assert load_audio(tmp_path / "whole.wav", 16000).size == 16000
        assert not caplog.text
        assert load_audio(tmp_path / "cut.wav", 16000).size == 4000
    assert f"{tmp_path / 'cut.wav'}: truncated WAV: read 0.25 s of the 1.00 s" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert sum(b.size for b, _ in read_audio_blocks(tmp_path / "cut.wav")) == 4000
    assert "truncated WAV" in caplog.text


def test_mp3_decoder_noise_stays_off_stderr(tmp_path: Path) -> None:
    """libmpg123 prints notes about a damaged MP3 straight to fd 2 (past Python): a user sees
    only the toolkit's one line; other output written meanwhile still reaches stderr."""
    import subprocess
    import sys

    x = (np.random.default_rng(0).standard_normal(16000) * 0.1).astype(np.float32)
    good = tmp_path / "good.mp3"
    sf.write(good, x, 16000, format="MP3")
    data = good.read_bytes()
    third = len(data) // 3
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(data[:third] + bytes(range(256)) * 2 + data[third + 512 :])
    script = (
        "import sys\n"
        "from wenet_lite.features.audio import load_audio, quiet_decoder\n"
        "try:\n"
        "    load_audio(sys.argv[1], 16000)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
        "with quiet_decoder(sys.argv[1]):\n"
        "    sys.stderr.write('still here\\n')\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(bad)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{bad}: "), run.stdout
    assert run.stderr == "still here\n"
    # the damage is real: without the guard the decoder does print
    raw = "import soundfile as sf, sys\nsf.read(sys.argv[1])\n"
    noisy = subprocess.run([sys.executable, "-c", raw, str(bad)], capture_output=True, text=True)
    assert "MPEG" in noisy.stderr or "Note:" in noisy.stderr, noisy.stderr
