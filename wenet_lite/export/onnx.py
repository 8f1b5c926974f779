"""ONNX export in the interface sherpa-onnx runs for streaming WeNet CTC models.

``export_onnx`` writes ``model.onnx`` (encoder with CMVN + CTC), ``tokens.txt`` (``piece id``
lines), with ``quantize='int8'`` ``model.int8.onnx`` and, for a model with an attention
decoder, ``decoder.onnx`` (attention rescoring's scores, ``export/decoder_onnx.py``; sherpa-onnx
does not read it). Decode with::

    sherpa_onnx.OnlineRecognizer.from_wenet_ctc(tokens="DIR/tokens.txt",
        model="DIR/model.onnx", chunk_size=C, num_left_chunks=N)

passing the exported C and N (sherpa takes them from these arguments, not from the metadata).

The interface, as k2-fsa/sherpa-onnx reads it (sherpa-onnx/csrc/online-wenet-ctc-model.cc,
online-recognizer-ctc-impl.h, scripts/wenet/export-onnx-streaming.py):

- inputs, bound by position: ``x`` (1, W, F) float32 with W = (C-1)*rate + right_context + 1
  (sherpa's ChunkLength; windows start C*rate frames apart), ``offset`` (1,) int64,
  ``required_cache_size`` (1,) int64, ``attn_cache`` (L, H, C*N, 2*d_k) float32 (keys then
  values), ``conv_cache`` (L, 1, D, K-1) float32, ``attn_mask`` (1, 1, C*N + C) bool.
- outputs: ``log_probs`` (1, C, V), ``next_att_cache``, ``next_conv_cache`` (fed back as is).
- metadata read: head, num_blocks, output_size, cnn_module_kernel, right_context,
  subsampling_factor, vocab_size (chunk_size, left_chunks and model_type are written as
  WeNet's exporter does; sherpa takes C and N from its arguments).
- sherpa starts with zero caches and ``offset`` = C*N and, before chunk k (k = 0, 1, ...),
  sets the first C*N - k*C cache entries of ``attn_mask`` to False while k < N, all True after:
  valid cached frames are right-aligned, as in our cache. The wrapper turns the mask into our
  ``cache_len`` (count of True in the cache part) and ignores ``offset`` and
  ``required_cache_size``: our positions are relative and the cache size is fixed by shape.
- sherpa decodes a window only when one more frame than it needs is ready, and never decodes
  the last, incomplete window of a stream (callers pad the tail with silence).
- features: normalize_samples false (samples scaled to int16 range), snip_edges false, 25/10 ms
  frames, povey window, 20 .. Nyquist-400 Hz (see features/fbank.py, which trains with the
  same), and a hard-coded 10 ms shift and subsampling 4 for timestamps and endpointing.
  Hence the refusals in :func:`check_sherpa_compatible`.

Shapes: the legend in ``wenet_lite``; in this module N is the exported left chunks (sherpa's
num_left_chunks), so M = C*N cached frames.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Union

import torch
from torch import nn

from wenet_lite.config import ExperimentConfig
from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.export.common import (
    check_export_chunking,
    export_metadata,
    load_for_export,
    load_produced,
    save_onnx,
    set_metadata,
    to_torch_linear,
    vocabulary,
)
from wenet_lite.features.fbank import HIGH_FREQ_HZ
from wenet_lite.fileio import atomic_open, write_text_atomic
from wenet_lite.model import ASRModel
from wenet_lite.model.conformer import ConformerEncoder
from wenet_lite.model.ctc import CTCHead
from wenet_lite.model.state import EncoderState

if TYPE_CHECKING:  # imported where used: `import wenet_lite.export.onnx` needs neither
    import onnx

__all__ = [
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "SherpaWenetCtc",
    "check_sherpa_compatible",
    "export_onnx_model",
    "export_onnx",
    "quantize_int8",
]

PathLike = Union[str, Path]
_log = logging.getLogger(__name__)
INPUT_NAMES = ("x", "offset", "required_cache_size", "attn_cache", "conv_cache", "attn_mask")
OUTPUT_NAMES = ("log_probs", "next_att_cache", "next_conv_cache")
_UNUSED = ("offset", "required_cache_size")  # inputs our relative positions do not need
OPSET = 17  # what sherpa-onnx's own WeNet export uses; any onnxruntime >= 1.14 runs it


class SherpaWenetCtc(nn.Module):
    """Our streaming encoder + CTC behind sherpa-onnx's WeNet CTC inputs and outputs."""

    def __init__(
        self, encoder: ConformerEncoder, ctc: CTCHead, chunk_size: int, left_chunks: int
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.ctc = ctc
        self.cached = chunk_size * left_chunks
        self.key_positions = encoder.key_positions
        tables = torch.zeros(0)
        if not self.key_positions:
            with torch.no_grad():  # p(r) of the one window shape: constants in the graph
                tables = torch.stack(encoder.position_tables(chunk_size, self.cached + chunk_size))
        self.register_buffer("pos_tables", tables)  # (L, H, M+2C-1, d_k)

    def forward(
        self,
        x: torch.Tensor,
        offset: torch.Tensor,
        required_cache_size: torch.Tensor,
        attn_cache: torch.Tensor,
        conv_cache: torch.Tensor,
        attn_mask: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args: see the module docstring. Returns: log_probs (1, C, V), next_att_cache
        (L, H, C*N, 2*d_k), next_conv_cache (L, 1, D, K-1)."""
        del required_cache_size  # the cache size is its shape
        cache_len = attn_mask[:, 0, : self.cached].to(torch.int64).sum(dim=1)  # (1,)
        limit = torch.full([1], self.cached, dtype=torch.int64)
        state = EncoderState(
            att_cache=attn_cache.unsqueeze(1),  # (L, 1, H, M, 2*d_k)
            conv_cache=conv_cache,
            cache_len=cache_len,
            cache_limit=limit,
            # WeNet's key positions read the runtime's offset (sherpa-onnx: C*N at the start);
            # relative positions do not depend on it.
            offset=offset.reshape(-1)[:1].to(torch.int64),
        )
        pos = None if self.key_positions else list(self.pos_tables.unbind(0))
        out, new = self.encoder.forward_chunk(x, state, None, pos)
        return self.ctc(out), new.att_cache.squeeze(1), new.conv_cache


def check_sherpa_compatible(cfg: ExperimentConfig, chunk_size: int, left_chunks: int) -> None:
    """Refuse what sherpa-onnx's WeNet CTC runtime would silently get wrong (ValueError)."""
    if chunk_size <= 0:
        raise FieldError(
            f"ONNX export is for streaming: {{chunk}} must be > 0, got {chunk_size} (a "
            "full-context model exports to TorchScript)", chunk=Setting("chunk_size"),
        )  # fmt: skip
    if left_chunks < 0:
        raise FieldError(
            f"ONNX export needs a fixed cache: {{left}} must be >= 0, got {left_chunks} "
            "(sherpa-onnx feeds caches of C*N frames; 4 is its default)",
            left=Setting("left_chunks"),
        )  # fmt: skip
    feats, enc = cfg.features, cfg.encoder
    problems = []
    bands = []
    if feats.snip_edges:
        bands.append("features.snip_edges is true (sherpa-onnx always uses false)")
    if feats.high_freq != HIGH_FREQ_HZ:
        bands.append(
            f"features.high_freq is {feats.high_freq:g} (sherpa-onnx's features stop at "
            f"{HIGH_FREQ_HZ:g}, i.e. Nyquist - 400 Hz)"
        )
    if enc.pos_enc == "wenet":  # sherpa-onnx runs WeNet's own exports with these features too
        if bands:
            _log.warning(
                "sherpa-onnx computes its own features: %s; results are close to this model's, "
                "as they are for WeNet's own sherpa-onnx exports", "; ".join(bands),
            )  # fmt: skip
    else:
        problems.extend(bands)
    if feats.frame_shift_ms != 10.0 or feats.frame_length_ms != 25.0:
        problems.append(
            f"frames are {feats.frame_length_ms}/{feats.frame_shift_ms} ms "
            "(sherpa-onnx's from_wenet_ctc uses 25/10 ms)"
        )
    if enc.subsampling_rate != 4:
        problems.append(
            f"encoder.subsampling_rate is {enc.subsampling_rate} (sherpa-onnx hard-codes 4 "
            "for timestamps and endpointing)"
        )
    if problems:
        raise ValueError("this model cannot run in sherpa-onnx: " + "; ".join(problems))


def _example_inputs(model: ASRModel, chunk_size: int, left_chunks: int) -> Tuple[torch.Tensor, ...]:
    enc = model.encoder
    cached = chunk_size * left_chunks
    head_dim = enc.d_model // enc.num_heads
    window = enc.subsampling.window_size(chunk_size)
    mask = torch.ones(1, 1, cached + chunk_size, dtype=torch.bool)
    mask[:, :, :cached] = False  # sherpa's first chunk: nothing cached yet
    return (
        torch.randn(1, window, enc.cmvn.mean.numel()),
        torch.tensor([cached], dtype=torch.int64),
        torch.tensor([cached], dtype=torch.int64),
        torch.zeros(enc.num_blocks, enc.num_heads, cached, 2 * head_dim),
        torch.zeros(enc.num_blocks, 1, enc.d_model, enc.conv_kernel - 1),
        mask,
    )


def export_onnx_model(
    model: ASRModel,
    cfg: ExperimentConfig,
    out_path: PathLike,
    chunk_size: int,
    left_chunks: int,
) -> Path:
    """Export an in-memory model (fp32) to one ONNX file with sherpa-onnx's metadata."""
    import onnx

    check_export_chunking(cfg, chunk_size, left_chunks)
    check_sherpa_compatible(cfg, chunk_size, left_chunks)
    # nn.Linear exports as MatMul with a constant weight, which int8 quantization recognises.
    wrapper = to_torch_linear(SherpaWenetCtc(model.encoder, model.ctc, chunk_size, left_chunks))
    out = Path(out_path)

    def export(raw: str) -> None:
        with warnings.catch_warnings():
            # The tracer warns that the cache size becomes a constant: intended, shapes fixed.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # A Slice of F.pad's symbolic has step -1, which the exporter does not fold;
            # onnxruntime folds it when it loads the model.
            warnings.filterwarnings("ignore", "Constant folding - Only steps=1", UserWarning)
            # dynamo=False: the TorchScript-based exporter; torch 2.13's dynamo exporter needs
            # onnxscript (not a dependency) and gains nothing for fixed shapes.
            torch.onnx.export(
                wrapper.eval(),
                _example_inputs(model, chunk_size, left_chunks),
                raw,
                dynamo=False,
                opset_version=OPSET,
                input_names=list(INPUT_NAMES),
                output_names=list(OUTPUT_NAMES),
                do_constant_folding=True,
            )

    proto = load_produced(out, export)
    _restore_unused_inputs(proto)
    set_metadata(proto, _sherpa_metadata(cfg, model, chunk_size, left_chunks))
    onnx.checker.check_model(proto)
    return save_onnx(proto, out)


def _restore_unused_inputs(proto: onnx.ModelProto) -> None:
    """Put ``offset`` and ``required_cache_size`` back as graph inputs.

    The exporter drops inputs no node reads, but sherpa-onnx binds its six inputs by position
    (it passes six values with the model's input names), so all six must exist in order.
    """
    import onnx

    graph = proto.graph
    present = {i.name: i for i in graph.input}
    if set(present) - set(INPUT_NAMES) or set(INPUT_NAMES) - set(present) - set(_UNUSED):
        raise RuntimeError(f"exported graph inputs {list(present)}, expected {INPUT_NAMES}")
    int64_1 = onnx.helper.make_tensor_value_info  # a restored input is (1,) int64, as fed
    ordered = [
        present.get(name, int64_1(name, onnx.TensorProto.INT64, [1])) for name in INPUT_NAMES
    ]
    del graph.input[:]
    graph.input.extend(ordered)


def _sherpa_metadata(
    cfg: ExperimentConfig, model: ASRModel, chunk_size: int, left_chunks: int
) -> Dict[str, str]:
    enc = model.encoder
    meta = export_metadata(cfg, model, chunk_size, left_chunks, "none")
    meta.update(
        {  # the keys sherpa-onnx's WeNet export writes (scripts/wenet/export-onnx-streaming.py)
            "model_type": "wenet_ctc",
            "version": "1",
            "model_author": "wenet_lite",
            "comment": "streaming",
            "head": str(enc.num_heads),
            "output_size": str(enc.d_model),
            "cnn_module_kernel": str(enc.conv_kernel),
            "subsampling_factor": str(enc.subsampling.rate),
        }
    )
    return meta


def quantize_int8(src: PathLike, dst: PathLike) -> Path:
    """Dynamic int8 MatMul weights (as sherpa-onnx's WeNet export does); metadata kept.

    Activations are quantized per call; what is saved is weight memory traffic, which bounds
    a small chunk's speed. Weights use 7 bits (``reduce_range``): on x86 CPUs with AVX2 but no
    VNNI, onnxruntime's u8s8 kernel sums pairs of products in int16 and saturates with full
    8-bit weights (on an AVX2-only AMD EPYC: max log-prob error 0.86 with 8 bits, 0.03 with 7).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def quantize(raw: str) -> None:
        quantize_dynamic(
            model_input=str(src),
            model_output=raw,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
            reduce_range=True,
        )

    dst = Path(dst)
    proto = load_produced(dst, quantize)
    meta = {p.key: p.value for p in onnx.load(str(src)).metadata_props}
    meta["quantize"] = "int8"
    set_metadata(proto, meta)
    return save_onnx(proto, dst)


def export_onnx(
    model_path: PathLike,
    out_dir: PathLike,
    chunk_size: int = 16,
    left_chunks: int = 4,
    quantize: Optional[str] = None,
) -> Dict[str, Path]:
    """Export a model file to ``out_dir``: model.onnx, tokens.txt (and model.int8.onnx; and
    decoder.onnx for a model with an attention decoder, see ``export/decoder_onnx.py``) for
    sherpa-onnx; batched.onnx, tokenizer.model and wenet_lite.json for our onnxruntime engine
    (``wenet_lite.recognizer.open_recognizer``).

    Returns the written paths by role (``model``, ``tokens``, ``model_int8``, ``decoder``,
    ``batched``, ``tokenizer``, ``record``). Raises
    FileNotFoundError / CheckpointError for a missing / corrupt model file and ValueError for
    settings sherpa-onnx cannot run.
    """
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    model, tokenizer, cfg = load_for_export(model_path, chunk_size, left_chunks)
    if model.transducer is not None:  # its limits too, before anything is written
        from wenet_lite.export.sherpa_transducer import check_transducer_export

        check_sherpa_compatible(cfg, chunk_size, left_chunks)
        check_transducer_export(model, left_chunks)
    out = Path(out_dir)  # export_onnx_model checks sherpa-onnx's limits first
    paths = {"model": export_onnx_model(model, cfg, out / "model.onnx", chunk_size, left_chunks)}
    paths["tokens"] = out / "tokens.txt"
    pieces = vocabulary(tokenizer)
    write_text_atomic(paths["tokens"], "".join(f"{p} {i}\n" for i, p in enumerate(pieces)))
    if quantize == "int8":
        paths["model_int8"] = quantize_int8(paths["model"], out / "model.int8.onnx")
    meta = export_metadata(cfg, model, chunk_size, left_chunks, "none")
    if model.transducer is not None:  # sherpa-onnx's transducer files, in a folder of their own
        from wenet_lite.export.sherpa_transducer import export_sherpa_transducer

        paths.update(export_sherpa_transducer(model, out / "transducer", chunk_size,
                                              left_chunks, paths["tokens"]))  # fmt: skip
    if model.decoder is not None:  # attention rescoring's second pass; sherpa ignores it
        from wenet_lite.export.decoder_onnx import export_decoder_onnx

        paths["decoder"] = export_decoder_onnx(
            model.decoder, model.encoder.d_model, out / "decoder.onnx", meta
        )
    # Our own runtime's files: the batched graph and the export record (`stream --model DIR`).
    from wenet_lite.export.batched import export_batched_onnx
    from wenet_lite.files.export_dir import write_export_dir
    from wenet_lite.model.chunking import Chunking

    paths["batched"] = out / "batched.onnx"
    with atomic_open(paths["batched"], "wb") as f:
        f.write(export_batched_onnx(model, Chunking(chunk_size, left_chunks)))
    paths.update(
        write_export_dir(out, cfg, tokenizer, meta, "onnxruntime", {"model": "batched.onnx"})
    )
    return paths
