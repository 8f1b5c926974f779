"""OpenAI's Realtime transcription sessions on `wenet-lite serve`, driven by the official
``openai`` client (the endpointer's turns: `serve --vad off`; the VAD's turns are in
test_realtime_vad.py): with turn detection the session's transcripts are `wenet-lite stream`'s
final segments for the same audio written to a file at the session's rate (24 kHz PCM);
without it a committed buffer is one item with the stream's whole text (8 kHz G.711, decoded
as libsndfile decodes it); a clear drops its audio; bad events get OpenAI's error events and
the session goes on; a missing token is refused."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from wenet_lite.data.manifest import load_cuts
from wenet_lite.features.g711 import decode_alaw, decode_ulaw

openai = pytest.importorskip("openai")

from tests.serve.conftest import pieces, start_server  # noqa: E402

FLAGS = ("--chunk-size", "4", "--left-chunks", "-1", "--max-segment", "1.5")
"""(rule 3 of the endpointer ends the tiny model's segments: a session has several turns)"""


@pytest.fixture(scope="module")
def rt(tiny, tmp_path_factory):
    token = tmp_path_factory.mktemp("rt") / "token"
    token.write_text("sekrit\n")
    s = start_server(tiny.path, *FLAGS, "--token-file", str(token), "--vad", "off")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def speech(corpus: Path) -> np.ndarray:
    """Two test utterances with a second of silence between them, 16 kHz."""
    from wenet_lite.features.audio import load_audio

    files = [str(c.recording.sources[0].source) for c in list(load_cuts(corpus / "test-clean"))[:2]]
    gap = np.zeros(16000, np.float32)
    return np.concatenate([load_audio(files[0], 16000), gap, load_audio(files[1], 16000)])


def _stream_finals(model: str, path: Path, *flags: str) -> List[str]:
    """`wenet-lite stream --json` of a file: its final segments' texts."""
    out = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", model, *FLAGS, *flags,
         "--json", str(path)], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    return [x["text"] for x in lines if x["type"] == "final"]


def _connect(port: int, key: str = "sekrit"):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
    return client.realtime.connect(extra_query={"intent": "transcription"}, max_retries=0)


def _until(conn, kind: str, events: List, limit: float = 60) -> object:
    """Read events into ``events`` until one of type ``kind``; that one."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        event = conn.recv()
        events.append(event)
        if event.type == kind:
            return event
    raise AssertionError(f"no {kind} in {[e.type for e in events]}")


def _send_audio(conn, data: bytes, width: int, seed: int) -> None:
    """``data`` in pieces of random sizes (whole samples of ``width`` bytes)."""
    at = 0
    for piece in pieces(np.zeros(len(data) // width, np.float32), seed, largest=0.2):
        n = piece.size * width
        conn.input_audio_buffer.append(audio=base64.b64encode(data[at : at + n]).decode())
        at += n


def test_turns_are_what_stream_gives_for_the_same_24khz_file(rt, tiny, speech, tmp_path) -> None:
    import soundfile as sf

    from wenet_lite.features.audio import resample

    pcm = np.round(np.clip(resample(speech, 16000, 24000), -1, 32767 / 32768) * 32768)
    pcm = pcm.astype("<i2")
    path = tmp_path / "s24.wav"
    sf.write(path, pcm, 24000, subtype="PCM_16")
    expected = _stream_finals(tiny.path, path)
    assert len(expected) >= 3 and all(expected)

    events: List = []
    with _connect(rt.port) as conn:
        created = conn.recv()
        assert created.type == "session.created" and created.session.type == "transcription"
        fmt = created.session.audio.input.format
        assert (fmt.type, fmt.rate) == ("audio/pcm", 24000)  # OpenAI's default
        _send_audio(conn, pcm.tobytes(), 2, seed=1)
        conn.input_audio_buffer.commit()  # the end of the file: the open turn ends
        texts: Dict[str, str] = {}
        while len(texts) < len(expected):
            done = _until(conn, "conversation.item.input_audio_transcription.completed", events)
            texts[done.item_id] = done.transcript
    assert list(texts.values()) == expected
    duration_ms = len(pcm) / 24
    for item, text in texts.items():
        mine = [e for e in events if getattr(e, "item_id", None) == item]
        kinds = [e.type for e in mine]
        assert kinds[0] == "input_audio_buffer.speech_started", kinds
        assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index(
            "input_audio_buffer.committed"
        )
        start, stop = (
            mine[0].audio_start_ms,
            next(e.audio_end_ms for e in mine if e.type == "input_audio_buffer.speech_stopped"),
        )
        assert 0 <= start < stop <= duration_ms + 100
        deltas = [e.delta for e in mine if e.type.endswith(".delta")]
        assert "".join(deltas) == text  # greedy search: deltas grow to the final text
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    assert [e.previous_item_id for e in committed[1:]] == [e.item_id for e in committed[:-1]]

    # negative control: the same bytes declared as 16 kHz are other audio to the model
    with _connect(rt.port) as conn:
        _until(conn, "session.created", [])
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000}}}})  # fmt: skip
        _send_audio(conn, pcm.tobytes(), 2, seed=1)
        conn.input_audio_buffer.commit()
        events = []
        _until(conn, "conversation.item.input_audio_transcription.completed", events)
    assert [e.transcript for e in events if e.type.endswith(".completed")][0] != expected[0]


def test_completed_transcripts_carry_token_logprobs_when_included(rt, tiny, speech,
                                                                  tmp_path) -> None:  # fmt: skip
    """``include: [item.input_audio_transcription.logprobs]`` adds each token's log
    confidence to the completed transcripts: the tokens spell the transcript, and each word's
    mean token probability is the confidence `stream --json` gives that word."""
    import soundfile as sf

    from wenet_lite.features.audio import resample

    pcm = np.round(np.clip(resample(speech, 16000, 24000), -1, 32767 / 32768) * 32768)
    path = tmp_path / "s24.wav"
    sf.write(path, pcm.astype("<i2"), 24000, subtype="PCM_16")
    out = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", tiny.path, *FLAGS, "--json",
         str(path)], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    finals = [x for x in map(json.loads, out.splitlines()) if x["type"] == "final" and x["text"]]
    include = ["item.input_audio_transcription.logprobs"]
    done = []
    for asked in (include, None):
        with _connect(rt.port) as conn:
            _until(conn, "session.created", [])
            if asked:
                conn.session.update(session={"type": "transcription", "include": asked})
                assert _until(conn, "session.updated", []).session.include == asked
            _send_audio(conn, pcm.astype("<i2").tobytes(), 2, seed=3)
            conn.input_audio_buffer.commit()
            events: List = []
            kind = "conversation.item.input_audio_transcription.completed"
            done.append([_until(conn, kind, events) for _ in finals])
    assert all(e.logprobs is None for e in done[1]), "logprobs sent unasked"
    for event, final in zip(done[0], finals):
        assert event.transcript == final["text"]
        tokens = [lp.token for lp in event.logprobs]
        assert "".join(tokens) == event.transcript
        assert all(lp.logprob <= 0 and bytes(lp.bytes).decode() == lp.token
                   for lp in event.logprobs)  # fmt: skip
        words: List[List[float]] = []
        for k, lp in enumerate(event.logprobs):
            if k == 0 or lp.token.startswith(" "):
                words.append([])
            words[-1].append(float(np.exp(lp.logprob)))
        sure = [sum(w) / len(w) for w in words]
        assert sure == pytest.approx([w["confidence"] for w in final["words"]], abs=2e-3)
    # anything else in include is an error event naming the field
    with _connect(rt.port) as conn:
        _until(conn, "session.created", [])
        conn.session.update(session={"type": "transcription", "include": ["item.audio"]})
        error = _until(conn, "error", [])
    assert error.error.param == "session.include" and "item.audio" in error.error.message


@pytest.mark.parametrize("law", ["pcmu", "pcma"])
def test_a_committed_g711_buffer_is_one_item_as_stream_reads_the_file(
    rt, tiny, speech, tmp_path, law
) -> None:
    import io

    import soundfile as sf

    from wenet_lite.features.audio import resample

    low = resample(speech, 16000, 8000)
    subtype = "ULAW" if law == "pcmu" else "ALAW"
    raw = io.BytesIO()
    sf.write(raw, low, 8000, format="RAW", subtype=subtype)
    data = raw.getvalue()
    wav = tmp_path / f"{law}.wav"
    sf.write(wav, low, 8000, subtype=subtype)
    # our G.711 tables decode as libsndfile does
    theirs, _ = sf.read(wav, dtype="float32")
    mine = (decode_ulaw if law == "pcmu" else decode_alaw)(data)
    np.testing.assert_array_equal(mine, theirs)
    expected = " ".join(t for t in _stream_finals(tiny.path, wav) if t)
    assert expected

    events: List = []
    with _connect(rt.port) as conn:
        _until(conn, "session.created", events)
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": f"audio/{law}"}, "turn_detection": None}}})  # fmt: skip
        updated = _until(conn, "session.updated", events)
        assert updated.session.audio.input.format.type == f"audio/{law}"
        assert updated.session.audio.input.turn_detection is None
        # a clear drops what was appended before it
        conn.input_audio_buffer.append(audio=base64.b64encode(data[: len(data) // 3]).decode())
        conn.input_audio_buffer.clear()
        _until(conn, "input_audio_buffer.cleared", events)
        _send_audio(conn, data, 1, seed=2)
        conn.input_audio_buffer.commit()
        committed = _until(conn, "input_audio_buffer.committed", events)
        done = _until(conn, "conversation.item.input_audio_transcription.completed", events)
    assert done.item_id == committed.item_id and committed.previous_item_id is None
    assert done.transcript == expected
    assert abs(done.usage.seconds - len(data) / 8000) < 0.01
    assert not [e for e in events if e.type == "input_audio_buffer.speech_started"]


def test_bad_events_get_error_events_and_the_session_goes_on(rt, tiny, speech) -> None:
    pcm = (speech[:24000] * 32767).astype("<i2").tobytes()
    with _connect(rt.port) as conn:
        events: List = []
        _until(conn, "session.created", events)

        def error_of(event: dict) -> object:
            conn.send(event)
            return _until(conn, "error", events).error

        e = error_of({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"transcription": {"model": "whisper-1"}}}}})  # fmt: skip
        assert e.code == "model_not_found" and "whisper-1" in e.message
        assert e.param == "session.audio.input.transcription.model"
        e = error_of({"type": "input_audio_buffer.commit", "event_id": "mine"})
        assert e.code == "input_audio_buffer_commit_empty" and e.event_id == "mine"
        e = error_of({"type": "input_audio_buffer.append", "audio": "not base64!"})
        assert e.param == "audio"
        e = error_of({"type": "response.create"})
        assert e.type == "invalid_request_error" and "response.create" in e.message
        e = error_of({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 44100}}}}})  # fmt: skip
        assert "44100" in e.message
        for kind in (["audio/pcm"], {"a": 1}):  # not hashable: named, not a server error
            e = error_of({"type": "session.update", "session": {"type": "transcription",
                          "audio": {"input": {"format": {"type": kind}}}}})  # fmt: skip
            assert e.param == "session.audio.input.format.type" and e.code == "invalid_value"
            e = error_of({"type": "transcription_session.update",
                          "session": {"input_audio_format": kind}})  # fmt: skip
            assert e.param == "session.input_audio_format" and e.code == "invalid_value"
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
        e = error_of({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcmu"}}}}})  # fmt: skip
        assert "holds audio" in e.message
        conn.input_audio_buffer.commit()  # the session still transcribes
        _until(conn, "conversation.item.input_audio_transcription.completed", events)
    health = rt.health()
    assert health["failed"] == 0


def test_the_token_is_required(rt) -> None:
    from websockets.exceptions import InvalidStatus

    with pytest.raises((InvalidStatus, openai.OpenAIError)) as caught:
        with _connect(rt.port, key="wrong") as conn:
            conn.recv()
    assert "401" in str(caught.value)


def test_keywords_are_hotwords_of_the_session(tiny, corpus, speech, tmp_path) -> None:
    """``keywords`` set before any audio are the first buffer's hotwords: its transcript is
    `stream --hotwords` with them; a session without them is `stream` without, and differs."""
    import soundfile as sf

    from wenet_lite.data.manifest import cut_text
    from wenet_lite.features.audio import resample

    words = sorted({w for c in load_cuts(corpus / "test-clean") for w in cut_text(c).split()})
    phrases = [w.lower() for w in words[::2]]
    (tmp_path / "hot.txt").write_text("\n".join(phrases) + "\n")
    beam = ("--mode", "prefix_beam", "--beam", "4", "--hotwords-score", "3")
    pcm = np.round(np.clip(resample(speech, 16000, 24000), -1, 32767 / 32768) * 32768)
    pcm = pcm.astype("<i2")
    path = tmp_path / "s24.wav"
    sf.write(path, pcm, 24000, subtype="PCM_16")
    hot = " ".join(_stream_finals(tiny.path, path, *beam, "--hotwords", str(tmp_path / "hot.txt")))
    cold = " ".join(_stream_finals(tiny.path, path, *beam))
    assert hot != cold, "the phrases should change the transcript"
    s = start_server(tiny.path, *FLAGS, *beam)
    try:
        got = []
        for keywords in (phrases, None):
            with _connect(s.port, key="unused") as conn:
                events: List = []
                _until(conn, "session.created", events)
                transcription = {"keywords": keywords} if keywords else {}
                conn.session.update(session={"type": "transcription", "audio": {"input": {
                    "turn_detection": None, "transcription": transcription}}})  # fmt: skip
                updated = _until(conn, "session.updated", events)
                assert updated.session.audio.input.transcription.keywords == (keywords or [])
                _send_audio(conn, pcm.tobytes(), 2, seed=3)  # at once: no wait for the graph
                conn.input_audio_buffer.commit()
                done = _until(conn, "conversation.item.input_audio_transcription.completed",
                              events)  # fmt: skip
                got.append(done.transcript)
        assert got == [hot, cold]
    finally:
        assert s.stop() == 0, s.log()


def test_the_admission_rules_of_the_other_sockets_hold(tiny) -> None:
    """A page of another origin is refused, as on the other websocket paths; so is a
    connection past --max-connections; binary frames break the protocol (audio comes as
    append events) and close only that session."""
    from websockets.exceptions import ConnectionClosedError, InvalidStatus
    from websockets.sync.client import connect

    s = start_server(tiny.path, *FLAGS, "--max-connections", "1")
    url = f"ws://127.0.0.1:{s.port}/v1/realtime?intent=transcription"
    try:
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin="http://elsewhere.example").close()
        assert refused.value.response.status_code == 403
        with connect(url) as first:
            assert json.loads(first.recv(timeout=10))["type"] == "session.created"
            with pytest.raises(InvalidStatus) as full:
                connect(url).close()
            assert full.value.response.status_code == 503
            first.send(b"\x00\x01")
            with pytest.raises(ConnectionClosedError) as closed:
                while True:
                    first.recv(timeout=10)
            assert closed.value.rcvd.code == 1003
        # the server goes on: the closed session's place comes free once the server's side of
        # the close is done, which may be a moment after the client's
        deadline = time.monotonic() + 10
        while True:
            try:
                again = connect(url)
                break
            except InvalidStatus as e:
                assert e.response.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.05)
        with again:
            assert json.loads(again.recv(timeout=10))["type"] == "session.created"
    finally:
        assert s.stop() == 0, s.log()
