"""What every export format shares: argument checks, the metadata record, Linear conversion.

Metadata is a flat ``Dict[str, str]`` (the form ONNX metadata_props and a TorchScript
``Dict[str, str]`` attribute both hold): what a runtime needs to turn audio into model input
(fbank options), to cut the feature stream into chunk windows (subsampling, right context,
chunk size), and the model dims. Fbank values are read from the same ``knf.FbankOptions`` that
training uses (``features.fbank.fbank_options``), so an export cannot disagree with training.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Tuple, Union

from torch import nn

from wenet_lite.config import ExperimentConfig
from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.data.tokenizer import BLANK_ID, Tokenizer
from wenet_lite.features.fbank import INT16_SCALE, fbank_options
from wenet_lite.fileio import atomic_open, temporary_path
from wenet_lite.files.model_file import load_model
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking, check_chunking
from wenet_lite.model.decoder import RESCORE_CTC_WEIGHT, RESCORE_REVERSE_WEIGHT
from wenet_lite.model.linear import Linear

if TYPE_CHECKING:  # imported where used: `import wenet_lite.export.common` needs no onnx
    import onnx

__all__ = [
    "load_produced",
    "save_onnx",
    "set_metadata",
    "FORMAT_VERSION",
    "check_export_chunking",
    "load_for_export",
    "export_metadata",
    "to_torch_linear",
    "vocabulary",
]

PathLike = Union[str, Path]
FORMAT_VERSION = "1"
"""Bumped when the meaning of a metadata key or of an exported method's arguments changes."""


def load_for_export(
    model_path: PathLike, chunk_size: int, left_chunks: int
) -> Tuple[ASRModel, Tokenizer, ExperimentConfig]:
    """Load a model file in eval mode and check the chunk settings against it.

    Raises FileNotFoundError / CheckpointError (missing / corrupt file, naming the path) and
    ValueError (settings the model cannot stream with).
    """
    model, tokenizer, cfg = load_model(model_path)
    check_export_chunking(cfg, chunk_size, left_chunks, str(model_path))
    return model, tokenizer, cfg


def check_export_chunking(
    cfg: ExperimentConfig, chunk_size: int, left_chunks: int, source: str = "the model"
) -> None:
    """ValueError for chunk settings the model cannot be exported with (``model.chunking``),
    or whose graph would be unreasonably large (a chunk or a cache past ``MAX_EXPORT_FRAMES``)."""
    check_chunking(cfg.encoder, Chunking(chunk_size, left_chunks), cached=True, source=source)
    if chunk_size > MAX_EXPORT_FRAMES or chunk_size * max(left_chunks, 0) > MAX_EXPORT_FRAMES:
        raise FieldError(
            f"chunk {chunk_size} x left {left_chunks}: an exported chunk and its cache each "
            f"hold at most {MAX_EXPORT_FRAMES} encoder frames (a streaming step of "
            f"{MAX_EXPORT_FRAMES * 40 // 1000} s); lower {{chunk}} or {{left}}",
            chunk=Setting("chunk_size"), left=Setting("left_chunks"),
        )  # fmt: skip


MAX_EXPORT_FRAMES = 1500
"""encoder frames an exported chunk, and its fixed cache, may hold (60 s at 40 ms a frame)"""


def export_metadata(
    cfg: ExperimentConfig, model: ASRModel, chunk_size: int, left_chunks: int, quantize: str
) -> Dict[str, str]:
    """The metadata record shared by all formats (every value a string)."""
    sub = model.encoder.subsampling
    opts = fbank_options(cfg.features)
    frame, mel = opts.frame_opts, opts.mel_opts
    streaming = chunk_size > 0
    meta = {
        "format_version": FORMAT_VERSION,
        "quantize": quantize,
        "vocab_size": model.ctc.proj.out_features,
        "blank_id": BLANK_ID,
        "d_model": model.encoder.d_model,
        "num_blocks": model.encoder.num_blocks,
        "num_heads": model.encoder.num_heads,
        "conv_kernel": model.encoder.conv_kernel,
        "subsampling_rate": sub.rate,
        "right_context": sub.right_context,
        "chunk_size": chunk_size,
        "left_chunks": left_chunks,
        # Input frames per chunk window and between window starts (0: not streaming).
        "window_size": sub.window_size(chunk_size) if streaming else 0,
        "window_shift": chunk_size * sub.rate if streaming else 0,
        # Kaldi fbank options (kaldi-native-fbank names) and the sample scaling before it.
        "sample_rate": cfg.features.sample_rate,
        "sample_scale": INT16_SCALE,
        "num_mel_bins": mel.num_bins,
        "frame_length_ms": frame.frame_length_ms,
        "frame_shift_ms": frame.frame_shift_ms,
        "snip_edges": frame.snip_edges,
        "dither": 0.0,
        "remove_dc_offset": frame.remove_dc_offset,
        "preemph_coeff": frame.preemph_coeff,
        "window_type": frame.window_type,
        "round_to_power_of_two": frame.round_to_power_of_two,
        "low_freq": mel.low_freq,
        "high_freq": mel.high_freq,
        # The attention decoder (TorchScript: forward_attention_decoder; ONNX: decoder.onnx),
        # its start/end id and the rescoring weights `decode` uses by default.
        "decoder": "none" if model.decoder is None else cfg.decoder.type,
        "sos_eos_id": (
            model.ctc.proj.out_features if model.decoder is None else model.decoder.sos_eos
        ),
        "rescore_ctc_weight": RESCORE_CTC_WEIGHT,
        "rescore_reverse_weight": RESCORE_REVERSE_WEIGHT,
    }
    return {k: _to_str(v) for k, v in meta.items()}


def _to_str(value: object) -> str:
    if isinstance(value, bool):  # "true"/"false": the same in JSON and for C++ readers
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form of the float32 value knf holds
    return str(value)


def vocabulary(tokenizer: Tokenizer) -> List[str]:
    """Pieces in id order; refuses pieces a ``piece id`` line format could not hold."""
    pieces = tokenizer.pieces()
    bad = [p for p in pieces if not p or any(ch.isspace() for ch in p)]
    if bad:
        raise ValueError(f"tokenizer pieces {bad[:5]} are empty or hold whitespace")
    return pieces


def to_torch_linear(module: nn.Module) -> nn.Module:
    """A deep copy with every wenet_lite ``Linear`` replaced by an equal ``nn.Linear``.

    Our Linear stores its weight (in, out) for faster small-chunk GEMMs, but quantizers
    (torch.ao dynamic quantization, onnxruntime's MatMul quantization after export) only
    recognise ``nn.Linear`` / MatMul with a constant weight.
    """
    module = copy.deepcopy(module)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Linear):
                setattr(parent, name, _converted(child))
    return module


def _converted(layer: Linear) -> nn.Linear:
    out = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    out.weight.data.copy_(layer.weight.data.t())  # (in, out) -> nn.Linear's (out, in)
    if layer.bias is not None:
        out.bias.data.copy_(layer.bias.data)
    return out.to(layer.weight.device).train(layer.training)


def load_produced(out: Path, produce: Callable[[str], None]) -> onnx.ModelProto:
    """Let ``produce`` write an ONNX file (the exporter's or quantizer's own) under a temporary
    name beside ``out``, load it and delete it: only :func:`save_onnx` writes ``out``."""
    import onnx

    out.parent.mkdir(parents=True, exist_ok=True)
    raw = temporary_path(out.with_name(f"raw-{out.name}"))
    try:
        produce(str(raw))
        return onnx.load(str(raw))
    finally:
        raw.unlink(missing_ok=True)


def save_onnx(proto: onnx.ModelProto, out: Path) -> Path:
    import onnx

    with atomic_open(out, "wb") as f:
        onnx.save(proto, f)
    return out


def set_metadata(proto: onnx.ModelProto, meta: Dict[str, str]) -> None:
    del proto.metadata_props[:]
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
