"""The ASR model (encoder + CTC head, and optionally U2++'s attention decoder) and the one
function that maps config to modules."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from wenet_lite.config import ExperimentConfig
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead
from wenet_lite.model.decoder import AttentionDecoder

__all__ = ["ASRModel", "build_model", "describe_model"]


class ASRModel(nn.Module):
    """Conformer encoder with a CTC head and an optional attention decoder. Chunking is
    chosen per call, so one model trained with dynamic chunks serves full-context and every
    chunk size; the decoder sees the same (chunk-masked) encoder output as CTC.

    With a decoder the loss is ``ctc_weight * CTC + (1 - ctc_weight) * ((1 - reverse_weight)
    * L2R + reverse_weight * R2L)`` (``config.ModelConfig``); without one, CTC alone."""

    def __init__(
        self,
        encoder: ConformerEncoder,
        ctc: CTCHead,
        decoder: Optional[AttentionDecoder] = None,
        ctc_weight: float = 1.0,
        reverse_weight: float = 0.0,
        lsm_weight: float = 0.0,
        detach_decoder_input: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.ctc = ctc
        self.decoder = decoder
        self.ctc_weight = ctc_weight if decoder is not None else 1.0
        self.reverse_weight = reverse_weight
        self.lsm_weight = lsm_weight
        self.detach_decoder_input = detach_decoder_input

    def forward(
        self,
        feats: torch.Tensor,
        feats_lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args: feats (B, T_in, F), feats_lens (B,), targets (B, U), target_lens (B,).
        Returns: the training loss per utterance (scalar), encoder lengths (B,), and its parts
        for logs (2,), detached: CTC's and the attention decoder's (0 without one)."""
        out, lens = self.encoder(feats, feats_lens, chunk_size, num_left_chunks)
        ctc = self.ctc.loss(out, lens, targets, target_lens)
        loss, att = ctc, torch.zeros_like(ctc)
        if self.decoder is not None and self.ctc_weight < 1.0:
            memory = out.detach() if self.detach_decoder_input else out
            att = self.decoder.loss(
                memory, lens, targets, target_lens, self.reverse_weight, self.lsm_weight
            )
            loss = self.ctc_weight * ctc + (1.0 - self.ctc_weight) * att
        return loss, lens, torch.stack([ctc, att]).detach()

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


def compile_for_training(model: ASRModel) -> None:
    """``train.compile``: compile the encoder in place (its parameters and state_dict keys stay
    the model's) with dynamic shapes, so batches of new lengths reuse the compiled code: a few
    compilations per run (full context, chunks with and without a left limit; eval mode).

    The convolutions stay eager: inductor's convolution backward fixes the frame count it was
    compiled for, which would compile again for every batch length. The CTC loss stays eager
    too (its output shape depends on the targets' values).
    """
    from wenet_lite.model.convolution import ConvModule
    from wenet_lite.model.subsampling import Conv2dSubsampling

    for module in model.encoder.modules():
        if isinstance(module, (ConvModule, Conv2dSubsampling)):
            module.forward = torch.compiler.disable(module.forward)
    model.encoder.compile(dynamic=True)


MAX_PARAMETERS = 4_000_000_000
"""the largest model built (16 GB of float32 weights): each config size has its own bound, but
their product can still ask for terabytes"""


def build_model(cfg: ExperimentConfig, vocab_size: int) -> ASRModel:
    """The only place that reads the config to construct layers. A config whose sizes add up to
    more than ``MAX_PARAMETERS`` is a ValueError naming them, before any memory is taken."""
    if torch.get_default_device().type != "meta":
        with torch.device("meta"):  # shapes only: counted without memory
            count = sum(p.numel() for p in build_model(cfg, vocab_size).parameters())
        if count > MAX_PARAMETERS:
            enc = cfg.encoder
            raise ValueError(
                f"encoder.d_model {enc.d_model}, encoder.ffn_dim {enc.ffn_dim} and "
                f"encoder.num_blocks {enc.num_blocks} (and the decoder's sizes) make a model of "
                f"{count / 1e9:,.1f} G parameters ({count * 4 / 1e9:,.0f} GB in float32); at "
                f"most {MAX_PARAMETERS / 1e9:g} G are built"
            )
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
        final_norm=enc.final_norm,
        norm_eps=enc.norm_eps,
        conv_pad=enc.conv_pad,
    )
    decoder = None
    dec = cfg.decoder
    if dec.type == "bitransformer":
        decoder = AttentionDecoder(
            vocab_size=vocab_size,
            d_model=enc.d_model,
            num_heads=dec.num_heads,
            ffn_dim=dec.ffn_dim,
            num_blocks=dec.num_blocks,
            r2l_num_blocks=dec.r2l_num_blocks,
            dropout=dec.dropout,
            attention_dropout=dec.attention_dropout,
            activation=dec.activation,
            norm_eps=dec.norm_eps,
            sos_eos_id=dec.sos_eos_id,
        )
    loss = cfg.model
    return ASRModel(
        encoder,
        CTCHead(enc.d_model, vocab_size),
        decoder,
        loss.ctc_weight,
        loss.reverse_weight,
        loss.lsm_weight,
        dec.detach_encoder,
    )


def describe_model(cfg: ExperimentConfig) -> str:
    """What a model is, in a few words for figure titles and tables, e.g. ``Conformer 6 x 144
    (4 heads, FFN 576, dynamic chunks), 128 unigram pieces``."""
    enc, dec = cfg.encoder, cfg.decoder
    decoder = ""
    if dec.type != "none":
        decoder = f" + decoder {dec.num_blocks}+{dec.r2l_num_blocks} blocks"
    return (
        f"Conformer {enc.num_blocks} x {enc.d_model} ({enc.num_heads} heads, FFN {enc.ffn_dim}, "
        f"{enc.chunk.mode} chunks){decoder}, {cfg.tokenizer.vocab_size} "
        f"{cfg.tokenizer.model_type} pieces"
    )
