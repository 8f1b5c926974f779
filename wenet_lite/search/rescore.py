"""Attention rescoring (U2++'s second pass): the CTC prefix beam's n-best of a segment,
re-ranked by the model's attention decoder over that segment's encoder output.

Each hypothesis gets ``decoder score + ctc_weight * search score``, where the decoder score is
``(1 - reverse_weight) * left-to-right + reverse_weight * right-to-left`` log-probability of
its tokens and the end of sentence, and the search score is what the prefix beam gave it (the
CTC log-probability, plus the word LM's and the hotwords' fused scores when those are on:
their bonuses stay in, rescoring never replaces them). When the search's best hypothesis is
empty the segment is silence and stays so (a stream drops such a segment); otherwise the
empty hypothesis is no candidate, so a segment that spoke keeps words.

Many segments (of one batch of utterances, or of every stream that closes a segment in one
step) are rescored in one decoder call.

Shapes: the legend in ``wenet_lite`` (N hypotheses of all segments, S encoder frames).
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

import torch

from wenet_lite.config.fields import FieldError, Setting, literal
from wenet_lite.model import ASRModel
from wenet_lite.model.decoder import RESCORE_CTC_WEIGHT, RESCORE_REVERSE_WEIGHT, AttentionDecoder
from wenet_lite.search.ctc_search import Hypothesis

__all__ = ["RESCORE_CTC_WEIGHT", "RESCORE_REVERSE_WEIGHT", "Segment", "check_decoder", "rescore"]


class Segment(NamedTuple):
    """What one segment's rescoring needs: its n-best, best first, and its encoder output."""

    nbest: List[Hypothesis]
    encoder_out: torch.Tensor
    """(S, D)"""


def check_decoder(model: Optional[ASRModel], source: str) -> None:
    """ValueError naming ``source`` when the model has no attention decoder (None: an engine
    without the torch model, which holds the encoder only)."""
    if model is None:
        raise FieldError(
            f"{literal(source)} holds the encoder only: {{mode}} needs the attention decoder, "
            "so stream the model file", mode=Setting("mode", "attention_rescoring"),
        )  # fmt: skip
    if model.decoder is None:
        raise FieldError(
            f"{literal(source)} has no attention decoder (its config's decoder.type is none): "
            "{rescore} needs a model trained with one, e.g. decoder.type=bitransformer; use "
            "{beam}", rescore=Setting("mode", "attention_rescoring"),
            beam=Setting("mode", "prefix_beam"),
        )  # fmt: skip


def _candidates(nbest: Sequence[Hypothesis]) -> List[Hypothesis]:
    if not nbest or nbest[0].num_tokens == 0:  # silence stays silence, as streams drop it
        return list(nbest[:1])
    return [h for h in nbest if h.num_tokens > 0]


@torch.inference_mode()
def rescore(
    decoder: AttentionDecoder,
    segments: Sequence[Segment],
    ctc_weight: float,
    reverse_weight: float,
) -> List[List[Hypothesis]]:
    """Each segment's candidates, re-scored and sorted best first (empty for an empty n-best).
    A hypothesis keeps its tokens, times and confidence; its ``score`` becomes the combined one.
    """
    groups = [_candidates(s.nbest) for s in segments]
    flat = [(i, h) for i, group in enumerate(groups) for h in group]
    if not flat:
        return [[] for _ in segments]
    param = next(decoder.parameters())
    n, width = len(flat), max(max(h.num_tokens for _, h in flat), 1)
    frames = max(s.encoder_out.size(0) for s in segments)
    dim = segments[0].encoder_out.size(1)
    hyps = torch.zeros(n, width, dtype=torch.long)  # (N, U)
    hyp_lens = torch.tensor([h.num_tokens for _, h in flat])  # (N,)
    rows = torch.tensor([i for i, _ in flat])  # (N,) each hypothesis' segment
    for row, (_, h) in enumerate(flat):
        hyps[row, : h.num_tokens] = torch.tensor(h.tokens, dtype=torch.long)
    memory = torch.zeros(len(segments), frames, dim, dtype=param.dtype)  # (B_m, S, D)
    memory_lens = torch.tensor([s.encoder_out.size(0) for s in segments])  # (B_m,)
    for i, s in enumerate(segments):
        memory[i, : s.encoder_out.size(0)] = s.encoder_out
    device = param.device
    scores = decoder.score(
        memory.to(device), memory_lens.to(device), hyps.to(device), hyp_lens.to(device),
        reverse_weight, rows.to(device),
    ).tolist()  # fmt: skip
    out: List[List[Hypothesis]] = [[] for _ in segments]
    for (i, h), score in zip(flat, scores):
        out[i].append(h.rescored(score + ctc_weight * h.score))
    for group in out:
        group.sort(key=lambda h: h.score, reverse=True)
    return out
