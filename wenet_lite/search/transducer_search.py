"""Transducer search over encoder frames: greedy (up to ``max_symbols`` a frame) and modified
beam search (one symbol a frame, icefall's and sherpa-onnx's), one-shot and streaming.

A search's state is a stream's: its hypotheses, each with the predictor's last ``context``
tokens (the stateless predictor needs nothing else). :meth:`TransducerSearch.step` takes a
batch of streams' next encoder frames and advances each stream's state; the one-shot functions
are one step over the whole utterance, so chunking never changes a result and a batch gives
each stream what it gets alone (the joiner and predictor run per row).

Shapes: the legend in ``wenet_lite``; J the joiner's width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from wenet_lite.config.fields import FieldError, Setting, literal
from wenet_lite.model.asr import ASRModel
from wenet_lite.model.transducer import TransducerHead
from wenet_lite.search.context import ContextGraph
from wenet_lite.search.ctc_search import Hypothesis

__all__ = [
    "TransducerSearch",
    "check_transducer",
    "TransducerState",
    "transducer_beam_search",
    "transducer_greedy_search",
]


@dataclass
class _Path:
    """One hypothesis of a stream: its tokens, their frames and probabilities, its score (the
    log-probability of its paths) and, with hotwords, its context-graph state and bonus."""

    tokens: Tuple[int, ...] = ()
    times: Tuple[int, ...] = ()
    probs: Tuple[float, ...] = ()
    score: float = 0.0
    hot: int = 0
    hot_score: float = 0.0

    def rank(self) -> float:
        return self.score + self.hot_score

    def context(self, n: int) -> Tuple[int, ...]:
        """The last ``n`` tokens, blanks (0) before the first."""
        last = self.tokens[-n:] if n else ()
        return (0,) * (n - len(last)) + tuple(last)


@dataclass
class TransducerState:
    """A stream's search: its hypotheses (one for greedy), best first, and frames seen."""

    paths: List[_Path] = field(default_factory=lambda: [_Path()])
    frames: int = 0
    context: Optional[ContextGraph] = None
    """hotwords (the modified beam search only)"""

    @property
    def trailing_blanks(self) -> int:
        """Frames since the best path's last token (the endpoint rules' silence)."""
        best = self.paths[0]
        return self.frames - 1 - best.times[-1] if best.times else self.frames

    def hypotheses(self, nbest: int = 1) -> List[Hypothesis]:
        """The ``nbest`` best so far; with hotwords each scored as if the segment ended here
        (an unfinished phrase's bonus taken back, as the CTC prefix beam does)."""
        if self.context is None:
            return [_hypothesis(p, self.frames, p.score) for p in self.paths[:nbest]]
        ended = [(p.rank() + self.context.final(p.hot), i) for i, p in enumerate(self.paths)]
        ended.sort(key=lambda item: (-item[0], item[1]))
        return [_hypothesis(self.paths[i], self.frames, s) for s, i in ended[:nbest]]


def _hypothesis(p: _Path, frames: int, score: float) -> Hypothesis:
    if p.tokens:
        confidence = sum(p.probs) / len(p.probs)
    else:
        confidence = math.exp(p.score / frames) if frames else 1.0
    return Hypothesis(p.tokens, score, p.times, confidence)


class TransducerSearch:
    """Greedy (``beam`` None) or modified beam search of ``head`` over streams' frames.

    ``blank_penalty`` is subtracted from the joiner's blank logit before the log-softmax
    (sherpa-onnx's and icefall's ``blank_penalty``): a briefly trained transducer emits too many
    blanks and deletes words, and a penalty of 0.5-2 trades deletions for insertions."""

    def __init__(
        self, head: TransducerHead, beam: Optional[int] = None, max_symbols: int = 4,
        blank_penalty: float = 0.0,
    ) -> None:  # fmt: skip
        self.head, self.beam, self.max_symbols = head, beam, max_symbols
        self.blank_penalty = blank_penalty
        self.context = head.predictor.context

    def new_state(self, context: Optional[ContextGraph] = None) -> TransducerState:
        """A stream's (or segment's) search; ``context``: its hotwords (beam search only)."""
        return TransducerState(context=context if self.beam is not None else None)

    @torch.no_grad()
    def step(
        self, enc: torch.Tensor, lens: Sequence[int], states: Sequence[TransducerState]
    ) -> None:
        """Advance each stream by its frames: enc (B, C, D) with (B,) valid counts ``lens``."""
        enc_j = self.head.joiner.enc_proj(enc).float()  # (B, C, J)
        for t in range(enc.size(1)):
            rows = [b for b, n in enumerate(lens) if t < n]
            if not rows:
                break
            if self.beam is None:
                self._greedy_frame(enc_j[rows, t], [states[b] for b in rows])
            else:
                for b in rows:
                    self._beam_frame(enc_j[b, t], states[b])
            for b in rows:
                states[b].frames += 1

    def _predictions(self, contexts: List[Tuple[int, ...]]) -> torch.Tensor:
        """(N, J) the projected predictions after each context."""
        ids = torch.tensor(contexts, dtype=torch.long, device=self.head.simple_am.weight.device)
        pred = self.head.predictor(ids)[:, -1]  # (N, D')
        return self.head.joiner.pred_proj(pred).float()

    def _log_probs(self, enc_j: torch.Tensor, pred_j: torch.Tensor) -> torch.Tensor:
        logits = self.head.joiner.out(torch.tanh(enc_j + pred_j)).float()  # (N, V)
        if self.blank_penalty:
            logits[:, 0] -= self.blank_penalty
        return logits.log_softmax(-1)

    def _greedy_frame(self, enc_j: torch.Tensor, states: List[TransducerState]) -> None:
        """Up to ``max_symbols`` tokens a stream at this frame, then its blank."""
        live = list(range(len(states)))
        for _ in range(self.max_symbols):
            if not live:
                return
            paths = [states[i].paths[0] for i in live]
            pred_j = self._predictions([p.context(self.context) for p in paths])
            logp = self._log_probs(enc_j[live], pred_j)  # (N, V)
            best_logp, best = logp.max(-1)
            still = []
            for k, i in enumerate(live):
                p, token, lp = paths[k], int(best[k]), float(best_logp[k])
                t = states[i].frames
                if token == 0:
                    states[i].paths[0] = _Path(p.tokens, p.times, p.probs, p.score + lp)
                    continue
                states[i].paths[0] = _Path(p.tokens + (token,), p.times + (t,),
                                           p.probs + (math.exp(lp),), p.score + lp)  # fmt: skip
                still.append(i)
            live = still
        if not live:
            return
        paths = [states[i].paths[0] for i in live]  # the symbol limit: the frame's blank
        pred_j = self._predictions([p.context(self.context) for p in paths])
        blank = self._log_probs(enc_j[live], pred_j)[:, 0].tolist()
        for i, p, lp in zip(live, paths, blank):
            states[i].paths[0] = _Path(p.tokens, p.times, p.probs, p.score + lp)

    def _beam_frame(self, enc_j: torch.Tensor, state: TransducerState) -> None:
        """Modified beam search: each hypothesis takes a blank or one token at this frame;
        the ``beam`` best of the expansions (equal token sequences merged) go on. With
        hotwords the expansions are ranked with their context bonus (icefall's and
        sherpa-onnx's): the 2 x ``beam`` acoustically best are scored, the ``beam`` best kept."""
        assert self.beam is not None
        paths, t, graph = state.paths, state.frames, state.context
        pred_j = self._predictions([p.context(self.context) for p in paths])
        logp = self._log_probs(enc_j.unsqueeze(0), pred_j)  # (N, V)
        scores = logp + torch.tensor([p.rank() for p in paths]).unsqueeze(1)
        wanted = self.beam if graph is None else 2 * self.beam
        top = scores.view(-1).topk(min(wanted, scores.numel()))
        V = logp.size(1)
        expansions = []
        for index in top.indices.tolist():
            k, token = divmod(index, V)
            p, lp = paths[k], float(logp[k, token])
            if token == 0:
                expansions.append(_Path(p.tokens, p.times, p.probs, p.score + lp, p.hot,
                                        p.hot_score))  # fmt: skip
                continue
            hot, bonus = graph.step(p.hot, token) if graph is not None else (0, 0.0)
            expansions.append(_Path(p.tokens + (token,), p.times + (t,),
                                    p.probs + (math.exp(lp),), p.score + lp, hot,
                                    p.hot_score + bonus))  # fmt: skip
        expansions.sort(key=lambda p: -p.rank())
        merged: Dict[Tuple[int, ...], _Path] = {}
        for new in expansions[: self.beam]:
            old = merged.get(new.tokens)
            if old is None:
                merged[new.tokens] = new
            else:  # the same tokens by two paths: their probabilities add
                keep = old if old.score >= new.score else new
                total = float(torch.logaddexp(torch.tensor(old.score), torch.tensor(new.score)))
                merged[new.tokens] = _Path(keep.tokens, keep.times, keep.probs, total, keep.hot,
                                           keep.hot_score)  # fmt: skip
        state.paths = sorted(merged.values(), key=lambda p: -p.rank())


def transducer_greedy_search(
    head: TransducerHead, enc: torch.Tensor, lens: torch.Tensor, max_symbols: int = 4,
    blank_penalty: float = 0.0,
) -> List[Hypothesis]:  # fmt: skip
    """The greedy hypothesis of each utterance: enc (B, T, D), lens (B,)."""
    search = TransducerSearch(head, None, max_symbols, blank_penalty)
    states = [search.new_state() for _ in range(enc.size(0))]
    search.step(enc, lens.tolist(), states)
    return [s.hypotheses()[0] for s in states]


def transducer_beam_search(
    head: TransducerHead, enc: torch.Tensor, lens: torch.Tensor, beam: int, nbest: int = 1,
    context: Optional[ContextGraph] = None, blank_penalty: float = 0.0,
) -> List[List[Hypothesis]]:  # fmt: skip
    """The ``nbest`` best hypotheses of each utterance by modified beam search (``context``:
    hotwords)."""
    search = TransducerSearch(head, beam, blank_penalty=blank_penalty)
    states = [search.new_state(context) for _ in range(enc.size(0))]
    search.step(enc, lens.tolist(), states)
    return [s.hypotheses(nbest) for s in states]


def check_transducer(model: ASRModel, source: str, mode: str) -> None:
    """A FieldError naming ``source`` and the mode when the model has no transducer head."""
    if model.transducer is None:
        raise FieldError(
            f"{literal(source)} has no transducer head (its config's model.transducer_weight is "
            "0): {mode} needs a model trained with one (model.transducer_weight, e.g. 0.75; "
            "training can start from this model and add it); the CTC modes are greedy, "
            "prefix_beam",
            mode=Setting("mode", mode),
        )  # fmt: skip
