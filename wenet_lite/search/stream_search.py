"""One protocol for every search: a batched step over a chunk, each stream's state a value.

CTC greedy, the CTC prefix beam (word LM, hotwords), and the transducer's greedy and modified
beam searches all implement :class:`StreamSearch`. The streaming recogniser calls it once per
decoded chunk for every ready stream together, and the offline decoder once per batch of whole
utterances (one chunk of all their frames), so a search that keeps its state per stream and
gives each row what it would give alone streams exactly, batched or not, with no change to
either caller. A blank penalty is each search's own: subtracted from the blank's logit before
its log-softmax, as sherpa-onnx and icefall do.

Shapes: the legend in ``wenet_lite`` (B streams in the step, C frames of the chunk).
"""

from __future__ import annotations

import typing
from typing import List, NamedTuple, Optional, Sequence

import torch

from wenet_lite.config.fields import FieldError, Setting, literal
from wenet_lite.model.asr import ASRModel
from wenet_lite.search.context import ContextGraph
from wenet_lite.search.ctc_search import (
    Hypothesis,
    StreamingGreedySearch,
    StreamingPrefixBeamSearch,
    greedy_chunks,
    penalize_blank,
)
from wenet_lite.search.options import SearchModels, SearchOptions
from wenet_lite.search.transducer_search import TransducerSearch, TransducerState, check_transducer

__all__ = [
    "CtcGreedy",
    "CtcPrefixBeam",
    "SearchChunk",
    "SearchState",
    "StreamSearch",
    "Transducer",
    "make_search",
]


class SearchChunk(NamedTuple):
    """What the encoder gave for one chunk of B streams."""

    log_probs: Optional[torch.Tensor]
    """(B, C, V) the CTC head's log-probabilities (None only where a caller has the encoder's
    frames alone, for a search that ``needs_encoder``)"""
    encoded: Optional[torch.Tensor]
    """(B, C, D) the encoder's frames: given when the search ``needs_encoder``"""
    lens: List[int]
    """the valid frames of each row (a stream's last chunk may be shorter)"""


class SearchState(typing.Protocol):
    """One stream's search (one segment's: a closed segment starts a new one)."""

    @property
    def trailing_blanks(self) -> int:
        """Frames since the search last heard a token (the endpoint rules' silence)."""

    def hypotheses(self, nbest: int = 1) -> List[Hypothesis]:
        """The ``nbest`` best hypotheses so far, best first (at least one)."""


class StreamSearch(typing.Protocol):
    """A search over chunks of many streams at once."""

    needs_encoder: bool
    """whether :meth:`step` reads the encoder's frames (else they need not be kept)"""

    def new_state(self, context: Optional[ContextGraph] = None) -> SearchState:
        """A new stream's (or segment's) state; ``context``: its hotwords, where it takes them."""

    def step(self, chunk: SearchChunk, states: Sequence[SearchState]) -> List[SearchState]:
        """Advance each of B streams by its row of ``chunk``; the states after it, in order
        (the row's result must not depend on the other rows)."""


class CtcGreedy:
    """Greedy CTC: the batch's argmax path found in one pass on the log-probs' device
    (:func:`~wenet_lite.search.ctc_search.greedy_chunks`), only the new tokens copied back."""

    needs_encoder = False

    def __init__(self, blank_penalty: float = 0.0) -> None:
        self.blank_penalty = blank_penalty

    def new_state(self, context: Optional[ContextGraph] = None) -> StreamingGreedySearch:
        return StreamingGreedySearch()

    def step(self, chunk: SearchChunk, states: Sequence[SearchState]) -> List[SearchState]:
        searches = typing.cast(Sequence[StreamingGreedySearch], states)
        log_probs = penalize_blank(_log_probs(chunk), self.blank_penalty)
        last_ids = torch.tensor([s.last_id for s in searches])
        scores = torch.tensor([s.score for s in searches], dtype=torch.float64)
        paths = greedy_chunks(log_probs, torch.tensor(chunk.lens), last_ids, scores)
        for search, path in zip(searches, paths):
            search.accept_path(path)
        return list(states)


class CtcPrefixBeam:
    """The CTC prefix beam (a word LM and hotwords fused), on the host: one copy a batch."""

    needs_encoder = False

    def __init__(
        self, beam: int, nbest: int = 1, models: Optional[SearchModels] = None,
        token_min_logp: Optional[float] = None, blank_penalty: float = 0.0,
    ) -> None:  # fmt: skip
        self.beam, self.nbest = beam, nbest
        self.scorer = models.scorer if models is not None else None
        self.token_min_logp, self.blank_penalty = token_min_logp, blank_penalty

    def new_state(self, context: Optional[ContextGraph] = None) -> StreamingPrefixBeamSearch:
        return StreamingPrefixBeamSearch(
            self.beam, self.nbest, scorer=self.scorer, token_min_logp=self.token_min_logp,
            context=context,
        )  # fmt: skip

    def step(self, chunk: SearchChunk, states: Sequence[SearchState]) -> List[SearchState]:
        log_probs = penalize_blank(_log_probs(chunk), self.blank_penalty).float().cpu()
        for i, (search, n) in enumerate(zip(states, chunk.lens)):
            typing.cast(StreamingPrefixBeamSearch, search).accept(log_probs[i, :n])
        return list(states)


class Transducer:
    """The transducer head's greedy (``beam`` None) or modified beam search over the encoder's
    frames: one predictor and joiner call a frame for the whole batch (greedy)."""

    needs_encoder = True

    def __init__(self, model: ASRModel, beam: Optional[int] = None, max_symbols: int = 4,
                 blank_penalty: float = 0.0) -> None:  # fmt: skip
        assert model.transducer is not None, "make_search checks the head"
        self._search = TransducerSearch(model.transducer, beam, max_symbols, blank_penalty)

    def new_state(self, context: Optional[ContextGraph] = None) -> TransducerState:
        return self._search.new_state(context)

    def step(self, chunk: SearchChunk, states: Sequence[SearchState]) -> List[SearchState]:
        if chunk.encoded is None:
            raise ValueError("the transducer search needs the encoder's frames (needs_encoder)")
        own = typing.cast(Sequence[TransducerState], states)
        self._search.step(chunk.encoded.float(), chunk.lens, own)
        return list(states)


def _log_probs(chunk: SearchChunk) -> torch.Tensor:
    if chunk.log_probs is None:
        raise ValueError("a CTC search needs the chunk's log-probabilities")
    return chunk.log_probs


def make_search(
    options: SearchOptions, models: SearchModels, model: Optional[ASRModel], source: str
) -> StreamSearch:
    """The search ``options`` name (resolved: beam sizes set), over ``models`` (LM, hotwords)
    and, for the transducer modes, ``model``'s head; FieldError naming ``source`` when the
    model cannot run it."""
    penalty = options.blank_penalty
    if options.transducer:
        if model is None:
            raise FieldError(
                f"{literal(source)} holds the encoder only: {{mode}} needs the transducer "
                "head, so stream the model file", mode=Setting("mode", options.mode),
            )  # fmt: skip
        check_transducer(model, source, options.mode)
        beam = options.beam_size if options.mode == "transducer_beam" else None
        return Transducer(model, beam, options.max_symbols, penalty)
    if options.mode == "greedy":
        return CtcGreedy(penalty)
    assert options.beam_size is not None and options.nbest is not None, "resolved"
    return CtcPrefixBeam(options.beam_size, options.nbest, models, options.token_min_logp, penalty)
