"""`serve --punct DIR`: the final results of both websocket protocols and Realtime's completed
transcripts are `stream --punct`'s, and every OpenAI response format is `transcribe --punct`'s;
partial results stay as recognised. The control: without --punct the texts differ."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from tests.serve.conftest import (
    sherpa_finals,
    sherpa_session,
    start_server,
    wenet_finals,
    wenet_session,
)
from wenet_lite import transcribe
from wenet_lite.data.manifest import load_cuts
from wenet_lite.features.audio import load_audio
from wenet_lite.transcription import format_transcript

openai = pytest.importorskip("openai")

FLAGS = ("--chunk-size", "4", "--left-chunks", "-1")


@pytest.fixture(scope="module")
def served(tiny, punct_model):
    s = start_server(tiny.path, *FLAGS, "--punct", str(punct_model))
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def files(corpus: Path) -> List[str]:
    return [str(c.recording.sources[0].source) for c in list(load_cuts(corpus / "test-clean"))[:3]]


def _stream_finals(model: Path, paths: List[str], *flags: str) -> Dict[str, List[str]]:
    out = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "stream", "--model", str(model), *FLAGS, *flags,
         "--json", *paths], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    finals: Dict[str, List[str]] = {p: [] for p in paths}
    for line in out.splitlines():
        record = json.loads(line)
        if record["type"] == "final" and record["text"]:
            finals[record["file"]].append(record["text"])
    return finals


def test_websocket_finals_are_punctuated_as_stream_punctuates(served, tiny, punct_model, files):
    reference = _stream_finals(tiny.path, files, "--punct", str(punct_model))
    plain = _stream_finals(tiny.path, files)
    assert all(reference.values()) and reference != plain  # the control

    async def sessions():
        audio = [load_audio(f, 16000) for f in files]
        return await asyncio.gather(
            *[sherpa_session(served.url, a, seed=i, pace=0.01) for i, a in enumerate(audio)],
            *[wenet_session(served.url, a, seed=9 + i, pace=0.01) for i, a in enumerate(audio)],
        )

    got = asyncio.run(sessions())
    for i, path in enumerate(files):
        assert sherpa_finals(got[i].messages) == reference[path]
        assert [b["sentence"] for b in wenet_finals(got[len(files) + i].messages)] == reference[
            path
        ]
        partials = [m["text"] for m in got[i].messages
                    if isinstance(m, dict) and not m["is_final"] and m["text"]]  # fmt: skip
        assert partials and all(p == p.upper() for p in partials)  # as recognised


def test_every_openai_format_is_transcribes(served, tiny, punct_model, files) -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key="sekrit",
                           max_retries=0)  # fmt: skip
    model = client.models.list().data[0].id
    for path in files:
        mine = transcribe(tiny.path, path, punct=punct_model)  # an upload's
        assert mine.text != transcribe(tiny.path, path).text  # the control
        with open(path, "rb") as f:
            assert client.audio.transcriptions.create(model=model, file=f).text == mine.text
        for fmt in ("srt", "vtt", "text"):
            with open(path, "rb") as f:
                got = client.audio.transcriptions.create(model=model, file=f, response_format=fmt)
            assert got == (mine.text if fmt == "text" else format_transcript(mine, fmt))
        with open(path, "rb") as f:
            verbose = client.audio.transcriptions.create(
                model=model, file=f, response_format="verbose_json",
                timestamp_granularities=["word", "segment"],
            )  # fmt: skip
        assert [(w.word, w.start) for w in verbose.words] == [
            (w.text, round(w.start, 3)) for w in mine.words
        ]


def test_realtime_completed_transcripts_are_punctuated(served, tiny, punct_model, files):
    path = files[0]
    expected = _stream_finals(tiny.path, [path], "--punct", str(punct_model))[path]
    pcm = np.round(np.clip(load_audio(path, 16000), -1, 32767 / 32768) * 32768).astype("<i2")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{served.port}/v1", api_key="sekrit",
                           max_retries=0)  # fmt: skip
    texts: List[str] = []
    with client.realtime.connect(extra_query={"intent": "transcription"}, max_retries=0) as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000}}}})  # fmt: skip
        data = pcm.tobytes()
        for at in range(0, len(data), 6400):
            conn.input_audio_buffer.append(audio=base64.b64encode(data[at : at + 6400]).decode())
        conn.input_audio_buffer.commit()
        deadline = time.monotonic() + 60
        while len(texts) < len(expected) and time.monotonic() < deadline:
            event = conn.recv()
            if event.type == "conversation.item.input_audio_transcription.completed":
                texts.append(event.transcript)
    assert texts == expected
