"""The attention decoder of U2++ (Wu et al. 2021, "U2++: Unified Two-pass Bidirectional
End-to-end Model for Speech Recognition"): transformer blocks over the tokens so far, each
cross-attending to the encoder output, in both reading directions. It is trained beside CTC
and rescores the CTC prefix beam's n-best (``search/rescore.py``); it never streams.

Token ids are the tokenizer's (0, the CTC blank, is never a target) plus one more, V, which is
both start and end of sentence (``sos_eos``): the decoder's vocabulary is V + 1. A model
trained elsewhere may keep that symbol inside the vocabulary (WeNet's ``<sos/eos>``):
``sos_eos_id`` names it, and the vocabulary stays V. The
right-to-left decoder reads each hypothesis reversed, so its scores judge the end of a
sentence from what follows, which a left-to-right pass cannot.

Shapes: the legend in ``wenet_lite`` (here U counts a hypothesis' tokens plus sos or eos, and
N hypotheses are scored together; S encoder frames are the keys of cross-attention).
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.model.conformer import FeedForward
from wenet_lite.model.linear import Linear
from wenet_lite.model.mask import valid_mask
from wenet_lite.model.posenc import rel_sinusoid

__all__ = [
    "RESCORE_CTC_WEIGHT",
    "RESCORE_REVERSE_WEIGHT",
    "MultiHeadAttention",
    "DecoderBlock",
    "TransformerDecoder",
    "AttentionDecoder",
]

RESCORE_CTC_WEIGHT = 0.5
"""attention rescoring's default weight of the CTC search score (``search/rescore.py``)"""
RESCORE_REVERSE_WEIGHT = 0.3
"""... and of the right-to-left decoder's score; both chosen on the synthetic recipe's dev
set (docs/decoding.md "Attention rescoring"); exported models carry them in their metadata"""

IGNORE = -1
"""target id of padding in the decoder's loss (written as -1 where TorchScript compiles it)"""


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over keys that a boolean mask allows (no positions: the
    decoder's embeddings carry absolute ones)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) is not a multiple of num_heads ({num_heads})")
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.q = Linear(d_model, d_model)
        self.k = Linear(d_model, d_model)
        self.v = Linear(d_model, d_model)
        self.out = Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, query: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Args: query (B, U, D), memory (B, S, D), mask (B, U or 1, S) True where a query may
        look. Returns: (B, U, D)."""
        return self.attend(query, memory, mask)[0]

    def attend(
        self,
        query: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor,
        rows: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The output (B, U, D) and the attention weights (B, H, U, S). ``rows`` (B,): the
        memory row of each query row, when fewer memories (B_m, S, D) serve many queries (the
        n-best of a segment): keys and values are projected once per memory, not per query."""
        b, u, s = query.size(0), query.size(1), memory.size(1)
        q = self.q(query).view(b, u, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, U, d_k)
        k, v = self.k(memory), self.v(memory)  # (B_m, S, D)
        if rows is not None:
            k, v = k.index_select(0, rows), v.index_select(0, rows)  # (B, S, D)
        k = k.view(b, s, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, S, d_k)
        v = v.view(b, s, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, S, d_k)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d_k)  # (B, H, U, S)
        hidden = ~mask.unsqueeze(1)  # (B, 1, U or 1, S)
        # A padded query row sees no key: its weights are set to 0 rather than NaN.
        weights = scores.masked_fill(hidden, float("-inf")).softmax(-1).masked_fill(hidden, 0.0)
        out = torch.matmul(self.dropout(weights), v)  # (B, H, U, d_k)
        out = out.transpose(1, 2).reshape(b, u, self.num_heads * self.d_k)  # (B, U, D)
        return self.out(out), weights


class DecoderBlock(nn.Module):
    """Pre-norm residuals: causal self-attention, cross-attention to the encoder, FFN."""

    def __init__(
        self, d_model: int, num_heads: int, ffn_dim: int, dropout: float,
        attention_dropout: float, activation: str = "silu", norm_eps: float = 1e-5,
    ) -> None:  # fmt: skip
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.src_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout, activation)
        self.norm_self = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_src = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_ffn = nn.LayerNorm(d_model, eps=norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        x_mask: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        rows: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Args: x (B, U, D), x_mask (B, U, U), memory (B_m, S, D), memory_mask (B, 1, S),
        rows (B,) memory row per x row (None: B_m = B, row for row). Returns: (B, U, D)."""
        return self.attend(x, x_mask, memory, memory_mask, rows)[0]

    def attend(
        self,
        x: torch.Tensor,
        x_mask: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        rows: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The output (B, U, D) and the cross-attention weights (B, H, U, S)."""
        h = self.norm_self(x)
        x = x + self.dropout(self.self_attn(h, h, x_mask))
        src, weights = self.src_attn.attend(self.norm_src(x), memory, memory_mask, rows)
        x = x + self.dropout(src)
        return x + self.dropout(self.ffn(self.norm_ffn(x))), weights


class TransformerDecoder(nn.Module):
    """Token embeddings * sqrt(D) + sinusoidal positions, decoder blocks, LayerNorm and the
    projection to the V + 1 outputs; position u sees tokens 0..u only."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        num_blocks: int,
        dropout: float,
        attention_dropout: float,
        activation: str = "silu",
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            DecoderBlock(
                d_model, num_heads, ffn_dim, dropout, attention_dropout, activation, norm_eps
            )
            for _ in range(num_blocks)
        )
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.out = Linear(d_model, vocab_size)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        rows: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Args: tokens (B, U) starting with sos, token_lens (B,), memory (B_m, S, D) the
        encoder output, memory_mask (B, 1, S), rows (B,) memory row of each sequence (None:
        B_m = B). Returns: logits (B, U, V + 1)."""
        x = self.embed_tokens(tokens)
        mask = self_mask(token_lens, tokens.size(1))  # (B, U, U)
        for block in self.blocks:
            x = block(x, mask, memory, memory_mask, rows)
        return self.out(self.norm(x))

    @torch.jit.unused
    def cross_attention(
        self,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
    ) -> List[torch.Tensor]:
        """Each block's cross-attention weights (B, H, U, S) over the encoder frames, as
        :meth:`forward` computes them (for pictures: the synthetic recipe's
        ``local/plot_cross_attention.py``)."""
        x = self.embed_tokens(tokens)
        mask = self_mask(token_lens, tokens.size(1))
        weights = []
        for block in self.blocks:
            x, w = block.attend(x, mask, memory, memory_mask)
            weights.append(w)
        return weights

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, U) -> (B, U, D): scaled embeddings plus the sinusoid of each position."""
        positions = torch.arange(tokens.size(1), device=tokens.device)
        pe = rel_sinusoid(positions, self.d_model).to(self.embed.weight.dtype)  # (U, D)
        return self.dropout(self.embed(tokens) * math.sqrt(self.d_model) + pe)


def self_mask(lens: torch.Tensor, width: int) -> torch.Tensor:
    """(B, U, U): query u sees keys 0..u that are inside its sequence."""
    causal = torch.ones(width, width, dtype=torch.bool, device=lens.device).tril()  # (U, U)
    return valid_mask(lens, width).unsqueeze(1) & causal.unsqueeze(0)


def decoder_io(
    targets: torch.Tensor, lens: torch.Tensor, sos_eos: int, reverse: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing's inputs ``sos y1 .. yn`` and outputs ``y1 .. yn eos`` (both (B, U+1);
    padding: eos in, IGNORE out), each sequence read backwards when ``reverse``.

    Args: targets (B, U) padded token ids, lens (B,)."""
    b, u = targets.size(0), targets.size(1)
    pos = torch.arange(u, device=targets.device).unsqueeze(0)  # (1, U)
    inside = pos < lens.unsqueeze(1)  # (B, U)
    if reverse:  # position i takes token len-1-i
        index = (lens.unsqueeze(1) - 1 - pos).clamp(min=0)
        targets = targets.gather(1, index)
    ys = targets.masked_fill(~inside, sos_eos)
    edge = torch.full((b, 1), sos_eos, dtype=targets.dtype, device=targets.device)
    ys_in = torch.cat([edge, ys], dim=1)  # (B, U+1)
    ys_out = torch.cat([ys, edge], dim=1)  # (B, U+1): eos lands at index len ...
    past = torch.arange(u + 1, device=targets.device).unsqueeze(0) > lens.unsqueeze(1)
    ys_out = ys_out.scatter(1, lens.unsqueeze(1), sos_eos).masked_fill(past, -1)  # IGNORE
    return ys_in, ys_out


class AttentionDecoder(nn.Module):
    """A left-to-right decoder and, optionally, a right-to-left one (``r2l`` holds 0 or 1)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        num_blocks: int,
        r2l_num_blocks: int,
        dropout: float,
        attention_dropout: float,
        activation: str = "silu",
        norm_eps: float = 1e-5,
        sos_eos_id: int = -1,
    ) -> None:
        """``activation`` of the feed-forward layers (WeNet's decoders: relu); ``norm_eps``:
        the epsilon of every LayerNorm; ``sos_eos_id``: -1 for an extra id V, else the id
        in the vocabulary that starts and ends a sentence."""
        super().__init__()
        if sos_eos_id != -1 and not 0 < sos_eos_id < vocab_size:
            raise ValueError(f"sos_eos_id must be -1 or in 1..{vocab_size - 1}, got {sos_eos_id}")
        self.sos_eos = vocab_size if sos_eos_id == -1 else sos_eos_id
        outputs = vocab_size + 1 if sos_eos_id == -1 else vocab_size
        sizes = (outputs, d_model, num_heads, ffn_dim)
        rest = (dropout, attention_dropout, activation, norm_eps)
        self.l2r = TransformerDecoder(*sizes, num_blocks, *rest)
        self.r2l = nn.ModuleList(
            [TransformerDecoder(*sizes, r2l_num_blocks, *rest)] if r2l_num_blocks > 0 else []
        )

    @property
    def bidirectional(self) -> bool:
        return len(self.r2l) > 0

    def forward(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
        rows: Optional[torch.Tensor] = None,
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """Teacher-forced log-probabilities of each direction, l2r first: pairs of
        (B, U+1, V+1) log-probs and (B, U+1) target ids (IGNORE on padding).

        Args: memory (B_m, S, D), memory_lens (B_m,), targets (B, U), target_lens (B,), rows
            (B,) the memory row of each target sequence (None: B_m = B, row for row)."""
        memory_mask = valid_mask(memory_lens, memory.size(1)).unsqueeze(1)  # (B_m, 1, S)
        if rows is not None:
            memory_mask = memory_mask.index_select(0, rows)  # (B, 1, S)
        out: List[Tuple[torch.Tensor, torch.Tensor]] = []
        ys_in, ys_out = decoder_io(targets, target_lens, self.sos_eos, False)
        logits = self.l2r(ys_in, target_lens + 1, memory, memory_mask, rows)
        out.append((logits.float().log_softmax(-1), ys_out))
        for r2l in self.r2l:
            ys_in, ys_out = decoder_io(targets, target_lens, self.sos_eos, True)
            logits = r2l(ys_in, target_lens + 1, memory, memory_mask, rows)
            out.append((logits.float().log_softmax(-1), ys_out))
        return out

    def loss(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
        reverse_weight: float,
        lsm_weight: float,
    ) -> torch.Tensor:
        """Label-smoothed cross-entropy summed over tokens (eos included) and divided by the
        batch size: ``(1 - reverse_weight) * L2R + reverse_weight * R2L``. Tokens are
        flattened to (N*(U+1), V) rows: CUDA's loss over (N, V, U+1) has no deterministic
        kernel, so ``train.deterministic`` would refuse it."""
        losses = [
            F.cross_entropy(
                log_probs.flatten(0, 1), ys_out.flatten(), ignore_index=IGNORE,
                label_smoothing=lsm_weight, reduction="sum",
            ) / targets.size(0)
            for log_probs, ys_out in self(memory, memory_lens, targets, target_lens)
        ]  # fmt: skip
        if len(losses) == 1:
            return losses[0]
        return (1.0 - reverse_weight) * losses[0] + reverse_weight * losses[1]

    def score(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        hyps: torch.Tensor,
        hyp_lens: torch.Tensor,
        reverse_weight: float,
        rows: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Log-probability of each hypothesis and its end, ``(1 - reverse_weight) * l2r +
        reverse_weight * r2l`` (l2r alone without a right-to-left decoder).

        Args: memory (N, S, D) each hypothesis' encoder output, or (B_m, S, D) with ``rows``
            (N,) naming each hypothesis' row (the segments of many n-bests: projected once
            per segment), memory_lens (N,) or (B_m,), hyps (N, U) padded token ids, hyp_lens
            (N,).
        Returns: (N,) scores."""
        scores: List[torch.Tensor] = []
        for log_probs, ys_out in self(memory, memory_lens, hyps, hyp_lens, rows):
            picked = log_probs.gather(2, ys_out.clamp(min=0).unsqueeze(2)).squeeze(2)  # (N, U+1)
            scores.append(picked.masked_fill(ys_out < 0, 0.0).sum(1))  # IGNORE: no score
        if len(scores) == 1 or reverse_weight == 0.0:
            return scores[0]
        return (1.0 - reverse_weight) * scores[0] + reverse_weight * scores[1]
