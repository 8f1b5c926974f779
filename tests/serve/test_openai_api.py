"""OpenAI's audio API on `wenet-lite serve`, driven by the official ``openai`` client: every
response format equals what `wenet-lite transcribe` writes for the same file and settings
(subtitles read back by third-party parsers), the models list, OpenAI's error shape and status
for bad requests, and the server still serving websocket streams after each."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from wenet_lite import transcribe
from wenet_lite.data.manifest import load_cuts
from wenet_lite.transcript import format_transcript

openai = pytest.importorskip("openai")

from tests.serve.conftest import sherpa_finals, sherpa_session, start_server  # noqa: E402

FLAGS = ("--chunk-size", "4", "--left-chunks", "-1")


@pytest.fixture(scope="module")
def api(tiny, tmp_path_factory):
    token = tmp_path_factory.mktemp("api") / "token"
    token.write_text("sekrit\n")
    s = start_server(tiny.path, *FLAGS, "--token-file", str(token), "--max-upload-mb", "1")
    yield s
    assert s.stop() == 0, s.log()


def _client(port: int, key: str = "sekrit"):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def audio_files(corpus: Path, tmp_path_factory):
    """Three test utterances (FLAC, 16 kHz) and one of them as a 44.1 kHz WAV (resampled in
    its stream, as `transcribe` resamples it)."""
    import soundfile as sf

    from wenet_lite.features.audio import load_audio, resample

    files = [str(c.recording.sources[0].source) for c in list(load_cuts(corpus / "test-clean"))[:3]]
    high = tmp_path_factory.mktemp("rates") / "cd.wav"
    sf.write(high, resample(load_audio(files[1], 16000), 16000, 44100), 44100, subtype="FLOAT")
    return [*files, str(high)]


def test_every_format_is_what_transcribe_writes(api, tiny, audio_files) -> None:
    import pysrt
    import webvtt

    client = _client(api.port)
    model = client.models.list().data
    assert [m.id for m in model] == [Path(tiny.path).stem]
    model_id = model[0].id
    assert client.models.retrieve(model_id).id == model_id
    for path in audio_files:
        mine = transcribe(tiny.path, path)  # full context, its speech regions: an upload's
        with open(path, "rb") as f:
            got = client.audio.transcriptions.create(model=model_id, file=f)
        assert got.text == mine.text and mine.text
        for fmt in ("srt", "vtt"):
            with open(path, "rb") as f:
                text = client.audio.transcriptions.create(
                    model=model_id, file=f, response_format=fmt
                )
            assert text == format_transcript(mine, fmt)
            if fmt == "srt":
                assert pysrt.from_string(text)[0].text.replace("\n", " ") in mine.text
            else:
                import io

                cues = webvtt.from_buffer(io.StringIO(text))
                assert cues[0].text.replace("\n", " ") in mine.text
        with open(path, "rb") as f:
            plain = client.audio.transcriptions.create(
                model=model_id, file=f, response_format="text"
            )
        assert plain == mine.text
        with open(path, "rb") as f:
            verbose = client.audio.transcriptions.create(
                model=model_id, file=f, response_format="verbose_json",
                timestamp_granularities=["word", "segment"],
            )  # fmt: skip
        assert verbose.text == mine.text and abs(verbose.duration - mine.duration) < 1e-3
        words = [(w.word, w.start, w.end) for w in verbose.words]
        assert words == [(w.text, round(w.start, 3), round(w.end, 3)) for w in mine.words]
        starts = [w[1] for w in words]
        assert starts == sorted(starts) and all(0 <= w[1] <= w[2] <= mine.duration + 0.05
                                                for w in words)  # fmt: skip
        assert [s.text for s in verbose.segments] == [s.text for s in mine.segments]
        sure = [w.confidence for w in verbose.words]  # the extra field: each word's own
        assert sure == [w.confidence for w in mine.words] and all(0 < c <= 1 for c in sure)
        assert len(set(sure)) > 1  # not the segment's one number for every word


def _status(call) -> tuple:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    body = caught.value.body
    assert set(body) == {"message", "type", "param", "code"}, body  # OpenAI's error object
    return caught.value.status_code, body["code"]


def test_bad_requests_get_openais_errors_and_the_server_goes_on(api, tiny, audio_files, tmp_path):
    model_id = Path(tiny.path).stem
    good = Path(audio_files[0]).read_bytes()
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF...." + bytes(range(256)) * 8)
    big = tmp_path / "big.wav"
    big.write_bytes(b"\0" * (1_100_000))  # over --max-upload-mb 1
    c = _client(api.port)
    cases = [
        (lambda: c.audio.transcriptions.create(model=model_id, file=garbage.open("rb")),
         (415, "unsupported_audio")),
        (lambda: c.audio.transcriptions.create(model="whisper-1", file=("a.flac", good)),
         (404, "model_not_found")),
        (lambda: c.models.retrieve("whisper-1"), (404, "model_not_found")),
        (lambda: _client(api.port, "wrong").audio.transcriptions.create(
            model=model_id, file=("a.flac", good)), (401, "invalid_api_key")),
        (lambda: _client(api.port, "wrong").models.list(), (401, "invalid_api_key")),
        (lambda: c.audio.transcriptions.create(model=model_id, file=big.open("rb")),
         (413, None)),
        (lambda: c.audio.transcriptions.create(model=model_id, file=("a.flac", good),
                                               language="de"), (400, "unsupported_language")),
    ]  # fmt: skip
    for call, expected in cases:
        assert _status(call) == expected
        # the server goes on: a websocket stream and a good request still work
    text = c.audio.transcriptions.create(model=model_id, file=("a.flac", good)).text
    assert text == transcribe(tiny.path, audio_files[0]).text
    import soundfile as sf

    samples, _ = sf.read(audio_files[0], dtype="float32")
    url = f"ws://127.0.0.1:{api.port}/?token=sekrit"
    session = asyncio.run(sherpa_session(url, samples, pace=0.0))
    streamed = transcribe(tiny.path, audio_files[0], chunk_size=4, left_chunks=-1).text
    assert " ".join(sherpa_finals(session.messages)) == streamed


def _raw(port: int, request: bytes) -> bytes:
    """``request``'s bytes sent as they are on a socket of their own; all the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_raw_request_without_a_token_or_to_another_path(api) -> None:
    def raw(request: bytes) -> bytes:
        return _raw(api.port, request)

    reply = raw(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Bearer" in reply
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "invalid_api_key"
    reply = raw(b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 404")
    reply = raw(b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in reply
    reply = raw(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer sekrit\r\nContent-Length: 3\r\n\r\nabc")  # fmt: skip
    assert reply.startswith(b"HTTP/1.1 400")
    assert api.health()["errors"] == 0


def test_uploads_are_cut_to_their_speech_as_transcribe_cuts_them(api, tiny, corpus, tmp_path):
    """Speech, 8 s of noise and tones, speech: the upload's words are `transcribe`'s with its
    VAD, none where the VAD heard no speech; decoded whole (the control) the rigged model
    writes words there."""
    pytest.importorskip("silero_vad")
    import soundfile as sf

    from tests.signals import noise_and_tones
    from wenet_lite.features.audio import load_audio

    a, b = (load_audio(str(c.recording.sources[0].source), 16000)
            for c in list(load_cuts(corpus / "test-clean"))[:2])  # fmt: skip
    noise = noise_and_tones(8.0, np.random.default_rng(5))
    path = tmp_path / "gapped.wav"
    sf.write(path, np.concatenate([a, noise, b]), 16000, subtype="PCM_16")
    with open(path, "rb") as f:
        got = _client(api.port).audio.transcriptions.create(
            model=Path(tiny.path).stem, file=f, response_format="verbose_json",
            timestamp_granularities=["word"],
        )  # fmt: skip
    mine = transcribe(tiny.path, str(path), vad=True)
    assert [(w.word, w.start) for w in got.words] == [
        (w.text, round(w.start, 3)) for w in mine.words
    ]
    from wenet_lite.features.audio import load_audio as read
    from wenet_lite.vad.silero import SileroVad

    regions = [(x / 16000, y / 16000) for x, y in SileroVad().regions(read(str(path), 16000))]
    assert len(regions) >= 2

    def outside(words) -> list:  # words where the VAD heard no speech
        return [w for w in words if not any(x <= w.start < y for x, y in regions)]

    assert got.words and not outside(got.words)
    whole = transcribe(tiny.path, str(path), vad=False)
    assert outside(whole.words)  # the control


def test_the_api_can_be_turned_off(tiny) -> None:
    s = start_server(tiny.path, *FLAGS, "--no-openai-api")
    try:
        with pytest.raises(openai.APIStatusError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="x",
                          max_retries=0).models.list()  # fmt: skip
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        with pytest.raises(InvalidStatus) as refused:  # no Realtime sessions either
            connect(f"ws://127.0.0.1:{s.port}/v1/realtime?intent=transcription").close()
        assert refused.value.response.status_code == 404
        connect(f"ws://127.0.0.1:{s.port}/").close()  # the sherpa-onnx protocol still
    finally:
        assert s.stop() == 0


def test_streamed_events_and_requests_beside_a_live_stream(api, tiny, corpus, tmp_path) -> None:
    import soundfile as sf

    from wenet_lite.features.audio import load_audio

    cuts = list(load_cuts(corpus / "test-clean"))
    a, b = (load_audio(c.recording.sources[0].source, 16000) for c in cuts[4:6])
    quiet = np.random.default_rng(0).normal(0, 10 ** (-70 / 20), 3 * 16000)
    joined = np.round(np.concatenate([a, quiet, b]) * 32768).clip(-32768, 32767) / 32768
    path = tmp_path / "two.wav"
    sf.write(path, joined, 16000, subtype="PCM_16")
    mine = transcribe(tiny.path, str(path), chunk_size=4, left_chunks=-1)  # the live stream's
    assert len(mine.segments) == 2
    whole = transcribe(tiny.path, str(path))  # an upload's: full context, speech regions
    model_id = Path(tiny.path).stem
    client = _client(api.port)

    def events():
        with open(path, "rb") as f:
            return list(client.audio.transcriptions.create(model=model_id, file=f, stream=True))

    def plain():
        return client.audio.transcriptions.create(
            model=model_id, file=("two.wav", path.read_bytes())
        ).text

    async def together():
        loop = asyncio.get_running_loop()
        url = f"ws://127.0.0.1:{api.port}/?token=sekrit"
        live = sherpa_session(url, joined.astype(np.float32), pace=0.005)
        jobs = [loop.run_in_executor(None, events)] + [
            loop.run_in_executor(None, plain) for _ in range(4)
        ]
        return await asyncio.gather(live, *jobs)

    session, streamed, *texts = asyncio.run(together())
    assert sherpa_finals(session.messages) == [s.text for s in mine.segments]  # unchanged
    assert texts == [whole.text] * 4
    *deltas, done = streamed
    assert [e.type for e in deltas] == ["transcript.text.delta"] * len(whole.segments)
    assert done.type == "transcript.text.done" and done.text == whole.text
    assert "".join(e.delta for e in deltas) == whole.text


def test_a_prompt_becomes_hotwords_with_the_prefix_beam(tiny, corpus, audio_files, tmp_path):
    """The prompt's phrases are this request's hotwords (`transcribe --hotwords` with them, as a
    stream at the server's chunking); without a prompt the request is `transcribe` in full
    context."""
    from wenet_lite.data.manifest import cut_text

    words = sorted({w for c in load_cuts(corpus / "test-clean") for w in cut_text(c).split()})
    phrases = [w.lower() for w in words[::2]]
    (tmp_path / "hot.txt").write_text("\n".join(phrases) + "\n")
    beam = dict(chunk_size=4, left_chunks=-1, mode="prefix_beam", beam=4, hotwords_score=3)
    files = audio_files[:3]
    hot = [t.text for t in transcribe(tiny.path, files, hotwords=str(tmp_path / "hot.txt"),
                                      **beam)]  # fmt: skip
    cold = [t.text for t in transcribe(tiny.path, files, **beam)]
    assert hot != cold, "the phrases should change a transcript"
    whole = [t.text for t in transcribe(tiny.path, files, mode="prefix_beam", beam=4)]
    s = start_server(tiny.path, *FLAGS, "--mode", "prefix_beam", "--beam", "4",
                     "--hotwords-score", "3")  # fmt: skip
    try:
        client = _client(s.port)
        model_id = Path(tiny.path).stem

        def ask(path: str, **extra) -> str:
            with open(path, "rb") as f:
                return client.audio.transcriptions.create(model=model_id, file=f, **extra).text

        assert [ask(p, prompt=", ".join(phrases)) for p in files] == hot
        assert [ask(p) for p in files] == whole  # no prompt: in full context
    finally:
        assert s.stop() == 0, s.log()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_uploads_in_flight_hold_no_memory_count_as_connections_and_time_out(tiny, audio_files):
    """Three clients each send 30 MB of a declared 95 MB and hold: the server's memory does
    not grow by their bodies (spooled to files as they arrive), a fourth connection is refused
    503 (they count against --max-connections), and after --idle-timeout each held request is
    answered 408; then a whole request is answered as ever."""
    s = start_server(tiny.path, *FLAGS, "--max-connections", "3", "--idle-timeout", "5",
                     "--max-upload-mb", "100", "--max-connections-per-peer", "0")  # fmt: skip
    held = []
    try:
        before = _rss_mb(s.proc.pid)
        head = (b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b"multipart/form-data; boundary=b\r\nContent-Length: 95000000\r\n\r\n")  # fmt: skip
        part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.wav"\r\n\r\n'
        for _ in range(3):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            c.sendall(head + part + b"\0" * 30_000_000)
            held.append(c)
        grown = _rss_mb(s.proc.pid) - before
        reply = _raw(s.port, head)  # a fourth connection
        assert reply.startswith(b"HTTP/1.1 503") and b"limit of 3 connections" in reply
        assert grown < 50, f"the server grew by {grown:.0f} MB with 90 MB of bodies in flight"
        for c in held:
            assert c.recv(65536).startswith(b"HTTP/1.1 408")  # within the idle timeout
            c.close()  # as a client does on its answer: the server's count goes down
        held.clear()
        time.sleep(0.5)
        model = Path(tiny.path).stem
        got = _client(s.port).audio.transcriptions.create(model=model, file=Path(audio_files[0]))
        assert got.text == transcribe(tiny.path, audio_files[0]).text
    finally:
        for c in held:
            c.close()
        assert s.stop() == 0, s.log()


def test_uploads_stream_when_told_and_full_context_differs(tiny, audio_files) -> None:
    """``--upload-context streamed``: an upload is decoded as a live stream at the server's
    chunking (`transcribe --chunk-size 4`), which on this model is other text than the full
    context the default gives (so the equality tests above could fail)."""
    s = start_server(tiny.path, *FLAGS, "--upload-context", "streamed")
    try:
        model = Path(tiny.path).stem
        got = _client(s.port).audio.transcriptions.create(model=model, file=Path(audio_files[0]))
        chunked = transcribe(tiny.path, audio_files[0], chunk_size=4, left_chunks=-1).text
        assert got.text == chunked != transcribe(tiny.path, audio_files[0]).text
    finally:
        assert s.stop() == 0, s.log()


def test_a_chunked_upload_is_taken_as_it_arrives(api, tiny, audio_files) -> None:
    """Transfer-Encoding: chunked (what a client streaming its upload sends; `requests` with a
    generator body here) is decoded into the spool as it comes; a malformed chunk is 400 and a
    chunked body over --max-upload-mb 413, each in its own request."""
    import requests

    audio = Path(audio_files[0]).read_bytes()
    boundary = "b0undary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n"
            f"{Path(tiny.path).stem}\r\n--{boundary}\r\nContent-Disposition: form-data; "
            f"name=\"file\"; filename=\"a.flac\"\r\n\r\n").encode() + audio + (
            f"\r\n--{boundary}--\r\n").encode()  # fmt: skip

    def pieces(data: bytes, size: int):
        for i in range(0, len(data), size):
            yield data[i : i + size]

    url = f"http://127.0.0.1:{api.port}/v1/audio/transcriptions"
    headers = {"Authorization": "Bearer sekrit",
               "Content-Type": f"multipart/form-data; boundary={boundary}"}  # fmt: skip
    got = requests.post(url, data=pieces(body, 777), headers=headers, timeout=60)
    assert got.status_code == 200, got.text
    assert got.json()["text"] == transcribe(tiny.path, audio_files[0]).text

    def raw(request: bytes) -> bytes:
        return _raw(api.port, request)

    head = (b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit"
            b"\r\nContent-Type: multipart/form-data; boundary=b"
            b"\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.wav"\r\n\r\n'
    assert raw(head + b"zz\r\nabc\r\n").startswith(b"HTTP/1.1 400")  # not hexadecimal
    bad = b"%x\r\n" % len(part) + part + b"XY0\r\n\r\n"  # no CRLF after the data
    assert raw(head + bad).startswith(b"HTTP/1.1 400")
    data = part + b"\0" * (20 * 65536)
    big = b"".join(b"%x\r\n" % len(data[i : i + 65536]) + data[i : i + 65536] + b"\r\n"
                   for i in range(0, len(data), 65536))  # fmt: skip
    assert raw(head + big).startswith(b"HTTP/1.1 413")  # 1.3 MB over the 1 MB limit
    # a boundary past RFC 2046's 70 bytes: 400 naming it, the server unharmed (70 is taken)
    for size, status in ((300, b"HTTP/1.1 400"), (70, b"HTTP/1.1 200")):
        b = "x" * size
        form = (f'--{b}\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
                f"{Path(tiny.path).stem}\r\n"
                f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="a.flac"'
                f"\r\n\r\n").encode() + audio + f"\r\n--{b}--\r\n".encode()  # fmt: skip
        answer = raw(
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: "
            b"Bearer sekrit\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary="
            + b.encode()
            + b"\r\nContent-Length: %d\r\n\r\n" % len(form)
            + form
        )
        assert answer.startswith(status), answer[:300]
        assert size <= 70 or b"at most 70" in answer


def test_the_form_takes_any_split_of_the_bytes(tmp_path) -> None:
    """The multipart parser spools the file part as it arrives, whatever the reads' sizes: the
    file is the bytes sent, the fields their values; a cut-off body and a second file are
    refused; the spooled file goes with the request unless it was taken."""
    import os

    from wenet_lite.serve.http_front import BodyError
    from wenet_lite.serve.upload_form import UploadForm

    rng = np.random.default_rng(0)
    data = bytes(rng.integers(0, 256, 50000, dtype=np.uint8))
    b = "XyZ-b0undary"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ntiny\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d/a b.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode() + data + (
            f"\r\n--{b}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\n"
            f"caf\u00e9, tea\r\n--{b}--\r\n").encode()  # fmt: skip
    for _ in range(10):
        cuts = sorted(rng.integers(0, len(body), 8).tolist())
        form = UploadForm(f"multipart/form-data; boundary={b}")
        for x, y in zip([0, *cuts], [*cuts, len(body)]):
            form.write(body[x:y])
        form.finish()
        assert form.fields == {"model": ["tiny"], "prompt": ["caf\u00e9, tea"]}
        assert form.filename == "a b.wav" and Path(form.path).read_bytes() == data
        form.discard()
        assert not os.path.exists(form.path)
    taken = UploadForm(f"multipart/form-data; boundary={b}")
    taken.write(body)
    taken.finish()
    path = taken.take()
    taken.discard()
    assert Path(path).read_bytes() == data  # the caller's now
    os.unlink(path)
    cut = UploadForm(f"multipart/form-data; boundary={b}")
    cut.write(body[:-10])
    with pytest.raises(BodyError, match="cut off"):
        cut.finish()
    cut.discard()
    twice = UploadForm(f"multipart/form-data; boundary={b}")
    with pytest.raises(BodyError, match="more than one 'file'"):
        twice.write(body[: body.index(data) + 10] + f"\r\n--{b}".encode() + body[58:200])
    twice.discard()
    with pytest.raises(BodyError, match="multipart/form-data"):
        UploadForm("application/json")
