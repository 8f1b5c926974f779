"""Realtime ``server_vad`` turns decided by Silero VAD, driven by the official ``openai``
client: speech_started and speech_stopped where the VAD (run here on the same samples) hears
them, padded back by ``prefix_padding_ms``; the transcripts `wenet-lite stream --vad-silence`'s
segments; a longer ``silence_duration_ms`` joins the turns its pause split (the control); the
parameters echoed, bad ones refused with the parameter named."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("silero_vad")

from tests.serve.conftest import start_server  # noqa: E402
from tests.serve.test_realtime import _connect, _until  # noqa: E402
from wenet_lite.vad.online import SpeechTracker, track  # noqa: E402
from wenet_lite.vad.silero import SileroVad, VadOptions  # noqa: E402

FLAGS = ("--chunk-size", "4", "--left-chunks", "-1")
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def vad_server(tiny, tmp_path_factory):
    token = tmp_path_factory.mktemp("rtv") / "token"
    token.write_text("sekrit\n")
    s = start_server(tiny.path, *FLAGS, "--token-file", str(token), "--vad", "on")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def pauses(test_audio) -> np.ndarray:
    """int16 PCM at 16 kHz: speech, a 1.2 s pause, speech, a 0.7 s pause, speech."""
    rng = np.random.default_rng(3)
    quiet = [rng.normal(0, 1e-3, int(s * 16000)) for s in (1.2, 0.7)]
    x = np.concatenate([test_audio[0], quiet[0], test_audio[1], quiet[1], test_audio[2]])
    return np.round(np.clip(x, -1, 32767 / 32768) * 32768).astype("<i2")


def _session(silence_ms: int, prefix_ms: int) -> dict:
    turns = {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": silence_ms,
             "prefix_padding_ms": prefix_ms}  # fmt: skip
    return {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": turns}}}}  # fmt: skip


def _turns(pcm: np.ndarray, silence_ms: int, prefix_ms: int):
    tracker = SpeechTracker(VadOptions(0.5, 250, silence_ms, prefix_ms))
    tracker.accept(pcm.astype(np.float32) / 32768)
    track(SileroVad(), [tracker], [pcm.size])
    return tracker.take()


def _stream_json(model: Path, path: Path, silence: float) -> List[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", str(model), *FLAGS,
         "--vad-silence", str(silence), "--json", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def _run(port: int, pcm: np.ndarray, silence_ms: int, prefix_ms: int) -> List:
    events: List = []
    with _connect(port) as conn:
        _until(conn, "session.created", events)
        conn.send(_session(silence_ms, prefix_ms))
        updated = _until(conn, "session.updated", events)
        echoed = updated.session.audio.input.turn_detection
        assert (echoed.silence_duration_ms, echoed.prefix_padding_ms) == (silence_ms, prefix_ms)
        data = pcm.tobytes()
        for at in range(0, len(data), 6400):  # 200 ms a message
            conn.input_audio_buffer.append(audio=base64.b64encode(data[at : at + 6400]).decode())
        conn.input_audio_buffer.commit()
        turns = sum(e.kind == "started" for e in _turns(pcm, silence_ms, prefix_ms))
        for _ in range(turns):  # an item a turn
            _until(conn, COMPLETED, events)
    return events


def test_turns_follow_the_vad_and_its_parameters(vad_server, tiny, pauses, tmp_path) -> None:
    import soundfile as sf

    path = tmp_path / "pauses.wav"
    sf.write(path, pauses, 16000, subtype="PCM_16")
    short = _turns(pauses, 500, 100)
    stops = [e for e in short if e.kind == "stopped"]
    assert len(stops) == 2, short  # both pauses end a turn at 500 ms

    events = _run(vad_server.port, pauses, 500, 100)
    started = [e for e in events if e.type == "input_audio_buffer.speech_started"]
    stopped = [e for e in events if e.type == "input_audio_buffer.speech_stopped"]
    assert [e.audio_start_ms for e in started] == [
        round(e.at / 16) for e in short if e.kind == "started"
    ]
    assert [e.audio_end_ms for e in stopped[:2]] == [round(e.at / 16) for e in stops]
    texts: Dict[str, str] = {e.item_id: e.transcript for e in events if e.type == COMPLETED}
    lines = _stream_json(tiny.path, path, 0.5)
    assert [texts[e.item_id] for e in started] == [x["text"] for x in lines if x["type"] == "final"]
    # `stream --json` says where its VAD heard speech: the same turns, the starts unpadded
    heard = [(x["event"], x["time"]) for x in lines if x["type"] == "speech"]
    assert heard == [(e.kind, round(e.at / 16000, 3)) for e in _turns(pauses, 500, 0)]
    for e in started:  # every item: started, stopped, committed, completed, in that order
        kinds = [x.type for x in events if getattr(x, "item_id", None) == e.item_id]
        order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                 "input_audio_buffer.committed", COMPLETED]  # fmt: skip
        assert [k for k in kinds if k in order] == order, kinds

    # the control: at 1000 ms of silence the 0.7 s pause no longer ends a turn
    long = _run(vad_server.port, pauses, 1000, 300)
    joined = [e for e in long if e.type == "input_audio_buffer.speech_started"]
    assert len(joined) == len(started) - 1
    assert joined[0].audio_start_ms == max(0, started[0].audio_start_ms - 200)


def test_bad_turn_detection_parameters_are_named(vad_server) -> None:
    with _connect(vad_server.port) as conn:
        events: List = []
        _until(conn, "session.created", events)
        for given, param in [({"threshold": 1.5}, "threshold"),
                             ({"silence_duration_ms": -5}, "silence_duration_ms"),
                             ({"prefix_padding_ms": "300"}, "prefix_padding_ms")]:  # fmt: skip
            conn.send({"type": "session.update", "session": {"type": "transcription",
                       "audio": {"input": {"turn_detection": {"type": "server_vad",
                                                              **given}}}}})  # fmt: skip
            e = _until(conn, "error", events).error
            assert e.param == f"session.audio.input.turn_detection.{param}", e
        turns = {"type": "server_vad", "threshold": 0}
        conn.send({"type": "transcription_session.update", "session": {"turn_detection": turns}})
        e = _until(conn, "error", events).error
        assert e.param == "session.turn_detection.threshold"
