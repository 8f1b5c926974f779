"""The VAD on live streams: a tracker's turns equal the file rules on the same audio whatever
the pieces; rule "vad" ends segments where the VAD hears quiet (off, the rigged model's words
over noise keep one segment: the control), the same streamed in any pieces and batched with
other streams as alone."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import pytest

pytest.importorskip("silero_vad")
pytest.importorskip("onnxruntime")

from tests.signals import noise_and_tones  # noqa: E402
from wenet_lite.model.chunking import Chunking  # noqa: E402
from wenet_lite.recognizer import open_recognizer  # noqa: E402
from wenet_lite.runtime.endpoint import EndpointConfig  # noqa: E402
from wenet_lite.vad.online import SpeechTracker, track  # noqa: E402
from wenet_lite.vad.silero import WINDOW, SileroVad, VadError, VadOptions, speech_regions  # noqa: E402


@pytest.fixture(scope="module")
def talk(test_audio) -> np.ndarray:
    """Speech, 3 s of noise and tones, speech, 2 s of quiet, speech."""
    rng = np.random.default_rng(1)
    quiet = rng.normal(0, 1e-3, 2 * 16000)
    parts = [test_audio[0], noise_and_tones(3.0, rng), test_audio[1], quiet, test_audio[2]]
    return np.concatenate(parts).astype(np.float32)


def _pieces(x: np.ndarray, seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, x.size), size=x.size // 3000, replace=False))
    return np.split(x, cuts)


def _turns(events) -> List[Tuple[str, int]]:
    return [(e.kind, e.at) for e in events]


@pytest.mark.parametrize("options", [VadOptions(min_silence_ms=500, pad_ms=0),
                                     VadOptions(threshold=0.3, min_speech_ms=100,
                                                min_silence_ms=100, pad_ms=0)],
                         ids=["half-second", "short"])  # fmt: skip
def test_tracker_turns_equal_the_file_rules_whatever_the_pieces(talk, options) -> None:
    vad = SileroVad()
    regions = speech_regions(vad.probabilities(talk), talk.size, options)
    assert len(regions) >= 3
    runs = []
    for seed in (0, 1):
        tracker = SpeechTracker(options)
        events = []
        for piece in _pieces(talk, seed):
            tracker.accept(piece)
            track(vad, [tracker], [tracker.received])
            events += tracker.take()
        runs.append(_turns(events))
    assert runs[0] == runs[1]
    closed = [(a, b) for a, b in regions if b < talk.size]  # the last may still be open
    found = list(zip(runs[0][::2], runs[0][1::2]))
    assert [k for k, _ in runs[0]] == ["started", "stopped"] * len(found) + (
        ["started"] if len(runs[0]) % 2 else []
    )
    assert [(a[1], b[1]) for a, b in found] == closed
    # the start is padded back by pad_ms; a batch of trackers equals each alone
    padded = VadOptions(options.threshold, options.min_speech_ms, options.min_silence_ms, 300)
    trackers = [SpeechTracker(padded) for _ in range(3)]
    signals = [talk, talk[::-1].copy(), np.zeros(talk.size // 2, np.float32)]
    for t, x in zip(trackers, signals):
        t.accept(x)
    track(vad, trackers, [x.size for x in signals])
    starts = [e.at for e in trackers[0].take() if e.kind == "started"]
    assert starts == [max(0, a - 300 * 16) for a, _ in regions]
    alone = SpeechTracker(padded)
    alone.accept(signals[1])
    track(vad, [alone], [signals[1].size])
    assert _turns(trackers[1].take()) == _turns(alone.take()) != []
    assert trackers[2].take() == []


def test_tracker_runs_only_windows_it_has_and_is_asked_for() -> None:
    tracker = SpeechTracker(VadOptions())
    tracker.accept(np.zeros(3 * WINDOW + 100, np.float32))
    assert tracker.windows_until(10 * WINDOW) == 3 and tracker.windows_until(2 * WINDOW + 5) == 2
    track(SileroVad(), [tracker], [2 * WINDOW + 5])
    assert tracker.windows == 2 and tracker.received == 3 * WINDOW + 100


def _stream(rec, pieces: Sequence[np.ndarray], vad=None):
    s = rec.create_stream(vad=vad)
    for piece in pieces:
        s.accept_waveform(16000, piece)
        while s.is_ready:
            rec.decode_streams([s])
    s.input_finished()
    rec.decode_until_done([s])
    return s


def _finals(stream) -> List[Tuple[str, float, float]]:
    return [(r.text, r.start, r.end) for r in stream.final_results]


def test_rule_vad_ends_segments_the_same_in_any_pieces_and_batched(tiny, talk) -> None:
    ruled = EndpointConfig(vad_silence=0.5)
    rec = open_recognizer(tiny.path, Chunking(8, -1), endpoint=ruled)
    whole = _stream(rec, [talk])
    events = whole.take_speech_events()
    stops = [e for e in events if e.kind == "stopped"]
    assert len(stops) >= 2 and len(whole.final_results) >= 3
    # each segment closes at the first chunk end after the VAD decided its quiet
    chunk_s = 8 * 0.04
    for stop, final in zip(stops, whole.final_results):
        assert final.end <= stop.decided / 16000 + chunk_s + 1e-6
    for seed in (0, 1):
        pieces = _stream(rec, _pieces(talk, seed))
        assert _finals(pieces) == _finals(whole)
        assert _turns(pieces.take_speech_events()) == _turns(events)
    # batched: other streams beside it (one with no VAD of its own settings: the recogniser's)
    streams = [rec.create_stream() for _ in range(3)]
    signals = [talk, talk[: talk.size // 2], talk[::-1].copy()]
    for s, x in zip(streams, signals):
        s.accept_waveform(16000, x)
        s.input_finished()
    rec.decode_until_done(streams)
    assert _finals(streams[0]) == _finals(whole)
    assert _finals(streams[2]) == _finals(_stream(rec, [signals[2]]))
    # the control: without the VAD the rigged model's words over the noise hold rule 2 off
    plain = _stream(open_recognizer(tiny.path, Chunking(8, -1)), [talk])
    assert len(plain.final_results) < len(whole.final_results)
    assert plain.take_speech_events() == []


def test_a_streams_own_vad_settings(tiny, talk) -> None:
    rec = open_recognizer(tiny.path, Chunking(8, -1), vad="on")
    assert rec.vad_options is None and rec.vad is not None
    with pytest.raises(VadError, match="opened without a VAD"):  # the VAD is chosen at opening
        open_recognizer(tiny.path, Chunking(8, -1)).create_stream(vad=VadOptions())
    s = _stream(rec, [talk], vad=VadOptions(min_silence_ms=500, pad_ms=0))
    ruled = _stream(open_recognizer(tiny.path, Chunking(8, -1),
                                    endpoint=EndpointConfig(vad_silence=0.5)), [talk])  # fmt: skip
    assert _finals(s) == _finals(ruled)
    long_quiet = _stream(rec, [talk], vad=VadOptions(min_silence_ms=2500, pad_ms=0))
    assert len(long_quiet.final_results) < len(s.final_results)


def test_bad_vad_settings_are_one_line(tiny) -> None:
    import subprocess
    import sys

    with pytest.raises(ValueError, match=r"vad_threshold=1.5: give a probability"):
        EndpointConfig(vad_threshold=1.5)
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=rf"vad_silence={bad}: give 0 \(off\)"):
            EndpointConfig(vad_silence=bad)
    run = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", str(tiny.path),
         "--vad-silence", "-1", "x.wav"], capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2 and "--vad-silence -1" in run.stderr, run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", str(tiny.path),
         "--vad-silence", "inf", "x.wav"], capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2 and "--vad-silence inf: give 0 (off)" in run.stderr, run.stderr
