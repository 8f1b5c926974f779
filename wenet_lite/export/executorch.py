"""ExecuTorch export: the batched streaming chunk as a ``.pte`` program lowered to XNNPACK, for
the executorch engine (``wenet_lite.runtime.engines.ExecuTorchEngine``) and for devices.

The program is ``export/batched.py``'s graph (one chunk of B streams, our state layout, a
fixed cache of M = C*N frames) with two changes: it returns the CTC logits, not log-probs, and
attention runs in plain products (``RelPositionAttention.plain_softmax``), which XNNPACK lowers
whole. XNNPACK does not take ``log_softmax``, and ExecuTorch's portable kernel for it cost 2.2 ms of
a 17 ms chunk (conformer_u2, vocab 1000); the engine applies it in torch (microseconds).

Inputs ``x`` (B, W, F), ``x_lens`` (B,) int64, ``att_cache`` (L, B, H, M, 2*d_k),
``conv_cache`` (L, B, D, K-1), ``cache_len`` (B,) int64; outputs ``logits`` (B, C, V), the new
``att_cache``, ``conv_cache``, ``cache_len``, and ``encoder_out`` (B, C, D). Two methods: in
``forward`` B is dynamic up to a bound that memory planning fixes (the engine reads it from the
program and splits larger batches); ``forward_one`` is the same graph for B = 1 with fixed
shapes, faster, and the engine runs it for a single stream (tested: the same numbers).

- fp32: ``torch.export`` -> ``to_edge_transform_and_lower(XnnpackPartitioner)``.
- int8 (``quantize='int8'``): before lowering, the linears are quantized with the XNNPACK
  quantizer's dynamic per-channel config (PT2E): int8 weights per output channel, activations
  quantized as they arrive with their own scale per row, i.e. per frame (XNNPACK's ``qd8``
  GEMMs). No frame's numbers depend on the other frames of the call, so batched == alone holds
  in int8 as in fp32 (tested). The subsampling's second convolution is int8 too (its
  activations scaled per image, i.e. per stream); the first (one input channel), attention
  products and norms stay fp32.

The edge dialect's IR validity check is off: with it on, ``to_edge`` drops the symbolic batch
(every shape becomes the example's), and the program then refuses any other batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import torch
from torch import nn

from wenet_lite.export.batched import (
    batched_chunk,
    batched_example,
    plain_attention,
    quiet_exporter,
)
from wenet_lite.export.common import export_metadata, load_for_export, to_torch_linear
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking

__all__ = [
    "BATCHED",
    "MAX_BATCH",
    "SINGLE",
    "export_executorch",
    "lower_executorch",
    "need_executorch",
]

PathLike = Union[str, Path]
MAX_BATCH = 64
"""The batch bound asked of torch.export (memory planning may set a lower one)."""
INSTALL = "pip install 'wenet_lite[executorch]'"
BATCHED = "forward"
"""The program's method for a batch of streams (dynamic batch)."""
SINGLE = "forward_one"
"""The same graph for one stream, with every shape fixed: XNNPACK runs it about 15 % faster
(conformer_u2 int8, one thread: 12.9 against 15.2 ms a chunk), with the same numbers. It
shares the weights with the batched method, so the file grows by kilobytes, not by a copy."""


def need_executorch(what: str) -> None:
    """ImportError naming the pip extra when executorch is not installed."""
    try:
        import executorch  # noqa: F401
    except ImportError:
        raise ImportError(f"{what} needs executorch: {INSTALL}") from None


class ClampZero(nn.Module):
    """ReLU as ``clamp(min=0)`` (the same numbers): the XNNPACK quantizer's dynamic int8
    skips a conv whose one user is a ReLU, and with this the subsampling's second conv runs in
    int8 too (its activations quantized per image, so per stream: batch-invariant, tested)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0.0)


def lower_executorch(model: ASRModel, chunking: Chunking, quantize: Optional[str] = None) -> bytes:
    """The ``.pte`` program of an in-memory model: fp32, or with ``quantize='int8'`` its
    linears in per-frame dynamic int8. Takes seconds for a small model, about two minutes
    for conformer_u2 in int8 on this project's 2-core machine."""
    need_executorch("the executorch export")
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    with quiet_exporter():  # its imports log notes about optional libraries
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    chunk = batched_chunk(model.encoder, model.ctc, chunking, logits=True)
    wrapper = plain_attention(to_torch_linear(chunk)).cpu()  # a copy: the caller's stays put
    if quantize == "int8":  # XNNPACK's quantizer leaves a conv followed by a ReLU in fp32
        convs = wrapper.encoder.subsampling.conv
        for i, layer in enumerate(convs):
            if isinstance(layer, nn.ReLU):
                convs[i] = ClampZero()
    example, dynamic = batched_example(model, chunking, MAX_BATCH)
    one = tuple(t[:, :1] if t.dim() == 5 or i == 3 else t[:1] for i, t in enumerate(example))
    programs = {}
    with quiet_exporter(), torch.no_grad():
        for method, inputs, shapes in ((BATCHED, example, dynamic), (SINGLE, one, None)):
            program = torch.export.export(wrapper, inputs, dynamic_shapes=shapes)
            if quantize == "int8":
                program = torch.export.export(
                    _quantized(program.module(), inputs), inputs, dynamic_shapes=shapes
                )
            programs[method] = program
        edge = to_edge_transform_and_lower(
            programs,
            partitioner=[XnnpackPartitioner()],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
        return edge.to_executorch().buffer


def _quantized(module: torch.nn.Module, example: Tuple[torch.Tensor, ...]) -> torch.nn.Module:
    """The linears in XNNPACK's dynamic int8: weights per output channel, activations per row."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared = prepare_pt2e(module, XNNPACKQuantizer().set_global(config))
    prepared(*example)  # dynamic quantization observes nothing, but the pass wants one call
    return convert_pt2e(prepared)


def export_executorch(
    model_path: PathLike,
    out_dir: PathLike,
    chunk_size: int = 16,
    left_chunks: int = 4,
    quantize: Optional[str] = None,
) -> Dict[str, Path]:
    """Export a model file to the directory ``out_dir`` that ``wenet_lite.recognizer.
    open_recognizer`` and ``stream --model DIR`` open: ``model.pte`` (and ``model.int8.pte`` with
    ``quantize='int8'``) plus the export record (``wenet_lite.files.export_dir``: settings,
    config, tokenizer).

    Returns the written paths by role. Raises FileNotFoundError / CheckpointError for a bad
    model file, ValueError for chunk settings the program cannot have (it needs a fixed
    cache, ``left_chunks >= 0``), ImportError naming the pip extra without executorch.
    """
    from wenet_lite.fileio import atomic_open
    from wenet_lite.files.export_dir import write_export_dir

    need_executorch("the executorch export")
    if chunk_size <= 0 or left_chunks < 0:
        raise ValueError(
            "an ExecuTorch program streams with a fixed cache: chunk size >= 1 and left "
            f"chunks >= 0, got {chunk_size} and {left_chunks}"
        )
    model, tokenizer, cfg = load_for_export(model_path, chunk_size, left_chunks)
    chunking = Chunking(chunk_size, left_chunks)
    out = Path(out_dir)
    files = {"model": "model.pte"}
    if quantize == "int8":
        files["model_int8"] = "model.int8.pte"
    paths = {}
    for role, name in files.items():
        with atomic_open(out / name, "wb") as f:
            f.write(lower_executorch(model, chunking, "int8" if role == "model_int8" else None))
        paths[role] = out / name
    meta = export_metadata(cfg, model, chunk_size, left_chunks, quantize or "none")
    paths.update(write_export_dir(out, cfg, tokenizer, meta, "executorch", files))
    return paths
