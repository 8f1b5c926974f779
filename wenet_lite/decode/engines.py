"""Engines: what runs one chunk of the encoder and the CTC head for a batch of streams.

One call, ``(feature windows, window lengths, state) -> (CTC log-probs, new state)``; the
recogniser above it (features, search, LM, hotwords, endpointing, batching of states, results)
is one code path for every engine.

- :class:`TorchEngine`: the model in eager PyTorch (any chunking, growing caches included), in
  fp32 or batch-invariant int8.
- :class:`OnnxRuntimeEngine`: the batched ONNX graph of ``wenet_lite.export.batched`` (written
  by torch.export, ``torch.onnx.export(dynamo=True)``) in onnxruntime; a fixed cache only
  (``left_chunks >= 0``). Measured on this project's 2-core AVX2 machine, demo model, C=16,
  N=4, one thread: 2.8 ms a chunk for one stream against eager's 7.3 ms, the same as eager
  from 16 batched streams up (both near the core's arithmetic peak there).

Shapes: the legend in ``wenet_lite`` (B streams in the call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import numpy as np
import torch

from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.posenc import PositionTables
from wenet_lite.model.state import EncoderState

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ENGINES", "Engine", "OnnxRuntimeEngine", "TorchEngine", "stream_log_probs"]

ENGINES = ("torch", "onnxruntime")
BATCHED_INPUTS = ("x", "x_lens", "att_cache", "conv_cache", "cache_len")
BATCHED_OUTPUTS = ("log_probs", "new_att_cache", "new_conv_cache", "new_cache_len")
ENCODER_OUT = "encoder_out"  # the batched graph's fifth output, fetched for attention rescoring


class Engine:
    """The interface: ``run`` one chunk for B streams."""

    name = "engine"
    chunking: Chunking

    def run(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, EncoderState]:
        """Args: feats (B, W, F) windows zero-padded to W, lens (B,) valid frames, the batched
        state. Returns: log_probs (B, C, V) float32 on the CPU, and the new state."""
        raise NotImplementedError

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        """As :meth:`run`, with the encoder output (B, C, D) first: what attention rescoring
        needs."""
        raise NotImplementedError


class TorchEngine(Engine):
    """The model's own ``forward_chunk`` + CTC head, eager, on the model's device; with
    ``int8`` a copy whose encoder linears are batch-invariant int8 (``model/int8.py``: per-row
    activation scales, exact integer products, so batched == alone still holds)."""

    name = "torch"

    def __init__(self, model: ASRModel, chunking: Chunking, int8: bool = False) -> None:
        if int8:
            from wenet_lite.model.int8 import quantize_int8

            if model.encoder.cmvn.mean.device.type != "cpu":
                raise ValueError("int8 runs on the CPU (torch._int_mm); the model is not there")
            model = quantize_int8(model)
            self.name = "torch int8"
        self.model, self.chunking = model, chunking
        self._positions = PositionTables(model.encoder, chunking.chunk_size)

    def run(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, EncoderState]:
        out, log_probs, new_state = self.run_encoder(feats, lens, state)
        return log_probs, new_state

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        pos = self._positions.get(state.att_cache.size(3))
        with torch.inference_mode():
            out, new_state = self.model.encoder.forward_chunk(feats, state, lens, pos)
            return out, self.model.ctc(out).float().cpu(), new_state  # (B, C, D), (B, C, V)


class OnnxRuntimeEngine(Engine):
    """A batched ONNX graph (``wenet_lite.export.batched.export_batched_onnx``) run by
    onnxruntime on the CPU with ``threads`` intra-op threads."""

    name = "onnxruntime"

    def __init__(self, model: Union[bytes, str, Path], chunking: Chunking, threads: int = 1):
        try:
            import onnxruntime
        except ImportError:
            raise ImportError(
                "the onnxruntime engine needs onnxruntime: pip install 'wenet_lite[onnx]'"
            ) from None
        if chunking.left_chunks < 0:
            raise ValueError(
                "the onnxruntime engine needs a fixed cache: --left-chunks >= 0 (got -1)"
            )
        self.chunking = chunking
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # its warnings about unused initializers are noise
        source = model if isinstance(model, bytes) else str(model)
        self.session = onnxruntime.InferenceSession(
            source, options, providers=["CPUExecutionProvider"]
        )
        names = tuple(i.name for i in self.session.get_inputs())
        if names != BATCHED_INPUTS:
            raise ValueError(
                f"{'the graph' if isinstance(model, bytes) else model} is not a batched "
                f"wenet_lite graph: inputs {names}, expected {BATCHED_INPUTS}"
            )

    def run(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, EncoderState]:
        log_probs, new_state, _ = self._run(feats, lens, state, BATCHED_OUTPUTS)
        return log_probs, new_state

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        log_probs, new_state, out = self._run(feats, lens, state, BATCHED_OUTPUTS + (ENCODER_OUT,))
        assert out is not None
        return out, log_probs, new_state

    def _run(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState, names: Tuple[str, ...]
    ) -> Tuple[torch.Tensor, EncoderState, Optional[torch.Tensor]]:
        feeds = {
            "x": feats.float().numpy(),
            "x_lens": lens.numpy(),
            "att_cache": state.att_cache.numpy(),
            "conv_cache": state.conv_cache.numpy(),
            "cache_len": state.cache_len.numpy(),
        }
        log_probs, att, conv, cache_len, *out = self.session.run(list(names), feeds)
        new_state = EncoderState(
            att_cache=torch.from_numpy(att),
            conv_cache=torch.from_numpy(conv),
            cache_len=torch.from_numpy(np.asarray(cache_len, dtype=np.int64)),
            cache_limit=state.cache_limit,
        )
        encoded = torch.from_numpy(out[0]) if out else None
        return torch.from_numpy(log_probs), new_state, encoded


def stream_log_probs(
    engine: Engine,
    model: ASRModel,
    feats: torch.Tensor,
    feats_lens: torch.Tensor,
    with_encoder_out: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Whole utterances chunk by chunk through ``engine``: what a stream of each computes
    (``decode --simulate-streaming --engine``). Every window is zero-padded to W with its true
    length, as the recogniser's last window is, which masks exactly what
    ``forward_chunk_by_chunk``'s shorter last window leaves out.

    Args: feats (B, T_in, F) padded, feats_lens (B,). Returns: log_probs (B, T, V) float32
    (frames past an utterance's ``output_lengths`` are padding) and, ``with_encoder_out``, the
    encoder output (B, T, D) (else None).
    """
    encoder, chunk = model.encoder, engine.chunking.chunk_size
    sub = encoder.subsampling
    b, t_in, dim = feats.size()
    total = int(sub.output_lengths(torch.tensor(t_in)).item())
    window = sub.window_size(chunk)
    state = encoder.init_state(b, chunk, engine.chunking.left_chunks)
    outs: List[torch.Tensor] = []
    encoded: List[torch.Tensor] = []
    for k in range((total + chunk - 1) // chunk):
        start = k * chunk * sub.rate
        x = feats.new_zeros(b, window, dim)  # (B, W, F)
        piece = feats[:, start : start + window]
        x[:, : piece.size(1)] = piece
        lens = torch.clamp(feats_lens - start, 0, window)
        if with_encoder_out:
            out, log_probs, state = engine.run_encoder(x, lens, state)  # (B, C, D), (B, C, V)
            encoded.append(out)
        else:
            log_probs, state = engine.run(x, lens, state)  # (B, C, V)
        outs.append(log_probs)
    if not outs:
        empty = torch.zeros(b, 0, model.ctc.proj.out_features)
        return empty, (torch.zeros(b, 0, model.ctc.proj.in_features) if with_encoder_out else None)
    log_probs = torch.cat(outs, dim=1)[:, :total]  # (B, T, V)
    return log_probs, (torch.cat(encoded, dim=1)[:, :total] if with_encoder_out else None)
