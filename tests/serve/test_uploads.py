"""Uploads decoded in full context by one thread: what arrives together is decoded in one
batch, each result equal to its file decoded alone; a file longer than the window is decoded
in windows, as `transcribe` does; a failure reaches its request only."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import List

import numpy as np
import pytest

from wenet_lite.features.audio import AudioError
from wenet_lite.recognizer import EngineSpec, open_recognizer
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.serve.uploads import UploadDecoder


def _decoder(tiny, window_s: float = 30.0, max_batch: int = 8) -> UploadDecoder:
    options = DecodeOptions(max_window_seconds=window_s, window_overlap_seconds=0.5,
                            window_progress=False)  # fmt: skip
    rec = open_recognizer((tiny.model, tiny.tokenizer, tiny.cfg), None, None, None,
                          EngineSpec(threads=1), offline=options)  # fmt: skip
    return UploadDecoder(rec, max_batch)


def _tokens(hyps) -> List[int]:
    return list(hyps[0].tokens)


def test_uploads_arriving_together_share_a_batch_and_equal_alone(tiny, test_audio) -> None:
    uploads = _decoder(tiny)
    pool = concurrent.futures.ThreadPoolExecutor(2)

    gate = threading.Event()
    uploads._pool.submit(gate.wait, 60)  # the decode thread is busy until all six wait

    async def all_at_once():
        async def open_the_gate():
            while len(uploads._pending) < 6:
                await asyncio.sleep(0.01)
            gate.set()

        opener = asyncio.ensure_future(open_the_gate())
        got = await asyncio.gather(*(uploads.hypotheses(a, 16000, f"u{i}", pool)
                                     for i, a in enumerate(test_audio[:6])))  # fmt: skip
        await opener
        return got

    together = asyncio.run(all_at_once())
    assert uploads.decoded == 6 and uploads.batches == 1  # all six in one batch
    alone = [uploads.rec.recognize(a, 16000) for a in test_audio[:6]]
    assert [_tokens(h) for h in together] == [_tokens(h) for h in alone]
    assert any(_tokens(h) for h in alone)


def test_a_long_upload_is_decoded_in_windows_as_transcribe_does(tiny, test_audio) -> None:
    uploads = _decoder(tiny, window_s=2.0)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    long = np.concatenate(test_audio[:4])  # well over the 2 s window
    short = test_audio[4][:16000]

    async def both():
        return await asyncio.gather(uploads.hypotheses(long, 16000, "long", pool),
                                    uploads.hypotheses(short, 16000, "short", pool))  # fmt: skip

    got_long, got_short = asyncio.run(both())
    assert _tokens(got_long) == _tokens(uploads.rec.recognize(long, 16000))  # windows
    assert _tokens(got_short) == _tokens(uploads.rec.recognize(short, 16000))


def test_a_failing_upload_fails_alone(tiny, test_audio, monkeypatch) -> None:
    uploads = _decoder(tiny)
    pool = concurrent.futures.ThreadPoolExecutor(1)

    async def one_bad():
        bad = uploads.hypotheses(np.zeros(0, np.float32), 8000, "empty", pool)
        good = uploads.hypotheses(test_audio[0], 16000, "good", pool)
        return await asyncio.gather(bad, good, return_exceptions=True)

    bad, good = asyncio.run(one_bad())
    assert isinstance(bad, (AudioError, ValueError)) and _tokens(good)
    calls = []

    def broken(feats):
        calls.append(len(feats))
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(uploads.rec, "recognize_batch", broken)
    with pytest.raises(RuntimeError, match="a bug in the model"):
        asyncio.run(uploads.hypotheses(test_audio[0], 16000, "x", pool))
    assert calls == [1]
    monkeypatch.undo()  # the decoder goes on after a failure
    assert _tokens(asyncio.run(uploads.hypotheses(test_audio[0], 16000, "y", pool)))


def test_a_bad_upload_context_is_named() -> None:
    from wenet_lite.serve.options import ServerOptions

    with pytest.raises(ValueError, match="upload_context must be full or streamed, got 'whole'"):
        ServerOptions(upload_context="whole")  # type: ignore[arg-type]
