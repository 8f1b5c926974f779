"""The batched streaming graph: one chunk of B streams, our state layout, for the onnxruntime
engine (``wenet_lite.runtime.engines``). The sherpa-onnx file (``export/onnx.py``) stays batch 1
with sherpa's inputs.

Inputs: ``x`` (B, W, F) windows zero-padded to W, ``x_lens`` (B,) int64 valid frames, and the
state of a fixed cache (``left_chunks`` N >= 0, M = C*N): ``att_cache`` (L, B, H, M, 2*d_k),
``conv_cache`` (L, B, D, K-1), ``cache_len`` (B,) int64. Outputs: ``log_probs`` (B, C, V),
the new ``att_cache``, ``conv_cache``, ``cache_len``, and ``encoder_out`` (B, C, D), which
attention rescoring keeps (a runtime that does not rescore need not fetch it). B is dynamic;
everything else fixed by C and N. Exported with torch.export
(``torch.onnx.export(dynamo=True)``, which needs onnxscript); the position tables of the one
window shape are constants in the graph.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, Dict, Iterator, Tuple

import torch
from torch import nn

from wenet_lite.export.common import to_torch_linear
from wenet_lite.model import ASRModel
from wenet_lite.model.attention import RelPositionAttention
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead
from wenet_lite.model.state import EncoderState

__all__ = [
    "BatchedChunk",
    "KeyBatchedChunk",
    "batched_chunk",
    "batched_example",
    "export_batched_onnx",
    "plain_attention",
]

INPUTS = ("x", "x_lens", "att_cache", "conv_cache", "cache_len")
KEY_INPUTS = INPUTS + ("offset",)
"""inputs of the graph of an encoder with WeNet's key positions: each stream's offset too"""
OUTPUTS = ("log_probs", "new_att_cache", "new_conv_cache", "new_cache_len", "encoder_out")
OPSET = 18


class BatchedChunk(nn.Module):
    """``forward_chunk`` + CTC over a fixed cache, with tensors in and out."""

    def __init__(
        self, encoder: ConformerEncoder, ctc: CTCHead, chunking: Chunking, logits: bool = False
    ) -> None:
        """``logits``: return the CTC head's logits instead of log-probs (ExecuTorch)."""
        super().__init__()
        self.logits = logits
        if not chunking.streaming or chunking.left_chunks < 0:
            raise ValueError(
                "the batched graph needs a chunk size >= 1 and a fixed cache (left chunks >= "
                f"0), got chunk {chunking.chunk_size}, left chunks {chunking.left_chunks}"
            )
        self.encoder, self.ctc = encoder, ctc
        cached = chunking.chunk_size * chunking.left_chunks
        tables = torch.zeros(0)
        if not encoder.key_positions:  # key positions are computed per stream in the graph
            with torch.no_grad():
                tables = torch.stack(
                    encoder.position_tables(chunking.chunk_size, cached + chunking.chunk_size)
                )
        self.register_buffer("pos_tables", tables)  # (L, H, M+2C-1, d_k)
        self.register_buffer("cache_limit", torch.tensor([cached]))

    def forward(
        self,
        x: torch.Tensor,
        x_lens: torch.Tensor,
        att_cache: torch.Tensor,
        conv_cache: torch.Tensor,
        cache_len: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        offset = cache_len * 0  # relative positions do not read it
        return self._chunk(x, x_lens, EncoderState(att_cache, conv_cache, cache_len,
                                                   self.cache_limit, offset))  # fmt: skip

    def _chunk(
        self, x: torch.Tensor, x_lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        pos = None if self.encoder.key_positions else list(self.pos_tables.unbind(0))
        out, new = self.encoder.forward_chunk(x, state, x_lens, pos, True)
        scores = self.ctc.proj(out) if self.logits else self.ctc(out)
        return scores, new.att_cache, new.conv_cache, new.cache_len, out


class KeyBatchedChunk(BatchedChunk):
    """:class:`BatchedChunk` of an encoder with WeNet's key positions: takes each stream's
    offset (B,) as a sixth input."""

    def forward(  # type: ignore[override]
        self, x: torch.Tensor, x_lens: torch.Tensor, att_cache: torch.Tensor,
        conv_cache: torch.Tensor, cache_len: torch.Tensor, offset: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        state = EncoderState(att_cache, conv_cache, cache_len, self.cache_limit, offset)
        return self._chunk(x, x_lens, state)


def batched_chunk(
    encoder: ConformerEncoder, ctc: CTCHead, chunking: Chunking, logits: bool = False
) -> BatchedChunk:
    """The batched wrapper for this encoder: with an offset input for key positions."""
    kind = KeyBatchedChunk if encoder.key_positions else BatchedChunk
    return kind(encoder, ctc, chunking, logits)


def export_batched_onnx(model: ASRModel, chunking: Chunking) -> bytes:
    """The batched graph of an in-memory model (fp32), as ONNX bytes."""
    wrapper = plain_attention(to_torch_linear(batched_chunk(model.encoder, model.ctc, chunking)))
    example, dynamic = batched_example(model, chunking, 65536)
    names = KEY_INPUTS if model.encoder.key_positions else INPUTS
    with quiet_exporter():
        program = torch.onnx.export(
            wrapper, example, dynamo=True, input_names=list(names), output_names=list(OUTPUTS),
            dynamic_shapes=dynamic, opset_version=OPSET, optimize=True, verbose=False,
        )  # fmt: skip
    return program.model_proto.SerializeToString()


def plain_attention(module: nn.Module) -> nn.Module:
    """``module`` (an export copy) in eval mode with its attention in plain products
    (``RelPositionAttention.plain_softmax``): fewer, larger ops for the runtimes (measured
    2-3 % faster in onnxruntime; what lets XNNPACK take attention whole)."""
    for layer in module.modules():
        if isinstance(layer, RelPositionAttention):
            layer.plain_softmax = True
    return module.eval()


def batched_example(
    model: ASRModel, chunking: Chunking, max_batch: int
) -> Tuple[Tuple[torch.Tensor, ...], Dict[str, Dict[int, Any]]]:
    """Example inputs of :class:`BatchedChunk` (2 streams) and torch.export's dynamic shapes
    (the batch, up to ``max_batch``)."""
    enc = model.encoder
    window = enc.subsampling.window_size(chunking.chunk_size)
    cached = chunking.chunk_size * chunking.left_chunks
    head_dim = enc.d_model // enc.num_heads
    b = 2
    example = (
        torch.zeros(b, window, enc.cmvn.mean.numel()),
        torch.full((b,), window, dtype=torch.long),
        torch.zeros(enc.num_blocks, b, enc.num_heads, cached, 2 * head_dim),
        torch.zeros(enc.num_blocks, b, enc.d_model, enc.conv_kernel - 1),
        torch.zeros(b, dtype=torch.long),
    )
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    dynamic = {"x": {0: batch}, "x_lens": {0: batch}, "att_cache": {1: batch},
               "conv_cache": {1: batch}, "cache_len": {0: batch}}  # fmt: skip
    if enc.key_positions:
        example += (torch.zeros(b, dtype=torch.long),)
        dynamic["offset"] = {0: batch}
    return example, dynamic


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporter's progress lines, its optimizer's hundreds of INFO records and its notes
    on torchvision are not the user's business."""
    names = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir",
             "torch.utils._pytree", "torchao", "executorch")  # fmt: skip
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
