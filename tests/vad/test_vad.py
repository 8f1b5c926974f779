"""The VAD: silero-vad's own speech regions on the same audio, batched equal to alone, a file
whose 30 s of noise and tones give no words (without the VAD they do: the control), word times
in file time, and one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("silero_vad")
pytest.importorskip("onnxruntime")

from tests.signals import noise_and_tones  # noqa: E402
from wenet_lite import transcribe  # noqa: E402
from wenet_lite.vad.silero import (  # noqa: E402
    WINDOW,
    SileroVad,
    VadError,
    VadOptions,
    speech_regions,
)


@pytest.fixture(scope="module")
def gapped(test_audio, tmp_path_factory) -> tuple:
    """Speech, 30 s of noise and tones, speech: the file and where the second speech starts."""
    first, second = test_audio[0], test_audio[1]
    x = np.concatenate([first, noise_and_tones(30.0, np.random.default_rng(0)), second]).astype(
        np.float32
    )
    path = tmp_path_factory.mktemp("vad") / "gapped.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    return path, x, (first.size + 30 * 16000) / 16000


@pytest.mark.parametrize("options", [VadOptions(), VadOptions(min_silence_ms=100, pad_ms=30),
                                     VadOptions(threshold=0.3, min_speech_ms=100, pad_ms=200)],
                         ids=["defaults", "silero", "low"])  # fmt: skip
def test_regions_are_silero_vads_own(gapped, options) -> None:
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    _, x, _ = gapped
    reference = get_speech_timestamps(
        torch.from_numpy(x), load_silero_vad(onnx=True), threshold=options.threshold,
        min_speech_duration_ms=options.min_speech_ms,
        min_silence_duration_ms=options.min_silence_ms, speech_pad_ms=options.pad_ms,
    )  # fmt: skip
    mine = SileroVad().regions(x, options)
    assert len(mine) >= 2 and mine == [(r["start"], r["end"]) for r in reference]


def test_regions_rules_on_made_up_probabilities() -> None:
    ms = 16  # samples per ms
    probs = [0.1] * 10 + [0.9] * 20 + [0.2] * 3 + [0.9] * 5 + [0.1] * 80 + [0.8] * 2 + [0.1] * 10
    n = len(probs) * WINDOW
    # a dip of 3 windows (96 ms) under the 100 ms of silence keeps one region; 2 windows of
    # speech (64 ms) are under 250 ms and dropped; padding 30 ms
    got = speech_regions(probs, n, VadOptions(min_silence_ms=100, pad_ms=30))
    assert got == [(10 * WINDOW - 30 * ms, 38 * WINDOW + 30 * ms)]
    assert speech_regions([0.1] * 20, 20 * WINDOW) == []


def test_batched_probabilities_equal_alone(gapped) -> None:
    _, x, _ = gapped
    vad = SileroVad()
    streams = [x[: 40 * WINDOW], x[-40 * WINDOW :], np.zeros(40 * WINDOW, np.float32)]
    alone = [vad.probabilities(s) for s in streams]
    state, context = vad.initial_state(len(streams))
    together = []
    for i in range(40):
        p, state, context = vad.step(np.stack([s[i * WINDOW : (i + 1) * WINDOW]
                                               for s in streams]), state, context)  # fmt: skip
        together.append(p)
    got = np.stack(together, axis=1)
    for k in range(len(streams)):
        np.testing.assert_allclose(got[k], alone[k], atol=1e-6)


def test_non_speech_gives_no_words_and_times_stay_in_the_file(tiny, gapped) -> None:
    path, x, second_start = gapped
    first_end = second_start - 30
    regions = [(a / 16000, b / 16000) for a, b in SileroVad().regions(x)]
    gap_kept = sum(max(0.0, min(b, second_start) - max(a, first_end)) for a, b in regions)
    assert gap_kept < 3.0, regions  # the VAD keeps at most 3 s of the 30 s next to the speech

    def outside(t):  # words where the VAD found no speech
        return [w for w in t.words if not any(a <= w.start < b for a, b in regions)]

    off = transcribe(tiny.path, path, vad=False)
    on = transcribe(tiny.path, path, vad=True)
    assert len(outside(off)) > 10, "the control: the rigged model writes words over the noise"
    assert on.words and not outside(on)
    assert any(w.start < first_end for w in on.words)
    # the second speech: the words and times of its region decoded alone, moved to file time
    start = next(a for a, _ in regions if a > first_end + 3)
    second = [w for w in on.words if w.start >= start]
    alone = transcribe(tiny.path, x[round(start * 16000) :], 16000, vad=False)
    assert second and [w.text for w in second] == [w.text for w in alone.words]
    assert [round(w.start - start, 3) for w in second] == [round(w.start, 3) for w in alone.words]
    # a region longer than a window goes through the long-audio path, the last one too
    head = x[: round((first_end + 10) * 16000)]  # the first speech and 10 s of the gap
    windowed = transcribe(tiny.path, head, 16000, vad=True, max_window_seconds=5.0)
    assert windowed.words and not outside(windowed)


def test_a_missing_model_file_and_bad_flags_are_one_line(tiny, gapped, monkeypatch, tmp_path):
    import wenet_lite.vad.silero as silero

    gone = tmp_path / "silero_vad.onnx"
    missing = VadError(f"{gone}: the VAD model file is missing from the silero-vad install")
    monkeypatch.setattr(silero, "vad_model_path", lambda: (_ for _ in ()).throw(missing))
    with pytest.raises(VadError, match="silero_vad.onnx: the VAD model file is missing"):
        transcribe(tiny.path, gapped[0], vad=True)
    cli = [sys.executable, "-m", "wenet_lite", "transcribe", "--model", str(tiny.path)]
    for flags, said in [(["--vad-threshold", "2"], "--vad-threshold 2"),
                        (["--vad", "on", "--chunk-size", "4"], "full context")]:  # fmt: skip
        run = subprocess.run([*cli, *flags, str(gapped[0])], capture_output=True, text=True)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and said in run.stderr, (
            run.stderr
        )


def test_a_broken_silero_vad_install_turns_auto_off_and_on_into_one_line(tiny, gapped, tmp_path):
    """silero-vad that is installed but fails to import (a shadow package raising ImportError
    first on the path): ``--vad auto`` (the default) transcribes without it and says so once,
    ``--vad on`` is one line naming the extra. The control: without the shadow, auto runs the VAD
    (no warning)."""
    shadow = tmp_path / "shadow" / "silero_vad"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: a broken install')\n")
    (shadow / "data").mkdir()
    (shadow / "data" / "__init__.py").write_text(
        "raise ImportError('simulated: a broken install')\n"
    )
    cli = [sys.executable, "-m", "wenet_lite", "transcribe", "--model", str(tiny.path)]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}

    def run(*flags: str, broken: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *flags, str(gapped[0])], capture_output=True, text=True,
                              env=env if broken else None, timeout=300)  # fmt: skip

    auto = run()
    assert auto.returncode == 0 and auto.stdout.strip(), auto.stderr
    assert auto.stderr.count("the VAD is off: silero-vad is installed but cannot be imported") == 1
    on = run("--vad", "on")
    assert on.returncode == 1 and on.stderr.count("\n") == 1, on.stderr
    assert "silero-vad is installed but cannot be imported" in on.stderr
    assert "pip install 'wenet_lite[vad]'" in on.stderr
    control = run(broken=False)
    assert control.returncode == 0 and "the VAD is off" not in control.stderr
