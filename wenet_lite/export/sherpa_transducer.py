"""The transducer head for sherpa-onnx: ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx``
in the interface of its streaming "conformer" transducer (icefall's), which
``sherpa_onnx.OnlineRecognizer.from_transducer(tokens=..., encoder=..., decoder=...,
joiner=...)`` runs. Written by `wenet-lite export --format onnx` into ``transducer/`` beside
the CTC files when the model has the head.

The interface, as k2-fsa/sherpa-onnx reads it (sherpa-onnx/csrc/
online-conformer-transducer-model.cc, online-recognizer-transducer-impl.h,
online-transducer-greedy-search-decoder.cc):

- encoder metadata: ``model_type`` conformer, ``num_encoder_layers`` L, ``T`` input frames a
  chunk (our window W), ``decode_chunk_len`` frames between chunks (C x rate), ``left_context``
  cached frames (M = C x N), ``encoder_dim`` (the cache width), ``pad_length``,
  ``cnn_module_kernel`` K. Inputs by position: features (N, W, F), an attention cache
  (L, M, N, encoder_dim), a conv cache (L, K-1, N, encoder_dim), the input frames processed
  before the chunk (N,) int64; outputs: the chunk's frames (N, C, J) and both caches; the
  caches are batched on dimension 2 and start as zeros.
- Our attention cache holds each cached frame's keys and values (2 x D), so ``encoder_dim``
  is 2 x D and the conv cache (D per frame) is padded to it with zeros. The cache's valid
  frames are right-aligned, as ours: min(processed / rate, M) of them, which the wrapper gives
  the encoder as its cache length.
- decoder metadata ``vocab_size``, ``context_size``; input (N, context) int64, the last tokens
  with -1 for "none yet" (read as the blank, whose embedding is zero); output (N, J): the
  prediction already through the joiner's projection.
- joiner: (N, J) frame and (N, J) prediction -> (N, V) logits.
- sherpa's greedy search takes one symbol a frame (ours takes up to 4) and reads ``<unk>`` as
  the blank; it never decodes a stream's last incomplete window.
- features: its transducer defaults scale samples to [-1, 1]; ours are int16-scaled, 20 Hz to
  Nyquist - 400: pass ``normalize_samples=False, low_freq=20, high_freq=-400,
  snip_edges=False`` (docs/export.md).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, Tuple

import torch
from torch import nn

from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.model import ASRModel
from wenet_lite.model.state import EncoderState
from wenet_lite.model.transducer import TransducerHead

__all__ = ["SherpaConformerEncoder", "check_transducer_export", "export_sherpa_transducer"]

OPSET = 17


class SherpaConformerEncoder(nn.Module):
    """Our streaming encoder and the joiner's frame projection behind sherpa-onnx's
    conformer-transducer encoder interface (see the module docstring)."""

    def __init__(self, model: ASRModel, chunk_size: int, left_chunks: int) -> None:
        super().__init__()
        assert model.transducer is not None
        self.encoder, self.proj = model.encoder, model.transducer.joiner.enc_proj
        self.cached = chunk_size * left_chunks
        self.rate = model.encoder.subsampling.rate
        with torch.no_grad():  # p(r) of the one window shape: constants in the graph
            tables = torch.stack(self.encoder.position_tables(chunk_size, self.cached + chunk_size))
        self.register_buffer("pos_tables", tables)  # (L, H, M+2C-1, d_k)

    def forward(
        self,
        x: torch.Tensor,
        attn_cache: torch.Tensor,
        cnn_cache: torch.Tensor,
        processed_lens: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        L, M, N, _ = attn_cache.shape
        enc = self.encoder
        H, D = enc.num_heads, enc.d_model
        att = attn_cache.view(L, M, N, H, -1).permute(0, 2, 3, 1, 4)  # (L, N, H, M, 2*d_k)
        conv = cnn_cache[..., :D].permute(0, 2, 3, 1)  # (L, N, D, K-1)
        cache_len = torch.clamp(processed_lens.to(torch.int64) // self.rate, max=self.cached)
        state = EncoderState(
            att_cache=att,
            conv_cache=conv,
            cache_len=cache_len,
            cache_limit=torch.full([1], self.cached, dtype=torch.int64),
            offset=cache_len,
        )
        out, new = enc.forward_chunk(x, state, None, list(self.pos_tables.unbind(0)))
        next_att = new.att_cache.permute(0, 3, 1, 2, 4).reshape(L, M, N, 2 * D)
        next_conv = new.conv_cache.permute(0, 3, 1, 2)  # (L, K-1, N, D)
        next_conv = torch.cat([next_conv, torch.zeros_like(next_conv)], dim=3)  # to 2 x D
        return self.proj(out), next_att, next_conv


class _Decoder(nn.Module):
    def __init__(self, head: TransducerHead) -> None:
        super().__init__()
        self.predictor, self.proj = head.predictor, head.joiner.pred_proj

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """y (N, context) int64, -1 for none yet -> (N, J)."""
        return self.proj(self.predictor(y.clamp(min=0))[:, -1])


class _Joiner(nn.Module):
    def __init__(self, head: TransducerHead) -> None:
        super().__init__()
        self.out = head.joiner.out

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(encoder_out + decoder_out))


def check_transducer_export(model: ASRModel, left_chunks: int) -> None:
    """ValueError where sherpa-onnx's transducer files cannot be made for ``model`` (checked
    before any file is written)."""
    head = model.transducer
    if head is None:
        raise ValueError("the model has no transducer head to export")
    enc = model.encoder
    if enc.key_positions:
        raise ValueError(
            "sherpa-onnx's transducer export needs relative positions: this model's "
            "encoder.pos_enc is wenet (absolute key positions)"
        )
    if left_chunks < 1:
        raise FieldError(
            "the transducer export needs a fixed cache of at least one chunk: "
            f"{{left}} >= 1, got {left_chunks}",
            left=Setting("left_chunks"),
        )


def export_sherpa_transducer(
    model: ASRModel, out_dir: Path, chunk_size: int, left_chunks: int, tokens: Path
) -> Dict[str, Path]:
    """Write ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt`` (a copy of
    ``tokens``) into ``out_dir``; returns their paths by role (``transducer_encoder``, ...)."""
    from wenet_lite.export.common import load_produced, save_onnx, set_metadata, to_torch_linear
    from wenet_lite.fileio import write_text_atomic

    check_transducer_export(model, left_chunks)
    head, enc = model.transducer, model.encoder
    assert head is not None
    sub, M = enc.subsampling, chunk_size * left_chunks
    window, D, L, K = sub.window_size(chunk_size), enc.d_model, enc.num_blocks, enc.conv_kernel
    J, context = head.joiner.out.in_features, head.predictor.context
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "transducer_encoder": out_dir / "encoder.onnx",
        "transducer_decoder": out_dir / "decoder.onnx",
        "transducer_joiner": out_dir / "joiner.onnx",
        "transducer_tokens": out_dir / "tokens.txt",
    }
    parts = [
        (
            to_torch_linear(SherpaConformerEncoder(model, chunk_size, left_chunks)),
            (torch.randn(1, window, enc.cmvn.mean.numel()), torch.zeros(L, M, 1, 2 * D),
             torch.zeros(L, K - 1, 1, 2 * D), torch.zeros(1, dtype=torch.int64)),
            ["x", "attn_cache", "cnn_cache", "processed_lens"],
            ["encoder_out", "next_attn_cache", "next_cnn_cache"],
            {"x": {0: "N"}, "attn_cache": {2: "N"}, "cnn_cache": {2: "N"},
             "processed_lens": {0: "N"}, "encoder_out": {0: "N"}, "next_attn_cache": {2: "N"},
             "next_cnn_cache": {2: "N"}},
            paths["transducer_encoder"],
            {"model_type": "conformer", "num_encoder_layers": L, "T": window,
             "decode_chunk_len": chunk_size * sub.rate, "left_context": M, "encoder_dim": 2 * D,
             "pad_length": sub.right_context, "cnn_module_kernel": K,
             "model_author": "wenet_lite", "version": 1},
        ),
        (
            to_torch_linear(_Decoder(head)),
            (torch.zeros(1, context, dtype=torch.int64),),
            ["y"],
            ["decoder_out"],
            {"y": {0: "N"}, "decoder_out": {0: "N"}},
            paths["transducer_decoder"],
            {"vocab_size": head.joiner.out.out_features, "context_size": context},
        ),
        (
            to_torch_linear(_Joiner(head)),
            (torch.zeros(1, J), torch.zeros(1, J)),
            ["encoder_out", "decoder_out"],
            ["logit"],
            {"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}},
            paths["transducer_joiner"],
            {"joiner_dim": J},
        ),
    ]  # fmt: skip
    for module, inputs, names_in, names_out, axes, path, meta in parts:

        def export(raw: str, module=module, inputs=inputs, names_in=names_in,
                   names_out=names_out, axes=axes) -> None:  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                warnings.filterwarnings("ignore", "Constant folding", UserWarning)
                torch.onnx.export(module.eval(), inputs, raw, dynamo=False, opset_version=OPSET,
                                  input_names=names_in, output_names=names_out,
                                  dynamic_axes=axes, do_constant_folding=True)  # fmt: skip

        proto = load_produced(path, export)
        set_metadata(proto, {k: str(v) for k, v in meta.items()})
        save_onnx(proto, path)
    write_text_atomic(paths["transducer_tokens"], tokens.read_text(encoding="utf-8"))
    return paths
