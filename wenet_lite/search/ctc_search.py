"""CTC search over log-probabilities: greedy and prefix beam search, one-shot and streaming.

Shapes: the legend in ``wenet_lite`` (C: the frames of one streaming chunk).

The streaming classes carry the search state across chunks and the one-shot functions feed the
whole utterance as a single chunk, so both run the same per-frame loop and chunking never changes
the result.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from wenet_lite.data.tokenizer import BLANK_ID

if TYPE_CHECKING:
    from wenet_lite.search.context import ContextGraph
    from wenet_lite.search.lm import LMScorer, LMState

__all__ = [
    "Hypothesis",
    "StreamingGreedySearch",
    "StreamingPrefixBeamSearch",
    "ChunkPath",
    "ctc_greedy_search",
    "greedy_chunks",
    "ctc_prefix_beam_search",
    "frames_to_seconds",
    "penalize_blank",
]

_NEG_INF = float("-inf")


class _Emit:
    """One token emitted on an alignment, linked to the one before: a persistent list, so an
    alignment grows by one node and never copies what came before. Also carries the running
    sum of the tokens' peak posteriors (for the confidence) and the token count."""

    __slots__ = ("token", "time", "peak", "parent", "depth", "peak_sum")

    def __init__(self, token: int, time: int, peak: float, parent: Optional[_Emit]) -> None:
        self.token = token
        self.time = time
        self.peak = peak
        """log-prob peak of the token over its run of frames"""
        self.parent = parent
        self.depth: int = 1 + (parent.depth if parent is not None else 0)
        self.peak_sum: float = math.exp(peak) + (parent.peak_sum if parent is not None else 0.0)

    def with_peak(self, peak: float) -> _Emit:
        """The same token with a higher peak (its run went on): a new last node."""
        return _Emit(self.token, self.time, peak, self.parent)


class Hypothesis:
    """One decoded token sequence.

    ``score`` is a natural-log probability: for greedy search the log-probability of the single
    best path (sum of per-frame maxima); for prefix beam search the log-probability of the token
    sequence summed over all its alignments that survived the beam (plus the LM's and the
    hotwords' fused scores, when there are).

    ``timestamps[i]`` is the encoder frame where ``tokens[i]`` was first emitted: the first frame
    of its run of frames on the most probable alignment of ``tokens`` (for beam search: among the
    alignments the beam kept). ``frames_to_seconds`` maps it to seconds.

    ``confidence`` is in [0, 1]: the mean over tokens of each token's peak posterior (the highest
    probability it reaches over its run of frames on that same alignment). A hypothesis without
    tokens has only one alignment, all blanks, and gets the geometric-mean blank posterior
    ``exp(score / T)`` (1.0 for zero frames).

    A search's hypotheses share their alignment's linked tokens: making one costs the same at
    any length, and ``tokens``/``timestamps`` are spelled out (in O(length)) only when read.
    """

    __slots__ = ("score", "confidence", "num_tokens", "_last", "_tokens", "_timestamps")

    def __init__(
        self, tokens: Sequence[int], score: float, timestamps: Sequence[int], confidence: float
    ) -> None:
        self.score = score
        self.confidence = confidence
        self._tokens: Optional[List[int]] = list(tokens)
        self._timestamps: Optional[List[int]] = list(timestamps)
        self._last: Optional[_Emit] = None
        self.num_tokens = len(self._tokens)

    @classmethod
    def _of(cls, last: Optional[_Emit], score: float, confidence: float) -> Hypothesis:
        hyp = cls.__new__(cls)
        hyp.score, hyp.confidence, hyp._last = score, confidence, last
        hyp._tokens, hyp._timestamps = (None, None) if last is not None else ([], [])
        hyp.num_tokens = last.depth if last is not None else 0
        return hyp

    def rescored(self, score: float) -> Hypothesis:
        """The same tokens, times and confidence with another score (attention rescoring)."""
        hyp = Hypothesis._of(self._last, score, self.confidence)
        hyp._tokens, hyp._timestamps = self._tokens, self._timestamps
        hyp.num_tokens = self.num_tokens
        return hyp

    @property
    def tokens(self) -> List[int]:
        if self._tokens is None:
            self._spell()
        assert self._tokens is not None
        return self._tokens

    @property
    def timestamps(self) -> List[int]:
        if self._timestamps is None:
            self._spell()
        assert self._timestamps is not None
        return self._timestamps

    @property
    def peaks(self) -> List[float]:
        """Each token's peak posterior in [0, 1] (the mean of which is ``confidence``); a
        hypothesis made from lists, which keeps no peaks, gives its confidence for each."""
        if self._last is None:
            return [self.confidence] * self.num_tokens
        out = [0.0] * self.num_tokens
        node: Optional[_Emit] = self._last
        for i in range(self.num_tokens - 1, -1, -1):
            assert node is not None
            out[i] = math.exp(node.peak)
            node = node.parent
        return out

    def _spell(self) -> None:
        tokens, times = self.tail(self.num_tokens)
        self._tokens, self._timestamps = tokens, times

    def tail(self, n: int) -> Tuple[List[int], List[int]]:
        """The last ``n`` tokens and their frames, walking only those ``n`` links."""
        n = max(0, min(n, self.num_tokens))
        if self._last is None:
            assert self._tokens is not None and self._timestamps is not None
            first = self.num_tokens - n
            return self._tokens[first:], self._timestamps[first:]
        tokens, times = [0] * n, [0] * n
        node = self._last
        for i in range(n - 1, -1, -1):
            assert node is not None
            tokens[i], times[i] = node.token, node.time
            node = node.parent
        return tokens, times

    def common_prefix(self, other: Hypothesis) -> int:
        """How many leading tokens ``self`` shares with ``other`` (a hypothesis of the same
        search, e.g. the previous partial result): the cost is what changed, not the length."""
        a, b = self._last, other._last
        if a is None or b is None:  # spelled out, or empty
            if self.num_tokens == 0 or other.num_tokens == 0:
                return 0
            mine, theirs = self.tokens, other.tokens
            n = 0
            while n < min(len(mine), len(theirs)) and mine[n] == theirs[n]:
                n += 1
            return n
        while a is not None and b is not None and a.depth > b.depth:
            a = a.parent
        while a is not None and b is not None and b.depth > a.depth:
            b = b.parent
        while (
            a is not None
            and b is not None
            and not (a is b or (a.token == b.token and a.time == b.time and a.parent is b.parent))
        ):
            a, b = a.parent, b.parent
        return 0 if a is None else a.depth

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hypothesis):
            return NotImplemented
        return (self.tokens, self.score, self.timestamps, self.confidence) == (
            other.tokens, other.score, other.timestamps, other.confidence
        )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"Hypothesis(tokens={self.tokens}, score={self.score}, timestamps={self.timestamps}, "
            f"confidence={self.confidence})"
        )


def frames_to_seconds(
    frames: Sequence[int], subsampling_rate: int, frame_shift_s: float = 0.01
) -> List[float]:
    """Start time in seconds of each encoder frame index.

    Encoder frame t starts at input (fbank) frame ``t * subsampling_rate``; the extra latency of
    the subsampling receptive field (a few input frames) is ignored.
    """
    if subsampling_rate < 1:
        raise ValueError(f"subsampling_rate must be >= 1, got {subsampling_rate}")
    return [f * subsampling_rate * frame_shift_s for f in frames]


def _log_add(a: float, b: float) -> float:
    """log(exp(a) + exp(b)) without overflow; -inf is the log of zero."""
    if a < b:
        a, b = b, a
    if b == _NEG_INF:
        return a
    return a + math.log1p(math.exp(b - a))


def _confidence(last: Optional[_Emit], score: float, num_frames: int) -> float:
    """See ``Hypothesis``: mean token peak posterior (from the running sum: O(1)), or the
    blank-path geometric mean."""
    if last is not None:
        return last.peak_sum / last.depth
    return math.exp(score / num_frames) if num_frames > 0 else 1.0


def penalize_blank(log_probs: torch.Tensor, penalty: float) -> torch.Tensor:
    """Log-probabilities (..., V) renormalised after ``penalty`` is subtracted from the blank's:
    the same as subtracting it from the blank's logit before the log-softmax (sherpa-onnx's
    ``blank_penalty``). A model trained briefly emits too many blanks, so it drops letters
    and short words; a penalty of ~0.5 trades some of those deletions for insertions."""
    if penalty == 0:
        return log_probs
    shifted = log_probs.clone()
    shifted[..., BLANK_ID] -= penalty
    return shifted.log_softmax(dim=-1)


def _check_chunk(log_probs: torch.Tensor) -> None:
    if log_probs.dim() != 2:
        raise ValueError(f"expected log_probs of shape (T, V), got {tuple(log_probs.shape)}")


class StreamingGreedySearch:
    """Greedy CTC decoding fed chunk by chunk: argmax per frame, merge repeats, drop blanks.

    The state is the previous frame's argmax (so a token run that crosses a chunk boundary is
    not emitted twice) and the number of frames seen (the offset of the next chunk's timestamps).
    """

    def __init__(self) -> None:
        self.num_frames = 0
        self.trailing_blanks = 0
        """frames since the last whose argmax is not blank (the endpoint rules' silence)"""
        self._prev = BLANK_ID  # argmax of the last frame seen; blank before the first frame
        self._score = 0.0
        self._last: Optional[_Emit] = None  # the last token emitted (a linked list back)

    def accept(self, log_probs: torch.Tensor) -> List[Hypothesis]:
        """Consume a (C, V) chunk and return the hypotheses over all frames so far: one, the
        best path (a list, as the prefix beam search's n-best)."""
        _check_chunk(log_probs)
        best_lp, best_id = log_probs.max(dim=-1)  # (C,), (C,)
        return self.accept_best(best_id.tolist(), best_lp.tolist())

    def accept_best(self, ids: List[int], lps: List[float]) -> List[Hypothesis]:
        """As :meth:`accept`, given each frame's argmax id and its log-prob (a batch's argmax
        taken in one call)."""
        self._accept_best(ids, lps)
        return self.result()

    def result(self) -> List[Hypothesis]:
        """The hypotheses so far (one); the same cost at any length."""
        return [self.best()]

    def hypotheses(self, nbest: int = 1) -> List[Hypothesis]:
        """The best path (greedy search has one, whatever ``nbest``)."""
        return [self.best()]

    def best(self) -> Hypothesis:
        """The best path so far."""
        confidence = _confidence(self._last, self._score, self.num_frames)
        return Hypothesis._of(self._last, self._score, confidence)

    @property
    def last_id(self) -> int:
        """The argmax of the last frame seen (blank before the first)."""
        return self._prev

    @property
    def score(self) -> float:
        """The best path's log-probability so far."""
        return self._score

    def accept_path(self, path: ChunkPath) -> List[Hypothesis]:
        """As :meth:`accept`, given the chunk's part of the path as :func:`greedy_chunks`
        found it (for a batch at once): the same hypotheses."""
        last = self._last
        if last is not None and path.lead_peak > last.peak:
            self._last = last = last.with_peak(path.lead_peak)
        for tok, t, peak in zip(path.tokens, path.frames, path.peaks):
            last = self._last = _Emit(tok, self.num_frames + t, peak, last)
        self._score = path.score
        self._prev = path.last_id
        self.num_frames += path.num_frames
        if path.last_token >= 0:
            self.trailing_blanks = path.num_frames - 1 - path.last_token
        else:
            self.trailing_blanks += path.num_frames
        return self.result()

    def _accept_best(self, ids: List[int], lps: List[float]) -> None:
        """Advance over frames whose argmax ids and their log-probs are already known."""
        for t, (tok, lp) in enumerate(zip(ids, lps), start=self.num_frames):
            self._score += lp
            if tok != BLANK_ID and tok != self._prev:
                self._last = _Emit(tok, t, lp, self._last)
            elif tok != BLANK_ID and self._last is not None and lp > self._last.peak:
                self._last = self._last.with_peak(lp)  # the same run: not a new token
            self._prev = tok
            self.trailing_blanks = self.trailing_blanks + 1 if tok == BLANK_ID else 0
        self.num_frames += len(ids)


class ChunkPath(NamedTuple):
    """What one chunk adds to a stream's greedy path (:func:`greedy_chunks`)."""

    tokens: List[int]
    """tokens whose run starts in the chunk"""
    frames: List[int]
    """the frame of the chunk where each starts"""
    peaks: List[float]
    """each one's highest log-prob over its run within the chunk"""
    lead_peak: float
    """the highest log-prob of the first frames that go on with the last chunk's token (-inf:
    none do)"""
    score: float
    """the path's log-prob after the chunk: the one before plus each frame's, added in order"""
    last_id: int
    """the argmax of the chunk's last frame"""
    last_token: int
    """the chunk's last frame whose argmax is not blank (-1: none)"""
    num_frames: int


def greedy_chunks(
    log_probs: torch.Tensor, lens: torch.Tensor, last_ids: torch.Tensor, scores: torch.Tensor
) -> List[ChunkPath]:
    """One chunk of greedy search for a batch of streams, on the log-probs' device: argmax,
    blank and repeat collapse, each token's peak and the path's score, with only what is new
    copied back (the tokens that start, and a few numbers per stream) instead of every frame.

    Args: log_probs (B, C, V); lens (B,) valid frames; last_ids (B,) each stream's
    :attr:`StreamingGreedySearch.last_id`; scores (B,) float64 its :attr:`~.score`.
    Returns B paths for :meth:`StreamingGreedySearch.accept_path`, which then holds exactly
    what :meth:`StreamingGreedySearch.accept` of the stream's valid frames gives (the score is
    added frame by frame in float64 as there, so it is equal too)."""
    batch, chunk = log_probs.shape[:2]
    device = log_probs.device
    n = lens.tolist()
    lens, last_ids = lens.to(device), last_ids.to(device)
    best_lp, best_id = log_probs.max(dim=-1)  # (B, C)
    valid = torch.arange(chunk, device=device) < lens.unsqueeze(1)  # (B, C)
    ids = torch.where(valid, best_id, BLANK_ID)
    lp = torch.where(valid, best_lp, _NEG_INF)
    previous = torch.cat([last_ids.unsqueeze(1), ids[:, :-1]], dim=1)
    change = ids != previous  # a run of equal argmaxes starts
    token = ids != BLANK_ID
    starts = change & token  # (B, C): a token is emitted
    run = change.long().cumsum(dim=1)  # run 0 goes on with the last chunk's token
    peak = torch.full((batch, chunk + 1), _NEG_INF, device=device, dtype=lp.dtype)
    peak = peak.scatter_reduce(1, run, lp, "amax")  # (B, C + 1): each run's peak
    lead = torch.where(token[:, 0] & ~change[:, 0], peak[:, 0], _NEG_INF)
    score = scores.to(device, torch.float64)
    lp64 = torch.where(valid, best_lp, 0.0).double()
    for t in range(chunk):  # in order, as the host adds them: the same float64 sums
        score = score + lp64[:, t]
    last = (lens - 1).clamp(min=0).unsqueeze(1)
    last_id = torch.where(lens > 0, best_id.gather(1, last).squeeze(1), last_ids)
    frames = torch.arange(chunk, device=device).expand(batch, -1)
    last_token = torch.where(token, frames, -1).amax(dim=1)
    at = starts.nonzero()  # (K, 2): (stream, frame) of every new token
    longs = torch.cat([at.flatten(), ids[starts], last_id, last_token]).tolist()
    floats = torch.cat([peak.gather(1, run)[starts].double(), lead.double(), score]).tolist()
    k = at.size(0)
    pos, toks = longs[: 2 * k], longs[2 * k : 3 * k]
    last_ids_out, last_tokens = longs[3 * k : 3 * k + batch], longs[3 * k + batch :]
    peaks, leads, new_scores = floats[:k], floats[k : k + batch], floats[k + batch :]
    per_stream: List[Tuple[List[int], List[int], List[float]]]
    per_stream = [([], [], []) for _ in range(batch)]
    for j in range(k):
        own = per_stream[pos[2 * j]]
        own[0].append(toks[j])
        own[1].append(pos[2 * j + 1])
        own[2].append(peaks[j])
    return [
        ChunkPath(*per_stream[b], leads[b], new_scores[b], last_ids_out[b], last_tokens[b], n[b])
        for b in range(batch)
    ]


def ctc_greedy_search(log_probs: torch.Tensor, lens: torch.Tensor) -> List[Hypothesis]:
    """Best path per utterance. Args: log_probs (B, T, V), lens (B,). Returns B hypotheses."""
    if log_probs.dim() != 3:
        raise ValueError(f"expected log_probs of shape (B, T, V), got {tuple(log_probs.shape)}")
    if lens.shape != log_probs.shape[:1]:
        raise ValueError(f"lens shape {tuple(lens.shape)} does not match batch {log_probs.size(0)}")
    best_lp, best_id = log_probs.max(dim=-1)  # (B, T), (B, T): one reduction for the batch
    hyps = []
    for ids, lps, n in zip(best_id.tolist(), best_lp.tolist(), lens.tolist()):
        search = StreamingGreedySearch()
        search._accept_best(ids[:n], lps[:n])
        hyps.append(search.best())
    return hyps


class _Path(NamedTuple):
    """The most probable single alignment of a family: its log-prob and its last emitted token
    (the tokens before are linked from it: each with its frame and peak log-prob)."""

    logp: float
    last: Optional[_Emit]


_NO_PATH = _Path(_NEG_INF, None)


def _emit(path: _Path, tok: int, t: int, lp: float) -> _Path:
    """``path`` followed by token ``tok`` emitted at frame t with log-prob lp."""
    return _Path(path.logp + lp, _Emit(tok, t, lp, path.last))


def _hold(path: _Path, lp: float, repeat: bool) -> _Path:
    """``path`` plus a frame that emits nothing new: a blank or a repeat of its last token."""
    last = path.last
    if repeat and last is not None and lp > last.peak:
        last = last.with_peak(lp)
    return _Path(path.logp + lp, last)


class _Node:
    """A prefix (token sequence) as a node of a trie grown by the search: the beam's key; a
    prefix is never copied or hashed whole.

    A node holds its children (each token it was ever extended by, once), not its parent. So
    the live trie is the beam's prefixes and what grew from them: a prefix the beam dropped
    stays only while one of its ancestors is in the beam, and it can come back only through
    that ancestor, which then finds the same node again (no duplicate). Nodes above the beam
    are freed, however long the stream: the tokens themselves live in the alignment paths.
    """

    __slots__ = ("token", "children")

    def __init__(self, token: Optional[int]) -> None:
        self.token = token
        self.children: Optional[Dict[int, _Node]] = None

    def child(self, token: int) -> _Node:
        if self.children is None:
            self.children = {}
        node = self.children.get(token)
        if node is None:
            node = self.children[token] = _Node(token)
        return node


class _Prefix:
    """Search state of one prefix (token sequence) after the frames seen so far.

    ``blank``/``non_blank``: log-probability of all kept alignments of the prefix that end in a
    blank / in its last token, and ``blank_path``/``non_blank_path`` the most probable single
    alignment of each family (Viterbi), which supplies the timestamps and token peaks. ``lm``:
    the language model's state of the prefix when a scorer is fused (see ``search/lm.py``);
    ``hot``: its state in the hotword graph, ``hot_score`` the bonus gathered (``context.py``).
    """

    __slots__ = ("blank", "non_blank", "blank_path", "non_blank_path", "lm", "hot", "hot_score")

    def __init__(self, lm: Optional[LMState] = None, hot: int = 0, hot_score: float = 0.0) -> None:
        self.blank = _NEG_INF
        self.non_blank = _NEG_INF
        self.blank_path = _NO_PATH
        self.non_blank_path = _NO_PATH
        self.lm = lm
        self.hot = hot
        self.hot_score = hot_score

    def total(self) -> float:
        return _log_add(self.blank, self.non_blank)

    def rank(self) -> float:
        """What the beam keeps the best of: the CTC log-probability plus the LM's fusion score
        and the hotword bonus (added to it, never in its place)."""
        fused = self.total() + self.hot_score
        return fused if self.lm is None else fused + self.lm.score

    def best_path(self) -> _Path:
        if self.blank_path.logp >= self.non_blank_path.logp:
            return self.blank_path
        return self.non_blank_path


_Beam = Dict[_Node, _Prefix]


def _contribute(
    beam: _Beam,
    prefix: _Node,
    value: float,
    ends_in_blank: bool,
    path: _Path,
    like: _Prefix,
) -> None:
    """Add one alignment family (summed log-prob ``value``, best member ``path``) to a prefix
    (created with the LM and hotword states of ``like`` if new)."""
    if value == _NEG_INF:
        return  # an impossible path must not create a prefix that could fill an empty beam slot
    entry = beam.get(prefix)
    if entry is None:
        entry = beam[prefix] = _Prefix(like.lm, like.hot, like.hot_score)
    if ends_in_blank:
        entry.blank = _log_add(entry.blank, value)
        if path.logp > entry.blank_path.logp:
            entry.blank_path = path
    else:
        entry.non_blank = _log_add(entry.non_blank, value)
        if path.logp > entry.non_blank_path.logp:
            entry.non_blank_path = path


def _extend_prefix(
    nxt: _Beam,
    prefix: _Node,
    state: _Prefix,
    t: int,
    tokens: List[int],
    lps: List[float],
    scorer: Optional[LMScorer] = None,
    context: Optional[ContextGraph] = None,
) -> None:
    """All ways ``prefix`` grows at frame t by one of the frame's kept tokens."""
    total = state.total()
    best = state.best_path()
    last = prefix.token
    for tok, lp in zip(tokens, lps):
        if tok == BLANK_ID:
            _contribute(nxt, prefix, total + lp, True, _hold(best, lp, repeat=False), state)
        elif tok != last:
            grown = _grown(scorer, context, state, tok)
            _contribute(nxt, prefix.child(tok), total + lp, False, _emit(best, tok, t, lp), grown)
        else:
            # Repeating the last token without a blank between collapses into the same prefix;
            # only alignments ending in a blank can start a second copy of it.
            if state.non_blank > _NEG_INF:
                held = _hold(state.non_blank_path, lp, repeat=True)
                _contribute(nxt, prefix, state.non_blank + lp, False, held, state)
            if state.blank > _NEG_INF:
                new = _emit(state.blank_path, tok, t, lp)
                grown = _grown(scorer, context, state, tok)
                _contribute(nxt, prefix.child(tok), state.blank + lp, False, new, grown)


def _grown(
    scorer: Optional[LMScorer], context: Optional[ContextGraph], state: _Prefix, tok: int
) -> _Prefix:
    """An empty entry with the LM and hotword states of ``state``'s prefix grown by ``tok``:
    they advance only when the prefix grows."""
    lm = None if scorer is None else scorer.extend(state.lm, tok)
    if context is None:
        return _Prefix(lm)
    hot, gain = context.step(state.hot, tok)
    return _Prefix(lm, hot, state.hot_score + gain)


class StreamingPrefixBeamSearch:
    """CTC prefix beam search (log domain) fed chunk by chunk.

    Per frame only the ``token_topk`` most probable tokens (default: ``beam_size``; the blank is
    one of them only if it ranks there) may extend a prefix: that bounds the work per frame at
    beam_size * token_topk instead of beam_size * V, and tokens outside the top-k rarely enter the
    beam anyway. A consequence is that ``beam_size=1`` (with the default top-k) is exactly greedy
    search: each frame then has a single candidate token. ``token_min_logp`` prunes further:
    of those, tokens whose log-probability at the frame is below it are dropped (the frame's
    best token always stays), as pyctcdecode's ``token_min_logp``. CTC outputs are peaky, so
    most frames keep one or two tokens and the work per frame no longer grows with
    beam_size * token_topk (docs/decoding.md "Decoding and streaming" has the measured effect).

    ``nbest`` (<= beam_size) is how many hypotheses ``result`` returns, best first; fewer while
    the beam holds fewer prefixes (e.g. before the first frame).

    ``scorer`` fuses a word language model (``search/lm.py``): the beam then ranks prefixes by
    CTC log-probability plus the scorer's weighted LM score and word bonus, and a hypothesis's
    ``score`` is that sum (its last word and the sentence end scored); timestamps and confidence
    still come from the CTC alignment. ``context`` adds hotword bonuses the same way
    (``search/context.py``); the n-best of :meth:`result` has each hypothesis's unfinished
    hotword match taken back, and is sorted after that.
    """

    def __init__(
        self,
        beam_size: int,
        nbest: int = 1,
        token_topk: Optional[int] = None,
        scorer: Optional[LMScorer] = None,
        token_min_logp: Optional[float] = None,
        context: Optional[ContextGraph] = None,
    ) -> None:
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be in 1..beam_size ({beam_size}), got {nbest}")
        topk = beam_size if token_topk is None else token_topk
        if topk < 1:
            raise ValueError(f"token_topk must be >= 1, got {token_topk}")
        self.beam_size = beam_size
        self.nbest = nbest
        self.token_topk = topk
        self.scorer = scorer
        self.context = context
        self.token_min_logp = token_min_logp
        self.num_frames = 0
        self.trailing_blanks = 0
        """frames since the last whose argmax is not blank (the endpoint rules' silence)"""
        start = _Prefix(None if scorer is None else scorer.START)
        # The empty prefix before any frame: probability 1, an alignment "ending in blank".
        start.blank = 0.0
        start.blank_path = _Path(0.0, None)
        self._beam: _Beam = {_Node(None): start}

    def accept(self, log_probs: torch.Tensor) -> List[Hypothesis]:
        """Consume a (C, V) chunk; return the current n-best over all frames so far."""
        _check_chunk(log_probs)
        k = min(self.token_topk, log_probs.size(-1))
        top_lp, top_id = log_probs.topk(k, dim=-1)  # (C, k), (C, k)
        argmax = log_probs.max(dim=-1).indices.tolist()  # (C,): the greedy path's, for ties too
        # Python floats (double) for the accumulation; one tensor-to-list conversion per chunk.
        rows = zip(top_id.tolist(), top_lp.tolist(), argmax)
        for t, (tokens, lps, best) in enumerate(rows, self.num_frames):
            if self.token_min_logp is not None:
                kept = 1 + sum(1 for lp in lps[1:] if lp >= self.token_min_logp)  # lps descend
                tokens, lps = tokens[:kept], lps[:kept]
            self._step(t, tokens, lps)
            self.trailing_blanks = self.trailing_blanks + 1 if best == BLANK_ID else 0
        self.num_frames += log_probs.size(0)
        return self.result()

    def result(self) -> List[Hypothesis]:
        return self.hypotheses(self.nbest)

    def hypotheses(self, nbest: int = 1) -> List[Hypothesis]:
        """The ``nbest`` best so far (at most the ``nbest`` it was made with), best first."""
        scored = [
            (self._final_score(state), i, state) for i, state in enumerate(self._beam.values())
        ]
        scored.sort(key=lambda item: item[0], reverse=True)
        return [self._hypothesis(st, score) for score, _, st in scored[: min(nbest, self.nbest)]]

    def _final_score(self, state: _Prefix) -> float:
        score = state.total()
        if self.context is not None:
            score += state.hot_score + self.context.final(state.hot)
        if self.scorer is not None:
            score += self.scorer.final(state.lm)
        return score

    def _step(self, t: int, tokens: List[int], lps: List[float]) -> None:
        nxt: _Beam = {}
        for prefix, state in self._beam.items():
            _extend_prefix(nxt, prefix, state, t, tokens, lps, self.scorer, self.context)
        ranked = sorted(nxt.items(), key=lambda item: item[1].rank(), reverse=True)
        self._beam = dict(ranked[: self.beam_size])

    def _hypothesis(self, state: _Prefix, score: float) -> Hypothesis:
        last = state.best_path().last  # its tokens are the prefix's
        return Hypothesis._of(last, score, _confidence(last, state.total(), self.num_frames))


def ctc_prefix_beam_search(
    log_probs: torch.Tensor,
    beam_size: int,
    nbest: int = 1,
    token_topk: Optional[int] = None,
    scorer: Optional[LMScorer] = None,
    token_min_logp: Optional[float] = None,
    context: Optional[ContextGraph] = None,
) -> List[Hypothesis]:
    """Prefix beam search over one utterance. Args: log_probs (T, V). Returns nbest, best first.

    See ``StreamingPrefixBeamSearch`` for the per-frame token pruning (``token_topk``,
    ``token_min_logp``), the language-model ``scorer`` and the hotword ``context``.
    """
    search = StreamingPrefixBeamSearch(
        beam_size, nbest, token_topk, scorer, token_min_logp, context
    )
    return search.accept(log_probs)
