"""Conformer block and the streaming Conformer encoder.

Streaming state is data, an :class:`~wenet_lite.model.state.EncoderState` that
``forward_chunk`` takes and returns new. Shapes: the legend of ``wenet_lite.model``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

from wenet_lite.model.attention import RelPositionAttention, is_eager
from wenet_lite.model.convolution import ConvModule
from wenet_lite.model.linear import Linear
from wenet_lite.model.mask import attention_mask, valid_mask
from wenet_lite.model.posenc import (
    ShawRelPosition,
    XLRelPosition,
    slice_tables,
    window_distances,
)
from wenet_lite.model.state import EncoderState, cache_room, cache_view
from wenet_lite.model.subsampling import Conv2dSubsampling

__all__ = ["GlobalCMVN", "ConformerBlock", "ConformerEncoder"]


class GlobalCMVN(nn.Module):
    """(x - mean) * istd with dataset statistics held as buffers (saved with the model)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.istd


class FeedForward(nn.Sequential):
    """Linear, activation (``silu`` or ``relu``), dropout, linear."""

    def __init__(
        self, d_model: int, ffn_dim: int, dropout: float, activation: str = "silu"
    ) -> None:
        if activation not in ("silu", "relu"):
            raise ValueError(f"activation must be 'silu' or 'relu', got {activation!r}")
        act = nn.SiLU() if activation == "silu" else nn.ReLU()
        super().__init__(
            Linear(d_model, ffn_dim), act, nn.Dropout(dropout), Linear(ffn_dim, d_model)
        )


class ConformerBlock(nn.Module):
    """Macaron FFN/2, relative MHSA, conv module, FFN/2, final LayerNorm; pre-norm residuals."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        conv_kernel: int,
        causal_conv: bool,
        conv_norm: str,
        pos_enc: str,
        max_rel_dist: int,
        dropout: float,
        attention_dropout: float,
        norm_eps: float = 1e-5,
        conv_pad: str = "zero",
    ) -> None:
        super().__init__()
        self.ff1 = FeedForward(d_model, ffn_dim, dropout)
        self.attn = RelPositionAttention(d_model, num_heads, attention_dropout)
        if pos_enc in ("xl", "wenet"):
            self.rel_pos = XLRelPosition(d_model, num_heads, max_rel_dist)
        elif pos_enc == "shaw":
            self.rel_pos = ShawRelPosition(d_model, num_heads, max_rel_dist)
        else:
            raise ValueError(f"pos_enc must be 'xl', 'shaw' or 'wenet', got {pos_enc!r}")
        # WeNet's position term: the keys' absolute positions, no relative shift.
        self.attn.key_positions = pos_enc == "wenet"
        self.conv = ConvModule(d_model, conv_kernel, causal_conv, conv_norm, norm_eps, conv_pad)
        self.ff2 = FeedForward(d_model, ffn_dim, dropout)
        self.norm_ff1 = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_attn = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_conv = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_ff2 = nn.LayerNorm(d_model, eps=norm_eps)
        self.norm_out = nn.LayerNorm(d_model, eps=norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor,
        valid: torch.Tensor,
        att_cache: torch.Tensor,
        conv_cache: torch.Tensor,
        conv_real: Optional[torch.Tensor] = None,
        kv_out: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args: x (B, C, D), pos (H, P, d_k), mask (B, C, M+C), valid (B, C),
        att_cache (B, H, M, 2*d_k), conv_cache (B, D, K-1), conv_real: the conv cache's real
        columns (B, 1, K-1), for the ``wenet`` conv pad; kv_out: where to write the keys and
        values (B, H, M+C, 2*d_k), eager only (see ``RelPositionAttention.forward``).
        Returns: x (B, C, D), keys/values (B, H, M+C, 2*d_k), conv cache (B, D, K-1)."""
        x = x + 0.5 * self.dropout(self.ff1(self.norm_ff1(x)))
        a, kv = self.attn(self.norm_attn(x), pos, mask, att_cache, kv_out)
        x = x + self.dropout(a)
        c, new_conv = self.conv(self.norm_conv(x), valid, conv_cache, conv_real)
        x = x + self.dropout(c)
        x = x + 0.5 * self.dropout(self.ff2(self.norm_ff2(x)))
        return self.norm_out(x), kv, new_conv


class ConformerEncoder(nn.Module):
    """CMVN -> conv2d subsampling -> Conformer blocks, full-context, chunk-masked or streamed."""

    def __init__(
        self,
        input_dim: int,
        d_model: int = 256,
        num_heads: int = 4,
        ffn_dim: int = 2048,
        num_blocks: int = 12,
        subsampling_rate: int = 4,
        subsampling_channels: int = 0,
        conv_kernel: int = 15,
        causal_conv: bool = True,
        conv_norm: str = "layer_norm",
        pos_enc: str = "xl",
        max_rel_dist: int = 0,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        final_norm: bool = False,
        norm_eps: float = 1e-5,
        conv_pad: str = "zero",
    ) -> None:
        """``final_norm``: a LayerNorm after the last block (WeNet's ``after_norm``);
        ``norm_eps``: the epsilon of every LayerNorm (WeNet before 2022: 1e-12); ``conv_pad``:
        what the causal conv sees before the first frame (ConvModule)."""
        super().__init__()
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_blocks = num_blocks
        self.conv_kernel = conv_kernel
        self.causal_conv = causal_conv
        self.cmvn = GlobalCMVN(input_dim)
        self.subsampling = Conv2dSubsampling(
            input_dim, d_model, subsampling_rate, subsampling_channels
        )
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            [
                ConformerBlock(
                    d_model, num_heads, ffn_dim, conv_kernel, causal_conv, conv_norm,
                    pos_enc, max_rel_dist, dropout, attention_dropout, norm_eps, conv_pad,
                )
                for _ in range(num_blocks)
            ]
        )  # fmt: skip
        self.key_positions = pos_enc == "wenet"
        """WeNet's position term: the keys' absolute positions in the stream (its offset)"""
        self.conv_pad_wenet = conv_pad == "wenet" and causal_conv
        self.final_norm: nn.Module = (
            nn.LayerNorm(d_model, eps=norm_eps) if final_norm else nn.Identity()
        )

    def forward(
        self,
        feats: torch.Tensor,
        feats_lens: torch.Tensor,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode whole utterances, optionally with the chunk mask used in streaming.

        Args:
            feats: (B, T_in, F) fbank features; feats_lens: (B,) valid input frames.
            chunk_size: encoder frames per chunk, <= 0 for full context.
            num_left_chunks: chunks of history each chunk sees, -1 for all.
        Returns:
            out (B, T, D) and out_lens (B,).
        """
        x, lens = self.subsampling(self.cmvn(feats), feats_lens)  # (B, T, D)
        x = self.dropout(x)
        b, t, _ = x.size()
        mask = attention_mask(lens, t, chunk_size, num_left_chunks)  # (B, T, T)
        valid = valid_mask(lens, t)  # (B, T)
        pos = self.position_tables(t, t)
        att_cache = x.new_zeros(b, self.num_heads, 0, 2 * (self.d_model // self.num_heads))
        conv_cache = x.new_zeros(b, self.d_model, self._conv_cache_size())
        conv_real = self._conv_real(lens.new_zeros(b))  # nothing before the first frame (or None)
        for i, block in enumerate(self.blocks):
            x, _, _ = block(x, pos[i], mask, valid, att_cache, conv_cache, conv_real)
        return self.final_norm(x), lens

    @torch.jit.export
    def position_tables(self, num_queries: int, num_keys: int) -> List[torch.Tensor]:
        """Each block's p(r) for C queries that are the last of M+C keys: [(H, P, d_k)] * L.

        They depend only on the window shape, so a caller streaming many chunks of one shape
        computes them once and passes them to :meth:`forward_chunk`.
        """
        if self.key_positions:  # WeNet's: key j at position j (a stream's first window)
            positions = torch.arange(num_keys, device=self.cmvn.mean.device)
            return [block.rel_pos(positions) for block in self.blocks]
        distances = window_distances(num_queries, num_keys, self.cmvn.mean.device)
        return [block.rel_pos(distances) for block in self.blocks]

    @torch.jit.export
    def init_state(
        self, batch_size: int, chunk_size: int = 0, num_left_chunks: int = -1
    ) -> EncoderState:
        """Zero state for ``batch_size`` new streams.

        With ``num_left_chunks >= 0`` the attention cache has a fixed size of
        chunk_size * num_left_chunks frames (every shape static, e.g. for ONNX); with -1 it
        starts empty and grows with the stream.
        """
        if num_left_chunks >= 0 and chunk_size <= 0:
            raise ValueError(
                f"a fixed cache of {num_left_chunks} left chunks needs chunk_size > 0, "
                f"got {chunk_size}"
            )
        cached = chunk_size * num_left_chunks if num_left_chunks >= 0 else 0
        limit = cached if num_left_chunks >= 0 else -1
        ref = self.cmvn.mean
        head_dim = self.d_model // self.num_heads
        att_cache = ref.new_zeros(self.num_blocks, batch_size, self.num_heads, cached, 2 * head_dim)
        conv_cache = ref.new_zeros(
            self.num_blocks, batch_size, self.d_model, self._conv_cache_size()
        )
        return EncoderState(
            att_cache=att_cache,
            conv_cache=conv_cache,
            cache_len=torch.zeros(batch_size, dtype=torch.long, device=ref.device),
            cache_limit=torch.full([1], limit, dtype=torch.long, device=ref.device),
            offset=torch.zeros(batch_size, dtype=torch.long, device=ref.device),
        )

    @torch.jit.export
    def forward_chunk(
        self,
        feats_window: torch.Tensor,
        state: EncoderState,
        window_lens: Optional[torch.Tensor] = None,
        pos: Optional[List[torch.Tensor]] = None,
        fixed_cache: Optional[bool] = None,
    ) -> Tuple[torch.Tensor, EncoderState]:
        """Encode one chunk of a stream; pure: returns a new state, never writes its input.

        Args:
            feats_window: (B, W, F) with W = (C-1)*rate + right_context + 1 input frames
                (windows of consecutive chunks overlap by right_context + 1 - rate frames).
            state: from :meth:`init_state` or the previous call.
            window_lens: (B,) valid input frames per window, for a batch whose streams end
                inside this chunk (such a stream's state is not meant to be used afterwards).
            pos: optional :meth:`position_tables` for this window shape; with WeNet's key
                positions, tables over positions 0..T-1 with T >= the largest offset + C.
            fixed_cache: what ``state.cache_limit`` says (True: a fixed cache of its M frames,
                False: a growing one), given where the tensor cannot be read (torch.export).
        Returns:
            out (B, C, D) and the new state.
        """
        if not self.causal_conv:
            raise RuntimeError(
                "forward_chunk needs a causal conv: this encoder's conv sees future frames, "
                "so chunk-by-chunk output would not match any training condition"
            )
        b, w_in, _ = feats_window.size()
        if window_lens is None:
            window_lens = torch.full([b], w_in, dtype=torch.long, device=feats_window.device)
        x, chunk_lens = self.subsampling(self.cmvn(feats_window), window_lens)  # (B, C, D)
        c = x.size(1)
        m = state.att_cache.size(3)
        if self.key_positions:  # each stream's keys at their own absolute positions
            pos = self._key_tables(state.offset, m, c, pos)
        elif pos is None:
            pos = self.position_tables(c, m + c)
        mask = self._chunk_mask(state.cache_len, chunk_lens, m, c)  # (B, C, M+C)
        valid = valid_mask(chunk_lens, c)  # (B, C)
        if fixed_cache is None:
            limit = int(state.cache_limit.item())
        else:
            limit = m if fixed_cache else -1
        new_att: List[torch.Tensor] = []
        new_conv: List[torch.Tensor] = []
        conv_real = self._conv_real(state.cache_len)
        # Eager: the keys and values live in a slab with room after the cached frames
        # (model/state.py, cache_room): every layer reads its M cached frames and writes its
        # C new ones in place, and the new state is a view C frames further on; no per-layer
        # concatenation, no stacking of the layers, and a copy only when the room runs out
        # (exported graphs keep cat and stack).
        slab: Optional[torch.Tensor] = None
        start = 0
        if is_eager():
            slab, start = cache_room(state.att_cache, c)
        for i, block in enumerate(self.blocks):
            att_in = state.att_cache[i]
            kv_out: Optional[torch.Tensor] = None
            if slab is not None:
                kv_out = slab[i, :, :, start : start + m + c]
                att_in = kv_out[:, :, :m]
            x, kv, cv = block(x, pos[i], mask, valid, att_in, state.conv_cache[i], conv_real,
                              kv_out)  # fmt: skip
            if slab is None:
                new_att.append(kv if limit < 0 else kv[:, :, kv.size(2) - limit :])
            new_conv.append(cv)
        kept = m + c if limit < 0 else limit
        if slab is None:
            att_cache = torch.stack(new_att)  # (L, B, H, M', 2*d_k)
        else:
            end = start + m + c
            att_cache = cache_view(slab, end - kept, end)
        return self.final_norm(x), EncoderState(
            att_cache=att_cache,
            conv_cache=torch.stack(new_conv),  # (L, B, D, K-1)
            cache_len=torch.clamp(state.cache_len + c, max=kept),
            cache_limit=state.cache_limit,
            offset=state.offset + c,
        )

    @torch.jit.export
    def forward_chunk_by_chunk(
        self,
        feats: torch.Tensor,
        chunk_size: int,
        num_left_chunks: int = -1,
        feats_lens: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Stream whole utterances through :meth:`forward_chunk`, chunk by chunk.

        Equals ``forward(feats, feats_lens, chunk_size, num_left_chunks)`` on valid frames.

        Args:
            feats: (B, T_in, F); feats_lens: (B,) valid frames (default: all).
        Returns:
            out (B, T, D).
        """
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive for streaming, got {chunk_size}")
        b, t_in, _ = feats.size()
        if feats_lens is None:
            feats_lens = torch.full([b], t_in, dtype=torch.long, device=feats.device)
        sub = self.subsampling
        total = int(sub.output_lengths(torch.tensor(t_in)).item())
        num_chunks = (total + chunk_size - 1) // chunk_size
        state = self.init_state(b, chunk_size, num_left_chunks)
        # One set of position tables covers every chunk: a window's distances are a
        # contiguous slice of those of the largest window.
        max_cached = chunk_size * num_left_chunks if num_left_chunks >= 0 else 0
        if num_left_chunks < 0:
            max_cached = (num_chunks - 1) * chunk_size
        max_keys = max_cached + chunk_size
        if self.key_positions:  # absolute positions: one table over the whole utterance
            max_keys = num_chunks * chunk_size
        tables = self.position_tables(chunk_size, max_keys)
        outs: List[torch.Tensor] = [feats.new_zeros(b, 0, self.d_model)]
        window = sub.window_size(chunk_size)
        for k in range(num_chunks):
            start = k * chunk_size * sub.rate
            c = min(chunk_size, total - k * chunk_size)
            pos = tables
            if not self.key_positions:
                pos = slice_tables(tables, max_keys, c, state.att_cache.size(3) + c)
            lens = torch.clamp(feats_lens - start, 0, window)
            out, state = self.forward_chunk(
                feats[:, start : start + window], state, lens, pos, None
            )
            outs.append(out)
        return torch.cat(outs, dim=1)

    def _key_tables(
        self, offset: torch.Tensor, m: int, c: int, tables: Optional[List[torch.Tensor]]
    ) -> List[torch.Tensor]:
        """Each block's embeddings of the M+C keys' absolute positions, (B, H, M+C, d_k):
        cache slot s of a stream at ``offset`` holds its frame offset-M+s (slots before the
        stream's start are masked; they use position 0). From ``tables`` (positions 0..T-1)
        when given, else computed (exported graphs, where no table is kept)."""
        slots = torch.arange(m + c, device=offset.device)
        positions = (offset.unsqueeze(1) - m + slots.unsqueeze(0)).clamp(min=0)  # (B, M+C)
        b = positions.size(0)
        flat = positions.reshape(-1)
        out: List[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            rows = block.rel_pos(flat) if tables is None else tables[i].index_select(1, flat)
            out.append(rows.view(rows.size(0), b, m + c, rows.size(2)).transpose(0, 1))
        return out

    def _conv_cache_size(self) -> int:
        return self.conv_kernel - 1 if self.causal_conv else 0

    def _conv_real(self, cache_len: torch.Tensor) -> Optional[torch.Tensor]:
        """Which of the conv cache's K-1 columns hold frames of the stream: the last
        min(cache_len, K-1), (B, 1, K-1); None when no block pads as WeNet (nothing reads it).
        Exact while the attention cache keeps at least K-1 frames (checked in
        ``check_chunking`` for the ``wenet`` conv pad)."""
        if not self.conv_pad_wenet:
            return None
        k = self._conv_cache_size()
        cols = torch.arange(k, device=cache_len.device)
        return (cols.unsqueeze(0) >= (k - cache_len.clamp(max=k)).unsqueeze(1)).unsqueeze(1)

    def _chunk_mask(
        self, cache_len: torch.Tensor, chunk_lens: torch.Tensor, m: int, c: int
    ) -> torch.Tensor:
        """(B, C, M+C): valid cached frames (right-aligned), valid chunk frames, and self."""
        slots = torch.arange(m, device=cache_len.device)
        cached = slots.unsqueeze(0) >= (m - cache_len).unsqueeze(1)  # (B, M)
        current = valid_mask(chunk_lens, c)  # (B, C)
        keys = torch.cat([cached, current], dim=1).unsqueeze(1).expand(-1, c, -1)  # (B, C, M+C)
        # arange == arange rather than torch.eye: ONNX Runtime has no bool EyeLike kernel.
        frames = torch.arange(c, device=cache_len.device)
        eye = frames.unsqueeze(1) == frames.unsqueeze(0)  # (C, C)
        self_seen = torch.cat([torch.zeros(c, m, dtype=torch.bool, device=eye.device), eye], 1)
        return keys | self_seen.unsqueeze(0)  # (B, C, M+C)
