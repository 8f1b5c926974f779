"""The ASR model (encoder + CTC head, and optionally U2++'s attention decoder and a
transducer head) and the one function that maps config to modules."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from wenet_lite.config import ExperimentConfig, TransducerConfig
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead, ctc_loss_sum
from wenet_lite.model.decoder import AttentionDecoder
from wenet_lite.model.mask import valid_mask
from wenet_lite.model.transducer import TransducerHead

__all__ = ["ASRModel", "PARTS", "build_model", "consistency_loss", "describe_model"]


PARTS = ("ctc", "attention", "transducer", "consistency")
"""the loss's parts, as :meth:`ASRModel.forward` returns them for logs"""


class ASRModel(nn.Module):
    """Conformer encoder with a CTC head, an optional attention decoder and an optional
    transducer head. Chunking is chosen per call, so one model trained with dynamic chunks
    serves full-context and every chunk size; the heads see the same (chunk-masked) encoder
    output.

    The loss (``config.ModelConfig``): ``transducer_weight * transducer + (1 -
    transducer_weight) * (ctc_weight * CTC + (1 - ctc_weight) * attention) + ramp *
    cr_ctc_weight * w_ctc * consistency`` (``w_ctc`` CTC's weight in the sum before it,
    ``ramp`` rising from 0 to 1 over ``cr_warmup_steps`` from ``cr_start_step``), a missing
    head's term dropped. The transducer term is icefall's mix of the simple (smoothed) and the
    pruned loss (``transducer`` config, warm-up by step); the consistency term compares the CTC
    posteriors of two views of each utterance (the batch's two halves)."""

    def __init__(
        self,
        encoder: ConformerEncoder,
        ctc: CTCHead,
        decoder: Optional[AttentionDecoder] = None,
        ctc_weight: float = 1.0,
        reverse_weight: float = 0.0,
        lsm_weight: float = 0.0,
        detach_decoder_input: bool = False,
        transducer: Optional[TransducerHead] = None,
        transducer_weight: float = 0.0,
        transducer_cfg: Optional[TransducerConfig] = None,
        cr_ctc_weight: float = 0.0,
        cr_warmup_steps: int = 0,
        cr_start_step: int = 0,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.ctc = ctc
        self.decoder = decoder
        self.ctc_weight = ctc_weight if decoder is not None else 1.0
        self.reverse_weight = reverse_weight
        self.lsm_weight = lsm_weight
        self.detach_decoder_input = detach_decoder_input
        self.transducer = transducer
        self.transducer_weight = transducer_weight if transducer is not None else 0.0
        self.transducer_cfg = transducer_cfg if transducer_cfg is not None else TransducerConfig()
        self.cr_ctc_weight = cr_ctc_weight
        self.cr_warmup_steps = cr_warmup_steps
        self.cr_start_step = cr_start_step

    def forward(
        self,
        feats: torch.Tensor,
        feats_lens: torch.Tensor,
        targets: torch.Tensor,
        target_lens: torch.Tensor,
        chunk_size: int = 0,
        num_left_chunks: int = -1,
        step: Optional[int] = None,
        views: int = 1,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args: feats (B, T_in, F), feats_lens (B,), targets (B, U), target_lens (B,);
        ``step`` the optimizer step (the transducer's warm-up; None: past it); ``views`` 2
        when the batch is two views of the same B/2 utterances (CR-CTC: the first half and the
        second, in the same order).
        Returns: the training loss per utterance (scalar), encoder lengths (B,), and its parts
        for logs (4,), detached: CTC, attention, transducer, consistency (0 for a head or term
        the model does not have)."""
        out, lens = self.encoder(feats, feats_lens, chunk_size, num_left_chunks)
        log_probs = self.ctc(out)  # (B, T, V)
        ctc = ctc_loss_sum(log_probs, lens, targets, target_lens) / out.size(0)
        zero = torch.zeros_like(ctc)
        loss, att, trans, cr = ctc, zero, zero, zero
        if self.decoder is not None and self.ctc_weight < 1.0:
            memory = out.detach() if self.detach_decoder_input else out
            att = self.decoder.loss(
                memory, lens, targets, target_lens, self.reverse_weight, self.lsm_weight
            )
            loss = self.ctc_weight * ctc + (1.0 - self.ctc_weight) * att
        if self.transducer is not None and self.transducer_weight > 0.0:
            trans = self._transducer_loss(out, lens, targets, target_lens, step)
            loss = self.transducer_weight * trans + (1.0 - self.transducer_weight) * loss
        if views == 2 and self.cr_ctc_weight > 0.0:
            cr = consistency_loss(log_probs, lens)
            loss = loss + self.consistency_weight(step) * cr
        return loss, lens, torch.stack([ctc, att, trans, cr]).detach()

    def consistency_weight(self, step: Optional[int]) -> float:
        """The consistency term's weight at ``step`` (None: past the ramp): ``cr_ctc_weight``
        times CTC's own weight in the loss, ramped in linearly over ``cr_warmup_steps`` from
        ``cr_start_step`` (0 before it)."""
        ctc_share = self.ctc_weight * (1.0 - self.transducer_weight)
        warm = self.cr_warmup_steps
        since = None if step is None else step - self.cr_start_step
        ramp = 1.0 if since is None or since >= warm else max(since, 0) / warm
        return ramp * self.cr_ctc_weight * ctc_share

    def _transducer_loss(
        self, out: torch.Tensor, lens: torch.Tensor, targets: torch.Tensor,
        target_lens: torch.Tensor, step: Optional[int],
    ) -> torch.Tensor:  # fmt: skip
        """icefall's mix, per utterance: ``s * simple + p * pruned``, where over the warm-up
        s falls from 1 to ``simple_loss_scale`` and p rises from 0.1 to 1."""
        assert self.transducer is not None
        c = self.transducer_cfg
        simple, pruned = self.transducer.losses(
            out, lens, targets, target_lens, c.prune_range, c.delay_penalty,
            (c.lm_scale, c.am_scale),
        )  # fmt: skip
        done = 1.0 if step is None or step >= c.warmup_steps else step / max(c.warmup_steps, 1)
        s = 1.0 - done * (1.0 - c.simple_loss_scale)
        p = 0.1 + 0.9 * done
        return (s * simple + p * pruned) / out.size(0)

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


def consistency_loss(log_probs: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """CR-CTC's consistency term per utterance of a two-view batch: the symmetric KL divergence
    between the two views' CTC posteriors, frame by frame over valid frames, each direction
    against the other view's posteriors detached (Yao et al. 2024).

    Args: log_probs (B, T, V), the first B/2 one view and the rest the other; lens (B,)."""
    half = log_probs.size(0) // 2
    a, b = log_probs[:half].float(), log_probs[half:].float()
    mask = valid_mask(lens[:half], log_probs.size(1)).unsqueeze(2)  # (B/2, T, 1)
    kl_ab = F.kl_div(a, b.detach(), reduction="none", log_target=True)  # KL(b || a), grad to a
    kl_ba = F.kl_div(b, a.detach(), reduction="none", log_target=True)
    return ((kl_ab + kl_ba) * mask).sum() / log_probs.size(0)


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
    transducer = None
    if cfg.model.transducer_weight > 0.0:
        t = cfg.transducer
        transducer = TransducerHead(enc.d_model, vocab_size, t.predictor_dim or enc.d_model,
                                    t.joiner_dim or enc.d_model, t.context)  # fmt: skip
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
        transducer,
        loss.transducer_weight,
        cfg.transducer,
        loss.cr_ctc_weight,
        loss.cr_warmup_steps,
        loss.cr_start_step,
    )


def describe_model(cfg: ExperimentConfig) -> str:
    """What a model is, in a few words for figure titles and tables, e.g. ``Conformer 6 x 144
    (4 heads, FFN 576, dynamic chunks), 128 unigram pieces``."""
    enc, dec = cfg.encoder, cfg.decoder
    decoder = ""
    if dec.type != "none":
        decoder = f" + decoder {dec.num_blocks}+{dec.r2l_num_blocks} blocks"
    if cfg.model.transducer_weight > 0.0:
        decoder += " + transducer"
    return (
        f"Conformer {enc.num_blocks} x {enc.d_model} ({enc.num_heads} heads, FFN {enc.ffn_dim}, "
        f"{enc.chunk.mode} chunks){decoder}, {cfg.tokenizer.vocab_size} "
        f"{cfg.tokenizer.model_type} pieces"
    )
