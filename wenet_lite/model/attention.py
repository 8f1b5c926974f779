"""Multi-head self-attention with relative positions over a chunk and its cached left context.

Shapes: the legend in ``wenet_lite`` (C queries, a chunk or the whole utterance; M+C keys;
P = M+2C-1 distinct distances).

Per head, query i against key j (Transformer-XL, Dai et al. 2019, eq. 4 with terms (a)-(d)):

    score(i, j) = [(q_i + u) . k_j + (q_i + v) . p(i - j)] / sqrt(d_k)

The position term is one product of the queries with all P distance embeddings followed by a
shift (row i moves left by C-1-i); the content term and the softmax run in
scaled_dot_product_attention with the position term as an additive bias. Full-context,
chunk-masked and cached streaming attention all run through this one path.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.model.linear import Linear

__all__ = ["RelPositionAttention", "is_eager", "position_scores"]


def is_eager() -> bool:
    """Eager PyTorch: the eager-only shortcuts apply. Scripted, traced and exported graphs
    (TorchScript, ONNX, ExecuTorch) keep the general path, whose ops those exporters and
    runtimes are tested with (and which onnxruntime and XNNPACK run 2-4 % faster than the
    strided view, measured); so does ``torch.compile`` with dynamic shapes (inductor would
    fix the view's strides to the first batch's length)."""
    scripted = torch.jit.is_scripting() or torch.jit.is_tracing()
    return not scripted and not torch.compiler.is_compiling()


def _rel_shift(x: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Select out[..., i, j] = x[..., i, j + C-1-i] without indexing.

    In eager PyTorch this is a view: in a contiguous row-major x, the wanted element of row i
    sits at flat offset (C-1) + i*(P-1) + j, so rows P-1 apart starting at C-1 select it with
    no copy (nor one in backward beyond the gradient's scatter).

    Scripted or traced (TorchScript, ONNX export): padding each row by one column makes the
    flattened rows P+1 long, so the element sits at (C-1) + i*P + j: drop C-1 leading elements
    and view rows of P. Only pad, reshape and slice, which every exporter supports.
    """
    b, h, c, w = x.size()  # w = P = M+2C-1
    if is_eager() and x.is_contiguous():
        return x.as_strided((b, h, c, num_keys), (h * c * w, c * w, w - 1, 1), c - 1)
    x = F.pad(x, (0, 1)).reshape(b, h, c * (w + 1))  # (B, H, C*(P+1))
    x = x[:, :, c - 1 : c - 1 + c * w].reshape(b, h, c, w)  # (B, H, C, P)
    return x[:, :, :, :num_keys]  # (B, H, C, M+C)


def position_scores(q_v: torch.Tensor, pos: torch.Tensor, num_keys: int) -> torch.Tensor:
    """(q_i + v) . p(i - j) for all query/key pairs.

    Args:
        q_v: queries plus the position bias v, (B, H, C, d_k); queries are the last C of the
            ``num_keys`` frames.
        pos: p(r) for r = M+C-1 down to -(C-1), (H, P, d_k).
    Returns:
        (B, H, C, M+C) unscaled position scores.
    """
    b, h, c, d_k = q_v.size()
    if is_eager():
        # Heads first: one product per head of all B*C queries with the head's P embeddings
        # (a broadcast matmul would copy pos once per stream); the shift is then a view of
        # each (C, P) block, and the result a (B, H, C, M+C) view of it.
        scores = torch.bmm(q_v.transpose(0, 1).reshape(h, b * c, d_k), pos.transpose(1, 2))
        w = scores.size(2)  # P
        shifted = scores.as_strided((h, b, c, num_keys), (b * c * w, c * w, w - 1, 1), c - 1)
        return shifted.transpose(0, 1)
    scores = torch.matmul(q_v, pos.transpose(1, 2))  # (B, H, C, P)
    return _rel_shift(scores, num_keys)


def _heads_side_by_side(out: torch.Tensor) -> torch.Tensor:
    """(B, H, C, d_k) -> (B, C, H*d_k). Eager: one transposing copy; elsewhere written as a
    concatenation of the heads, which torch.export with a dynamic batch can lower (its SDPA
    decomposition breaks the transposed view)."""
    if is_eager():
        b, h, c, d_k = out.size()
        return out.transpose(1, 2).reshape(b, c, h * d_k)
    return torch.cat(out.unbind(1), dim=-1)


class RelPositionAttention(nn.Module):
    """Relative-position MHSA with learned per-head biases u, v and one fused QKV projection."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) is not a multiple of num_heads ({num_heads})")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.qkv = Linear(d_model, 3 * d_model)
        self.out = Linear(d_model, d_model)
        self.key_positions = False
        """``pos`` holds one embedding per key position (WeNet's term) instead of one per
        distance: the product needs no shift"""
        self.plain_softmax = False
        """attend in plain products instead of SDPA (set on export copies, see
        :meth:`_plain_attention`)"""
        self.pos_bias_u = nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.zeros(num_heads, self.head_dim))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: torch.Tensor,
        kv_out: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Attend from C new frames to M cached frames and themselves.

        Args:
            x: new frames (B, C, D).
            pos: p(r) for r = M+C-1 down to -(C-1), (H, M+2C-1, d_k).
            mask: True where query i may attend key j, (B, C, M+C).
            cache: projected keys then values of the M previous frames, (B, H, M, 2*d_k).
            kv_out: optional (B, H, M+C, 2*d_k) whose first M frames are ``cache`` itself
                (``cache`` a view of them): the new keys and values are written after them
                and ``kv_out`` returned, instead of concatenating them.
        Returns:
            out (B, C, D) and the keys/values of all M+C frames (B, H, M+C, 2*d_k).
        """
        q, k, v, kv = self._project(x, cache, kv_out)
        bias = self._position_term(q, pos, kv.size(2))  # (B, H, C, M+C)
        if self.plain_softmax:
            return self.out(self._plain_attention(q, k, v, bias, mask)), kv
        bias = bias.masked_fill(~mask.unsqueeze(1), float("-inf"))
        out = F.scaled_dot_product_attention(
            q + self.pos_bias_u.unsqueeze(1),
            k,
            v,
            attn_mask=bias,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, H, C, d_k)
        # Heads side by side: transpose(1, 2).reshape(B, C, D), written so that torch.export
        # with a dynamic batch can lower it (its SDPA decomposition breaks that view).
        out = torch.cat(out.unbind(1), dim=-1)  # (B, C, D)
        return self.out(out), kv

    def _plain_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        """softmax((q + u)·k / sqrt(d_k) + position) v over the visible keys, in matrix
        products, an addition and a softmax: XNNPACK lowers these whole, where the export of
        SDPA leaves about a dozen small unlowered ops per layer (its masked-row handling).
        Hidden keys get -1e30, which the softmax turns into exactly 0 when a row sees any key
        (every real frame sees itself); equal to the SDPA path within float rounding. Returns
        (B, C, D)."""
        scale = 1.0 / math.sqrt(self.head_dim)
        hidden = (mask.unsqueeze(1).to(q.dtype) - 1.0) * 1e30  # (B, 1, C, M+C): 0 or -1e30
        content = torch.matmul((q + self.pos_bias_u.unsqueeze(1)) * scale, k.transpose(2, 3))
        weights = torch.softmax(content + bias + hidden, dim=-1)  # (B, H, C, M+C)
        return _heads_side_by_side(torch.matmul(weights, v))  # (B, C, D)

    @torch.jit.unused
    def score_terms(
        self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: torch.Tensor,
        kv_out: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """The two terms of the score and the attention weights, for looking at them
        (``recipes/synthetic/local/plot_attention.py``); arguments as :meth:`forward`
        (``kv_out`` is not written: nothing here keeps a cache).

        Returns:
            content (q_i + u)·k_j / sqrt(d_k), position (q_i + v)·p(i - j) / sqrt(d_k) and the
            weights softmax(content + position) over the visible keys; each (B, H, C, M+C),
            the terms -inf and the weights 0 where the mask hides a key.
        """
        q, k, _, kv = self._project(x, cache)
        hidden = ~mask.unsqueeze(1)  # (B, 1, C, M+C)
        scale = 1.0 / math.sqrt(self.head_dim)
        content = torch.matmul((q + self.pos_bias_u.unsqueeze(1)) * scale, k.transpose(2, 3))
        position = self._position_term(q, pos, kv.size(2))
        weights = torch.softmax((content + position).masked_fill(hidden, float("-inf")), dim=-1)
        return (
            content.masked_fill(hidden, float("-inf")),
            position.masked_fill(hidden, float("-inf")),
            weights,
        )

    def _project(
        self, x: torch.Tensor, cache: torch.Tensor, kv_out: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (B, H, C, d_k), keys and values of the cache and the chunk (B, H, M+C, d_k)
        each, and both together as the next cache (B, H, M+C, 2*d_k): ``kv_out`` when given
        (the chunk's keys and values written after the cache it already holds)."""
        b, c, _ = x.size()
        qkv = self.qkv(x).view(b, c, 3, self.num_heads, self.head_dim)
        if kv_out is not None:
            self._write_keys_values(kv_out, cache, qkv[:, :, 1:])
            k, v = kv_out.split(self.head_dim, dim=-1)
            return qkv[:, :, 0].transpose(1, 2), k, v, kv_out
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, C, d_k)
        kv = torch.cat([k, v], dim=-1)  # (B, H, C, 2*d_k)
        if cache.size(2) > 0 or not is_eager():  # eager full-context forward: nothing to join
            kv = torch.cat([cache, kv], dim=2)  # (B, H, M+C, 2*d_k)
            k, v = kv.split(self.head_dim, dim=-1)  # each (B, H, M+C, d_k)
        return q, k, v, kv

    @torch.jit.unused
    def _write_keys_values(self, kv_out, cache, new):  # noqa: ANN001, ANN202
        # type: (Tensor, Tensor, Tensor) -> None
        """Write the chunk's keys and values, ``new`` (B, C, 2, H, d_k) as the projection
        leaves them, into kv_out (B, H, M+C, 2*d_k) after the cache (B, H, M, 2*d_k), which
        must be kv_out's own first M frames. Eager only."""
        b, c, _, h, d_k = new.size()
        m = cache.size(2)
        if m > 0 and cache.data_ptr() != kv_out.data_ptr():
            raise ValueError("kv_out must begin with the cache itself (a view of its M frames)")
        kv_out[:, :, m:].view(b, h, c, 2, d_k).copy_(new.permute(0, 3, 1, 2, 4))

    def _position_term(self, q: torch.Tensor, pos: torch.Tensor, num_keys: int) -> torch.Tensor:
        """(q_i + v)·p(i - j) / sqrt(d_k): (B, H, C, num_keys)."""
        # Scaled before the product: (C, d_k) elements scaled instead of (C, M+2C-1).
        q_v = (q + self.pos_bias_v.unsqueeze(1)) * (1.0 / math.sqrt(self.head_dim))
        if self.key_positions:  # pos: (H, M+C, d_k), or (B, H, M+C, d_k) per stream
            return torch.matmul(q_v, pos.transpose(-2, -1))  # (B, H, C, M+C)
        return position_scores(q_v, pos, num_keys)
