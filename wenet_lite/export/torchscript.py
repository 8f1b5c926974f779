"""TorchScript export: encoder (with its CMVN) + CTC head (+ the attention decoder, if the model
has one) in one scripted, self-describing file.

The file is a ``torch.jit`` module whose methods are the whole runtime interface, so a runtime
needs torch (Python or C++ libtorch) and no wenet_lite:

- ``init_state(batch_size=1) -> state``: zero streaming state, a plain tuple of 5 tensors
  ``(att_cache (L, B, H, M, 2*d_k), conv_cache (L, B, D, K-1), cache_len (B,), cache_limit (1,),
  offset (B,))``
  with M = chunk_size * left_chunks (or growing from 0 when left_chunks is -1): the fields of
  ``EncoderState`` in order, flattened at this boundary so that runtimes need no named type.
- ``forward_chunk(feats_window (B, W, F), state, window_lens=None)
  -> (log_probs (B, C, V), state)``: one chunk. Windows are ``window_size`` fbank frames
  starting every ``window_shift`` frames (consecutive windows overlap); the last window of a
  stream may be shorter (it then gives fewer than C frames) but must hold more than
  ``right_context`` frames. Pure: the input state is not changed.
- ``forward(feats (B, T_in, F), feats_lens (B,)) -> (log_probs (B, T, V), lens (B,))``: a whole
  utterance with the exported chunk mask, equal to streaming it chunk by chunk.
- ``encode_chunk(feats_window, state, window_lens=None) -> (encoder_out (B, C, D), log_probs,
  state)``: ``forward_chunk`` that also gives the encoder output, for attention rescoring.
- ``forward_attention_decoder(hyps (N, U), hyps_lens (N,), encoder_out (1, S, D),
  reverse_weight) -> (N,)``: the attention decoder's score of each hypothesis of a segment
  (models trained with ``decoder.type: bitransformer``; metadata ``decoder``); a runtime adds
  ``ctc_weight`` times the prefix beam's score and keeps the best (``examples/run_exported.py
  --rescore``).
- ``metadata() -> Dict[str, str]``: see ``export.common.export_metadata`` (fbank options,
  subsampling, chunking, dims); ``vocabulary() -> List[str]``: pieces in id order, 0 the blank.

The same metadata and vocabulary are also stored as zip entries ``archive/extra/metadata.json``
(``{"metadata": {...}, "vocabulary": [...]}``) and ``archive/extra/tokens.txt`` (``piece id``
lines), for tools that read the file as a zip, or with
``torch.jit.load(path, _extra_files={"metadata.json": ""})`` (libtorch: ``ExtraFilesMap``).
Features are fbank of samples scaled by ``sample_scale`` (see ``features/fbank.py``); CMVN is
inside the model. A model exported with chunk_size 0 (full context) has only ``forward``.

Shapes: the legend in ``wenet_lite``'s docstring.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from wenet_lite.config import ExperimentConfig
from wenet_lite.export.common import (
    check_export_chunking,
    export_metadata,
    load_for_export,
    to_torch_linear,
    vocabulary,
)
from wenet_lite.fileio import atomic_open
from wenet_lite.model import ASRModel
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead
from wenet_lite.model.decoder import AttentionDecoder
from wenet_lite.model.posenc import slice_tables
from wenet_lite.model.state import EncoderState

__all__ = ["StreamingCTC", "script_model", "save_scripted", "export_torchscript"]

PathLike = Union[str, Path]
State = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""The exported interface's state: ``EncoderState``'s fields as a plain tuple."""


class StreamingCTC(nn.Module):
    """Encoder + CTC for one fixed chunk setting, with its metadata: the scripted module."""

    def __init__(
        self,
        encoder: ConformerEncoder,
        ctc: CTCHead,
        chunk_size: int,
        left_chunks: int,
        meta: Dict[str, str],
        pieces: List[str],
        decoder: Optional[AttentionDecoder] = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.ctc = ctc
        # A list of 0 or 1: TorchScript cannot script a module attribute that may be None.
        self.decoder = nn.ModuleList([decoder] if decoder is not None else [])
        self.chunk_size = chunk_size
        self.left_chunks = left_chunks
        self.window_size = encoder.subsampling.window_size(chunk_size) if chunk_size > 0 else 0
        # Non-empty, so TorchScript infers Dict[str, str] and List[str] (class annotations would
        # be strings under `from __future__ import annotations`, which it cannot resolve).
        self.meta = dict(meta)
        self.pieces = list(pieces)
        # With a fixed cache every chunk attends to the same distances: compute p(r) once at
        # export (one (P, D) x (D, D) product per block less per chunk) and slice it for a
        # shorter last chunk.
        self.max_keys = chunk_size * (left_chunks + 1) if chunk_size > 0 else 0
        tables = torch.zeros(0)
        if chunk_size > 0 and left_chunks >= 0 and not encoder.key_positions:
            with torch.no_grad():
                tables = torch.stack(encoder.position_tables(chunk_size, self.max_keys))
        self.register_buffer("pos_tables", tables)  # (L, H, max_keys + C - 1, d_k)

    def forward(
        self, feats: torch.Tensor, feats_lens: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: feats (B, T_in, F), feats_lens (B,). Returns: log_probs (B, T, V), lens (B,)."""
        out, lens = self.encoder(feats, feats_lens, self.chunk_size, self.left_chunks)
        return self.ctc(out), lens

    @torch.jit.export
    def init_state(self, batch_size: int = 1) -> State:
        """Zero state for ``batch_size`` new streams."""
        if self.chunk_size <= 0:
            raise RuntimeError("this model was exported full-context (chunk_size 0): no streaming")
        s = self.encoder.init_state(batch_size, self.chunk_size, self.left_chunks)
        return s.att_cache, s.conv_cache, s.cache_len, s.cache_limit, s.offset

    @torch.jit.export
    def forward_chunk(
        self,
        feats_window: torch.Tensor,
        state: State,
        window_lens: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, State]:
        """Encode one chunk window of each stream.

        Args:
            feats_window: (B, W, F) fbank frames, W <= window_size (shorter: a last window).
            state: from :meth:`init_state` or the previous call.
            window_lens: (B,) valid frames per window when streams of a batch end inside this
                window (zero-padded; such a stream's state is not meant to be used afterwards).
        Returns:
            log_probs (B, C, V) (fewer frames for a short window) and the new state.
        """
        _, log_probs, new_state = self.encode_chunk(feats_window, state, window_lens)
        return log_probs, new_state

    @torch.jit.export
    def encode_chunk(
        self,
        feats_window: torch.Tensor,
        state: State,
        window_lens: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, State]:
        """As :meth:`forward_chunk`, with the encoder output first: ``(encoder_out (B, C, D),
        log_probs (B, C, V), state)``; a runtime that rescores keeps the encoder outputs."""
        if self.chunk_size <= 0:
            raise RuntimeError("this model was exported full-context (chunk_size 0): no streaming")
        w_in = feats_window.size(1)
        if w_in > self.window_size:
            raise ValueError(f"a chunk window holds at most {self.window_size} frames, got {w_in}")
        own = EncoderState(state[0], state[1], state[2], state[3], state[4])
        pos: Optional[List[torch.Tensor]] = None
        if self.left_chunks >= 0 and not self.encoder.key_positions:
            lens = self.encoder.subsampling.output_lengths(torch.tensor([w_in]))
            c = int(lens.item())
            tables = list(self.pos_tables.unbind(0))
            pos = slice_tables(tables, self.max_keys, c, own.att_cache.size(3) + c)
        out, new = self.encoder.forward_chunk(feats_window, own, window_lens, pos)
        next_state = (new.att_cache, new.conv_cache, new.cache_len, new.cache_limit, new.offset)
        return out, self.ctc(out), next_state

    @torch.jit.export
    def forward_attention_decoder(
        self,
        hyps: torch.Tensor,
        hyps_lens: torch.Tensor,
        encoder_out: torch.Tensor,
        reverse_weight: float,
    ) -> torch.Tensor:
        """Attention rescoring's decoder scores of N hypotheses of one segment.

        Args: hyps (N, U) token ids (no start/end marks; padding any id), hyps_lens (N,),
            encoder_out (1, S, D) the segment's encoder output (:meth:`encode_chunk`'s,
            concatenated), reverse_weight: the right-to-left decoder's share.
        Returns: (N,) log-probabilities ``(1 - reverse_weight) * l2r + reverse_weight * r2l``
            of each hypothesis and its end; a runtime adds ``ctc_weight`` times its CTC score.
        """
        for decoder in self.decoder:  # 0 or 1
            rows = torch.zeros(hyps.size(0), dtype=torch.long)  # every hypothesis: segment 0
            memory_lens = torch.full((1,), encoder_out.size(1), dtype=torch.long)
            return decoder.score(encoder_out, memory_lens, hyps, hyps_lens, reverse_weight, rows)
        raise RuntimeError("this model has no attention decoder (its metadata: decoder none)")

    @torch.jit.export
    def metadata(self) -> Dict[str, str]:
        return self.meta

    @torch.jit.export
    def vocabulary(self) -> List[str]:
        return self.pieces


def script_model(
    model: ASRModel,
    cfg: ExperimentConfig,
    pieces: List[str],
    chunk_size: int,
    left_chunks: int,
    quantize: Optional[str] = None,
) -> torch.jit.ScriptModule:
    """Script an in-memory model (eval mode). ``quantize='int8'``: dynamic int8 Linear layers.

    Dynamic quantization stores Linear weights as int8 (4x less memory traffic per chunk) and
    quantizes activations per call; convolutions, norms and attention stay float32.
    """
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    check_export_chunking(cfg, chunk_size, left_chunks)
    if len(pieces) != model.ctc.proj.out_features:
        raise ValueError(
            f"{len(pieces)} vocabulary pieces for a CTC head of {model.ctc.proj.out_features}"
        )
    meta = export_metadata(cfg, model, chunk_size, left_chunks, quantize or "none")
    module: nn.Module = StreamingCTC(
        model.encoder, model.ctc, chunk_size, left_chunks, meta, pieces, model.decoder
    ).eval()
    if quantize == "int8":
        module = _quantize_int8(module)
    return torch.jit.script(module)


def _quantize_int8(module: nn.Module) -> nn.Module:
    module = to_torch_linear(module)
    # Not the position projections W_R: the model reads their weight dtype, and p(r) is
    # computed once per window shape (at export when left_chunks >= 0), so int8 saves nothing.
    ao = torch.ao.quantization
    spec = {
        name: ao.default_dynamic_qconfig
        for name, layer in module.named_modules()
        if isinstance(layer, nn.Linear) and not name.endswith("rel_pos.proj")
    }
    # torch.ao's eager dynamic quantization is deprecated in favour of torchao, which has no
    # TorchScript path; in torch 2.13 it still works, so its warnings are noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        return ao.quantize_dynamic(module, spec, dtype=torch.qint8)


def save_scripted(scripted: torch.jit.ScriptModule, out_path: PathLike) -> Path:
    """Save with the metadata and ``tokens.txt`` also as zip entries (see module docstring)."""
    meta, pieces = dict(scripted.metadata()), list(scripted.vocabulary())
    extra = {
        "metadata.json": json.dumps({"metadata": meta, "vocabulary": pieces}, indent=1),
        "tokens.txt": "".join(f"{p} {i}\n" for i, p in enumerate(pieces)),
    }
    out = Path(out_path)
    with atomic_open(out, "wb") as f:  # a file object: zip entries are archive/..., not tmp's
        torch.jit.save(scripted, f, _extra_files=extra)
    return out


def export_torchscript(
    model_path: PathLike,
    out_path: PathLike,
    chunk_size: int = 16,
    left_chunks: int = 4,
    quantize: Optional[str] = None,
) -> Path:
    """Export a wenet_lite model file to one TorchScript file; returns its path.

    Raises FileNotFoundError / CheckpointError for a missing / corrupt model file and
    ValueError for chunk settings the model cannot stream with.
    """
    model, tokenizer, cfg = load_for_export(model_path, chunk_size, left_chunks)
    scripted = script_model(model, cfg, vocabulary(tokenizer), chunk_size, left_chunks, quantize)
    return save_scripted(scripted, out_path)
