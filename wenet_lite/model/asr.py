"""The ASR model (encoder + CTC head) and the one function that maps config to modules."""

from __future__ import annotations

from typing import Tuple

import torch
from torch import nn

from wenet_lite.config import ExperimentConfig
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead

__all__ = ["ASRModel", "build_model", "describe_model"]


class ASRModel(nn.Module):
    """Conformer encoder with a CTC head. Chunking is chosen per call, so one model trained
    with dynamic chunks serves full-context and every chunk size."""

    def __init__(self, encoder: ConformerEncoder, ctc: CTCHead) -> None:
        super().__init__()
        self.encoder = encoder
        self.ctc = ctc

    def forward(
        self,
        feats: torch.Tensor,
        feats_lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: feats (B, T_in, F), feats_lens (B,), targets (B, U), target_lens (B,).
        Returns: CTC loss per utterance (scalar) and encoder lengths (B,)."""
        out, lens = self.encoder(feats, feats_lens, chunk_size, num_left_chunks)
        return self.ctc.loss(out, lens, targets, target_lens), lens

    def ctc_log_probs(
        self,
        feats: torch.Tensor,
        feats_lens: torch.Tensor,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Returns: log-probabilities (B, T, V) and lengths (B,)."""
        out, lens = self.encoder(feats, feats_lens, chunk_size, num_left_chunks)
        return self.ctc(out), lens


def build_model(cfg: ExperimentConfig, vocab_size: int) -> ASRModel:
    """The only place that reads the config to construct layers."""
    enc = cfg.encoder
    encoder = ConformerEncoder(
        input_dim=cfg.features.num_mel_bins,
        d_model=enc.d_model,
        num_heads=enc.num_heads,
        ffn_dim=enc.ffn_dim,
        num_blocks=enc.num_blocks,
        subsampling_rate=enc.subsampling_rate,
        subsampling_channels=enc.subsampling_channels,
        conv_kernel=enc.conv_kernel,
        causal_conv=enc.causal_conv,
        conv_norm=enc.conv_norm,
        pos_enc=enc.pos_enc,
        max_rel_dist=enc.max_rel_dist,
        dropout=enc.dropout,
        attention_dropout=enc.attention_dropout,
    )
    return ASRModel(encoder, CTCHead(enc.d_model, vocab_size))


def describe_model(cfg: ExperimentConfig) -> str:
    """What a model is, in a few words for figure titles and tables, e.g. ``Conformer 6 x 144
    (4 heads, FFN 576, dynamic chunks), 128 unigram pieces``."""
    enc = cfg.encoder
    return (
        f"Conformer {enc.num_blocks} x {enc.d_model} ({enc.num_heads} heads, FFN {enc.ffn_dim}, "
        f"{enc.chunk.mode} chunks), {cfg.tokenizer.vocab_size} {cfg.tokenizer.model_type} pieces"
    )
