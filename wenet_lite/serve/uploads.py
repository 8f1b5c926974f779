"""Uploaded files decoded in full context: what `wenet-lite transcribe FILE` computes, for a
request that has the whole file and no latency to keep.

With a VAD, an upload's speech regions are found first (in the request pool) and each is
queued as an utterance of its own, so the regions of one upload are batched like many uploads
and non-speech costs no encoder time; the transcript is `transcribe`'s with its VAD.
Requests queue their features; one thread decodes them, the utterances waiting at that moment
in one padded batch (at most ``max_batch`` of them, none longer than the window), the longer
ones alone in overlapping windows (``runtime/long_audio.py``). Batched equals alone (the
offline recogniser's invariant), so a request's text does not depend on what else arrived. The
thread is not the streams' decode thread: a long upload never holds up a live stream's step
(they share the CPU's cores, not a turn).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from typing import List

import numpy as np
import torch

from wenet_lite.runtime.offline import OfflineRecognizer
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.transcript import Transcript, pauses_transcript

__all__ = ["UploadDecoder"]

_log = logging.getLogger("wenet_lite.serve")


@dataclass(eq=False)  # compared by identity (its tensor has no truth value)
class _Waiting:
    feats: torch.Tensor
    """(T_in, F)"""
    name: str
    done: asyncio.Future
    loop: asyncio.AbstractEventLoop
    long: bool
    """over the window: decoded alone, in windows"""


class UploadDecoder:
    """The full-context decoding of a server's uploads (see the module docstring)."""

    def __init__(self, recognizer: OfflineRecognizer, max_batch: int) -> None:
        self.rec = recognizer
        self.max_batch = max(1, max_batch)
        self._pending: List[_Waiting] = []
        self._lock = threading.Lock()
        self._running = False
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="uploads")
        self.batches = 0
        self.decoded = 0

    async def transcript(self, samples: np.ndarray, rate: int, name: str, pause: float,
                         pool: concurrent.futures.Executor) -> Transcript:  # fmt: skip
        """One upload's transcript: decoded by its speech spans (the recogniser's VAD finds
        them, in the request pool), each span queued as an utterance of its own."""
        loop = asyncio.get_running_loop()
        spans = await loop.run_in_executor(pool, self.rec.speech_spans, samples, rate)
        found = await asyncio.gather(
            *(self.hypotheses(samples[a:b], rate, name, pool) for a, b in spans)
        )
        results = self.rec.span_results(spans, found, rate, pause)
        return pauses_transcript(name, results, samples.size / rate, pause)

    async def hypotheses(self, samples: np.ndarray, rate: int, name: str,
                         pool: concurrent.futures.Executor) -> List[Hypothesis]:  # fmt: skip
        """The n best of one upload's samples (its features computed in ``pool``)."""
        loop = asyncio.get_running_loop()
        feats = await loop.run_in_executor(pool, self.rec.features, samples, rate, name)
        long = self.rec.needs_windows(feats)
        waiting = _Waiting(feats, name, loop.create_future(), loop, long)
        with self._lock:
            self._pending.append(waiting)
            start = not self._running
            self._running = True
        if start:
            loop.run_in_executor(self._pool, self._drain)
        return await waiting.done

    def _drain(self) -> None:
        """Decode what is waiting, batch after batch, until nothing is. Nothing escapes it:
        a request whose future were never set would wait for ever."""
        while True:
            with self._lock:
                batch = self._next_batch()
                if not batch:
                    self._running = False
                    return
            self._decode(batch)

    def _next_batch(self) -> List[_Waiting]:
        """The oldest long upload alone, else up to max_batch short ones (oldest first)."""
        if not self._pending:
            return []
        if self._pending[0].long:
            return [self._pending.pop(0)]
        short = [w for w in self._pending if not w.long][: self.max_batch]
        taken = {id(w) for w in short}
        self._pending = [w for w in self._pending if id(w) not in taken]
        return short

    def _decode(self, batch: List[_Waiting]) -> None:
        try:
            if batch[0].long:
                results = [self.rec.recognize_long(batch[0].feats, batch[0].name)]
            else:
                results = self.rec.recognize_batch([w.feats for w in batch])
            self.batches += 1
            self.decoded += len(batch)
        except Exception as e:  # noqa: BLE001 - each request gets its failure
            _log.exception("decoding %d upload(s) failed", len(batch))
            for w in batch:
                w.loop.call_soon_threadsafe(_fail, w.done, e)
            return
        for w, hyps in zip(batch, results):
            w.loop.call_soon_threadsafe(_finish, w.done, hyps)


def _finish(done: asyncio.Future, hyps: List[Hypothesis]) -> None:
    if not done.done():  # its request may have gone
        done.set_result(hyps)


def _fail(done: asyncio.Future, error: Exception) -> None:
    if not done.done():
        done.set_exception(error)
