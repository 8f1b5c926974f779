"""The decode thread's batch window: a ready stream waits (at most the window) for others to
share its step while fewer than half the live streams are ready; a lone stream, a finished
one, one with audio queued behind its chunk, a full batch or a window of 0 step at once; what
is decoded is unchanged."""

from __future__ import annotations

import time
from typing import List, Optional, Tuple

import numpy as np
import pytest

from wenet_lite.model.chunking import Chunking
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.engines import TorchEngine
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.search.options import SearchOptions
from wenet_lite.serve.connection import COUNTERS, Client, Counters
from wenet_lite.serve.decode_thread import DecodeThread
from wenet_lite.serve.protocols import SherpaProtocol
from wenet_lite.serve.workers import Board


class _Peer:
    address: Optional[Tuple[str, int]] = ("127.0.0.1", 1)

    def unsent(self) -> int:
        return 0

    def abort(self, code: int, reason: str) -> None:
        pass


@pytest.fixture(scope="module")
def rec(tiny) -> StreamingRecognizer:
    return StreamingRecognizer(
        TorchEngine(tiny.model, Chunking(4, 2)), tiny.cfg, tiny.tokenizer, SearchOptions(),
        endpoint=EndpointConfig(enabled=False), model=tiny.model,
    )  # fmt: skip


def _thread(rec: StreamingRecognizer, window_ms: float, max_batch: int = 64) -> DecodeThread:
    return DecodeThread(rec, max_batch, Counters(), Board(1, COUNTERS), 0, "",
                        batch_window_ms=window_ms)  # fmt: skip


def _clients(rec: StreamingRecognizer, n: int) -> List[Client]:
    return [Client(str(i), SherpaProtocol(), _Peer(), rec.create_stream()) for i in range(n)]


def _give(c: Client, samples: np.ndarray, finished: bool = False) -> None:
    c.inbox.append(samples)
    c.received += samples.size
    c.finished = finished


def _chunk(rec: StreamingRecognizer, test_audio, i: int) -> np.ndarray:
    """One chunk's window of audio and a little more: enough to make a stream ready."""
    return test_audio[i % len(test_audio)][: (rec.window_size + 5) * rec.hop_samples]


def test_a_few_ready_streams_wait_for_others_then_share_one_step(rec, test_audio) -> None:
    thread = _thread(rec, 100.0)
    clients = _clients(rec, 8)
    _give(clients[0], _chunk(rec, test_audio, 0))
    results, more, wait = thread.step(clients)
    assert 0.05 < wait <= 0.1 + 1e-6 and more and results == []
    assert thread.counters.steps == 0  # nothing decoded: it waits for the window
    for c in clients[1:3]:  # two more streams become ready within the window
        _give(c, _chunk(rec, test_audio, int(c.id)))
    time.sleep(wait)
    results, more, wait = thread.step(clients)
    assert wait == 0.0
    assert (thread.counters.steps, thread.counters.batched) == (1, 3)  # one batch of three
    assert {c.id for c, _, _ in results} == {"0", "1", "2"}


def test_without_a_window_each_ready_stream_steps_at_once(rec, test_audio) -> None:
    """The negative control: the same arrivals with a window of 0 are three steps of one."""
    thread = _thread(rec, 0.0)
    clients = _clients(rec, 8)
    for c in clients[:3]:
        _give(c, _chunk(rec, test_audio, int(c.id)))
        results, _, wait = thread.step(clients)
        assert wait == 0.0 and [r[0].id for r in results] == [c.id]
    assert (thread.counters.steps, thread.counters.batched) == (3, 3)


@pytest.mark.parametrize("case", ["alone", "half ready", "finished", "batch full", "behind"])
def test_nothing_waits_where_waiting_gains_nothing(rec, test_audio, case: str) -> None:
    n, ready, max_batch = {"alone": (1, 1, 64), "half ready": (8, 4, 64), "finished": (8, 1, 64),
                           "batch full": (8, 2, 2), "behind": (8, 1, 64)}[case]  # fmt: skip
    thread = _thread(rec, 100.0, max_batch)
    clients = _clients(rec, n)
    for c in clients[:ready]:
        audio = _chunk(rec, test_audio, int(c.id))
        if case == "behind":  # more than a second queued behind its chunk: sent fast
            audio = np.concatenate([audio, np.zeros(2 * rec.cfg.features.sample_rate, np.float32)])
        _give(c, audio, finished=case == "finished")
    results, _, wait = thread.step(clients)
    assert wait == 0.0 and thread.counters.steps >= 1
    assert {r[0].id for r in results} >= {c.id for c in clients[:ready]}


def test_the_window_changes_no_transcript(rec, test_audio) -> None:
    """Streams fed in a staggered way decode to the same finals with and without the window."""

    def run(window_ms: float) -> Tuple[List[str], int]:
        thread = _thread(rec, window_ms)
        clients = _clients(rec, 6)
        audio = [test_audio[i % len(test_audio)] for i in range(6)]
        piece = 3200
        pos = [0] * 6
        out: dict = {c.id: [] for c in clients}
        for tick in range(400):
            for i, c in enumerate(clients):
                if (tick + i) % 3 == 0 and pos[i] < audio[i].size:  # staggered arrivals
                    end = pos[i] + piece
                    _give(c, audio[i][pos[i] : end], finished=end >= audio[i].size)
                    pos[i] = end
            results, _, wait = thread.step(clients)
            for c, messages, _ in results:
                out[c.id] += [m for m in messages if '"is_final": true' in m]
            if wait:
                time.sleep(wait)
            if all(c.eof for c in clients):
                break
        assert all(c.eof for c in clients), "every stream ends"
        finals = [m for c in clients for m in out[c.id]]
        assert any('"text": ""' not in m for m in finals), "some final has words"
        return finals, thread.counters.steps

    (with_window, steps_with), (without, steps_without) = run(30.0), run(0.0)
    assert with_window == without
    assert steps_with < steps_without  # the window did batch them
