"""The search protocol: a search the runtime has never seen (it emits nothing and keeps what
it heard of each stream's rows) streams through the recogniser as the built-in ones do, each
stream's state what it gets alone, restarted where the segment rules end a segment, with no
change under ``wenet_lite/runtime/``. A search that mixes up the rows (the control) differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pytest

from tests.runtime.test_streaming import _feed
from wenet_lite.model.chunking import Chunking
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.search.context import ContextGraph
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.stream_search import SearchChunk, StreamSearch


@dataclass(frozen=True)
class Heard:
    """What an always-blank search heard of one stream: its frames and each chunk's rows."""

    frames: int = 0
    rows: Tuple[Tuple[float, ...], ...] = ()

    @property
    def trailing_blanks(self) -> int:
        return self.frames  # it never hears a token

    def hypotheses(self, nbest: int = 1) -> List[Hypothesis]:
        return [Hypothesis([], 0.0, [], 1.0)]


class AlwaysBlank:
    """A fourth search: hears every frame, emits nothing; states are values."""

    needs_encoder = False

    def __init__(self, mixed_up: bool = False) -> None:
        self.mixed_up = mixed_up
        self.batches: List[int] = []

    def new_state(self, context: Optional[ContextGraph] = None) -> Heard:
        return Heard()

    def step(self, chunk: SearchChunk, states: Sequence[Heard]) -> List[Heard]:
        assert chunk.log_probs is not None
        self.batches.append(len(states))
        out = []
        for i, (state, n) in enumerate(zip(states, chunk.lens)):
            row = chunk.log_probs[0 if self.mixed_up else i, :n]  # (n, V)
            heard = tuple(float(v) for v in row.max(dim=-1).values)
            out.append(Heard(state.frames + n, state.rows + (heard,)))
        return out


def _heard(rec: StreamingRecognizer, audios: Sequence[np.ndarray], stagger: bool) -> List[Heard]:
    """Each stream's last state, the streams fed random pieces (stream k starting k steps late
    when staggered) and decoded together, or one at a time."""
    if not stagger:
        return [_heard(rec, [a], True)[0] for a in audios]
    streams = [rec.create_stream() for _ in audios]
    feeders = [
        _feed(s, a, np.random.default_rng(k)) for k, (s, a) in enumerate(zip(streams, audios))
    ]
    step = 0
    while not all(s.done for s in streams):
        for k, (s, feeder) in enumerate(zip(streams, feeders)):
            if step >= k and not s.fbank.finished and next(feeder, "end") == "end":
                s.input_finished()
        rec.decode_streams(streams)
        step += 1
    return [s.search for s in streams]


@pytest.mark.parametrize("endpoint", [EndpointConfig(enabled=False),
                                      EndpointConfig(rule1_min_silence=0.6)])  # fmt: skip
def test_a_fourth_search_streams_batched_as_alone(test_audio, tiny, endpoint) -> None:
    from wenet_lite.recognizer import EngineSpec, make_engine

    def recognizer(search: StreamSearch) -> StreamingRecognizer:
        engine = make_engine(EngineSpec(precision="fp32"), tiny.model, Chunking(4, -1))
        return StreamingRecognizer(engine, tiny.cfg, tiny.tokenizer, endpoint=endpoint,
                                   search=search)  # fmt: skip

    audios = test_audio[:4]
    search = AlwaysBlank()
    rec = recognizer(search)
    alone = _heard(rec, audios, stagger=False)
    together = _heard(rec, audios, stagger=True)
    assert max(search.batches) > 1 and all(h.frames for h in alone)
    for a, b in zip(alone, together):
        assert a.frames == b.frames and len(a.rows) == len(b.rows)
        assert np.allclose(np.concatenate(a.rows), np.concatenate(b.rows), atol=1e-4)
    frames = [len(a) // 640 for a in audios]  # each stream's encoder frames, about
    if endpoint.enabled:  # rule 1 (0.6 s of its blanks) restarted it: a segment's frames
        assert all(h.frames <= 15 + 4 for h in alone)
    else:
        assert all(abs(h.frames - f) <= 4 for h, f in zip(alone, frames))
    mixed = _heard(recognizer(AlwaysBlank(mixed_up=True)), audios, stagger=True)
    assert any(
        not np.allclose(np.concatenate(a.rows), np.concatenate(m.rows), atol=1e-4)
        for a, m in zip(alone, mixed)
    )  # the control: rows given to the wrong streams
