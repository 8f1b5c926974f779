"""Engines: what runs one chunk of the encoder and the CTC head for a batch of streams.

One call, ``(feature windows, window lengths, state) -> (CTC log-probs, new state)``; the
recogniser above it (features, search, LM, hotwords, endpointing, batching of states, results)
is one code path for every engine.

- :class:`TorchEngine`: the model in eager PyTorch (any chunking, growing caches included), in
  fp32, bf16 (on CPUs that multiply it natively) or int8, all batch-invariant.
- :class:`OnnxRuntimeEngine`: the batched ONNX graph of ``wenet_lite.export.batched`` (written
  by torch.export, ``torch.onnx.export(dynamo=True)``) in onnxruntime; a fixed cache only
  (``left_chunks >= 0``).
- :class:`ExecuTorchEngine`: the ``.pte`` program of ``wenet_lite.export.executorch``
  (torch.export, lowered to XNNPACK), fp32 or per-frame int8, in ExecuTorch's runtime; a fixed
  cache only.

Speeds are measured by ``benchmarks/bench_engines.py``.

Shapes: the legend in ``wenet_lite`` (B streams in the call).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Tuple, Union

import numpy as np
import torch

from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.state import EncoderState
from wenet_lite.runtime.positions import PositionTables

__all__ = [
    "ENGINES",
    "Engine",
    "ExecuTorchEngine",
    "OnnxRuntimeEngine",
    "TorchEngine",
    "require_fixed_cache",
    "stream_log_probs",
]

ENGINES = ("torch", "onnxruntime", "executorch")
BATCHED_INPUTS = ("x", "x_lens", "att_cache", "conv_cache", "cache_len")
KEY_INPUTS = BATCHED_INPUTS + ("offset",)
"""a graph of an encoder with WeNet's key positions also takes each stream's offset"""
BATCHED_OUTPUTS = ("log_probs", "new_att_cache", "new_conv_cache", "new_cache_len")
ENCODER_OUT = "encoder_out"  # the batched graph's fifth output, fetched for attention rescoring
SINGLE_METHOD = "forward_one"  # export/executorch.py's SINGLE: the program's one-stream method


_PTE_MAGIC = re.compile(rb"ET\d\d")
"""bytes 4-7 of an ExecuTorch program: its flatbuffer file identifier (``ET12``)"""


def _check_pte_header(program: Union[bytes, str, Path], source: str) -> None:
    """ValueError unless the program starts as an ExecuTorch program does. ExecuTorch itself
    logs a bad identifier through a hook that aborts the process on bytes that are not
    UTF-8, so nothing else may reach its loader."""
    if isinstance(program, bytes):
        head = program[:8]
    else:
        with open(program, "rb") as f:
            head = f.read(8)
    if len(head) < 8 or not _PTE_MAGIC.fullmatch(head[4:8]):
        raise ValueError(
            f"{source} is not an ExecuTorch program (its identifier is {head[4:8]!r}, "
            "expected ET and two digits)"
        )


def require_fixed_cache(kind: str, chunking: Chunking) -> None:
    """The exported engines' graphs have fixed cache shapes (ValueError otherwise)."""
    if chunking.left_chunks < 0:
        raise ValueError(
            f"the {kind} engine needs a fixed cache: left_chunks >= 0 (got "
            f"{chunking.left_chunks}); 4 is a good choice"
        )


class Engine:
    """The interface: ``run`` one chunk for B streams."""

    name = "engine"
    chunking: Chunking
    device = torch.device("cpu")
    """where the engine takes its inputs"""
    dtype = torch.float32
    """the dtype of the feature windows it takes"""
    model: Optional[ASRModel] = None
    """the torch model it runs, if it runs one"""

    def init_state(self, batch: int) -> EncoderState:
        """Zero state of ``batch`` new streams, in the layout :meth:`run` takes."""
        raise NotImplementedError

    def run(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, EncoderState]:
        """Args: feats (B, W, F) windows zero-padded to W, lens (B,) valid frames, the batched
        state. Returns: log_probs (B, C, V) float32 on the CPU, and the new state."""
        _, log_probs, new_state = self.run_encoder(feats, lens, state)
        return log_probs, new_state

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        """As :meth:`run`, with the encoder output (B, C, D) first: what attention rescoring
        needs."""
        raise NotImplementedError


class TorchEngine(Engine):
    """The model's own ``forward_chunk`` + CTC head, eager, on the model's device.

    ``precision``: ``fp32``; ``int8``, a copy whose encoder linears are batch-invariant int8
    (``model/int8.py``: per-row activation scales, exact integer products); ``bf16``, a copy
    whose encoder linears and subsampling multiply in bf16 (``model/bf16.py``). Batched
    == alone holds for all three."""

    name = "torch"

    def __init__(self, model: ASRModel, chunking: Chunking, precision: str = "fp32") -> None:
        if precision not in ("fp32", "bf16", "int8"):
            raise ValueError(f"the torch engine runs fp32, bf16 or int8, not {precision!r}")
        if precision != "fp32":
            from wenet_lite.model.bf16 import to_bf16
            from wenet_lite.model.int8 import quantize_int8

            if model.encoder.cmvn.mean.device.type != "cpu":
                raise ValueError(f"{precision} runs on the CPU; the model is not there")
            model = quantize_int8(model) if precision == "int8" else to_bf16(model)
            self.name = f"torch {precision}"
        self.precision = precision
        self.model, self.chunking = model.eval(), chunking
        self._positions = PositionTables(model.encoder, chunking.chunk_size)
        self.device, self.dtype = model.encoder.cmvn.mean.device, model.encoder.cmvn.mean.dtype

    def init_state(self, batch: int) -> EncoderState:
        chunking = self.chunking
        return self.model.encoder.init_state(batch, chunking.chunk_size, chunking.left_chunks)

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        pos = self._positions.get(state.att_cache.size(3), state.offset)
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
        require_fixed_cache("onnxruntime", chunking)
        self.chunking = chunking
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # its warnings about unused initializers are noise
        source = "the graph" if isinstance(model, bytes) else str(model)
        try:
            self.session = onnxruntime.InferenceSession(
                model if isinstance(model, bytes) else str(model), options,
                providers=["CPUExecutionProvider"],
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - onnxruntime's own classes (InvalidProtobuf, ...)
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"{source} is not an ONNX graph onnxruntime loads: {first}") from None
        inputs = self.session.get_inputs()
        names = tuple(i.name for i in inputs)
        if names not in (BATCHED_INPUTS, KEY_INPUTS):
            raise ValueError(
                f"{source} is not a batched wenet_lite graph: inputs {names}, expected "
                f"{BATCHED_INPUTS}"
            )
        self._offsets = names == KEY_INPUTS
        self._att, self._conv = list(inputs[2].shape), list(inputs[3].shape)
        _check_cache(self._att[3], chunking, source)

    def init_state(self, batch: int) -> EncoderState:
        return _zero_state(self._att, self._conv, batch)

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
            "att_cache": np.ascontiguousarray(state.att_cache.numpy()),  # may be a slab's view
            "conv_cache": state.conv_cache.numpy(),
            "cache_len": state.cache_len.numpy(),
        }
        if self._offsets:
            feeds["offset"] = state.offset.numpy()
        log_probs, att, conv, cache_len, *out = self.session.run(list(names), feeds)
        new_state = EncoderState(
            att_cache=torch.from_numpy(att),
            conv_cache=torch.from_numpy(conv),
            cache_len=torch.from_numpy(np.asarray(cache_len, dtype=np.int64)),
            cache_limit=state.cache_limit,
            offset=state.offset + log_probs.shape[1],
        )
        encoded = torch.from_numpy(out[0]) if out else None
        return torch.from_numpy(log_probs), new_state, encoded


class ExecuTorchEngine(Engine):
    """A ``.pte`` program (``wenet_lite.export.executorch.lower_executorch``) run by
    ExecuTorch's runtime on the CPU: XNNPACK's kernels with ``threads`` threads (ExecuTorch
    has one thread pool per process, so the last engine made sets it). Batches larger than
    the program's planned bound run in pieces."""

    name = "executorch"

    def __init__(
        self,
        program: Union[bytes, str, Path],
        chunking: Chunking,
        threads: int = 1,
        int8: bool = False,
    ) -> None:
        """``int8``: the program is the int8 one (names the engine "executorch int8")."""
        try:
            from executorch.extension.pybindings import portable_lib
            from executorch.runtime import Runtime
        except ImportError:
            raise ImportError(
                "the executorch engine needs executorch: pip install 'wenet_lite[executorch]'"
            ) from None

        require_fixed_cache("executorch", chunking)
        self.chunking = chunking
        self.name = "executorch int8" if int8 else "executorch"
        source = "the program" if isinstance(program, bytes) else str(program)
        if getattr(portable_lib, "_threadpool_get_thread_count", lambda: threads)() != threads:
            portable_lib._unsafe_reset_threadpool(threads)
        _check_pte_header(program, source)
        try:
            loaded = Runtime.get().load_program(
                program if isinstance(program, bytes) else Path(program)
            )
            self._method = loaded.load_method("forward")
            # One stream: the fixed-shape method, when the program has it (programs made before
            # it have only the batched one).
            has_single = SINGLE_METHOD in loaded.method_names
            self._single = loaded.load_method(SINGLE_METHOD) if has_single else None
            self._program = loaded  # the methods read the program's memory: keep it alive
        except (RuntimeError, ValueError) as e:
            raise ValueError(
                f"{source} is not an ExecuTorch program this runtime loads: {e}"
            ) from None
        meta = self._method.metadata
        if meta.num_inputs() not in (len(BATCHED_INPUTS), len(KEY_INPUTS)) or (
            meta.num_outputs() != 5
        ):
            raise ValueError(
                f"{source} is not a batched wenet_lite program: {meta.num_inputs()} inputs and "
                f"{meta.num_outputs()} outputs, expected {len(BATCHED_INPUTS)} and 5"
            )
        self._att = list(meta.input_tensor_meta(2).sizes())  # (L, B_max, H, M, 2*d_k)
        self._conv = list(meta.input_tensor_meta(3).sizes())  # (L, B_max, D, K-1)
        self.max_batch = self._att[1]
        self._offsets = meta.num_inputs() == len(KEY_INPUTS)
        _check_cache(self._att[3], chunking, source)

    def init_state(self, batch: int) -> EncoderState:
        return _zero_state(self._att, self._conv, batch)

    def run_encoder(
        self, feats: torch.Tensor, lens: torch.Tensor, state: EncoderState
    ) -> Tuple[torch.Tensor, torch.Tensor, EncoderState]:
        pieces = []
        for start in range(0, feats.size(0), self.max_batch):
            part = slice(start, start + self.max_batch)
            inputs = [feats[part].float().contiguous(), lens[part].contiguous(),
                      state.att_cache[:, part].contiguous(), state.conv_cache[:, part].contiguous(),
                      state.cache_len[part].contiguous()]  # fmt: skip
            if self._offsets:
                inputs.append(state.offset[part].contiguous())
            method = self._single if inputs[0].size(0) == 1 and self._single else self._method
            # Outputs live in the program's planned memory until the next call: copy them.
            pieces.append([t.clone() for t in method.execute(inputs)])
        if len(pieces) == 1:
            logits, att, conv, cache_len, out = pieces[0]
        else:
            logits, att, conv, cache_len, out = (
                torch.cat([p[i] for p in pieces], dim=1 if i in (1, 2) else 0) for i in range(5)
            )
        # The int8 program's quantization passes hand cache_len back as float: exact integers.
        new_state = EncoderState(
            att, conv, cache_len.long(), state.cache_limit, state.offset + logits.size(1)
        )
        return out, torch.log_softmax(logits, dim=-1), new_state


def _check_cache(cached: int, chunking: Chunking, source: str) -> None:
    """ValueError when a program's fixed cache is not the chunking's C*N frames."""
    if cached != chunking.chunk_size * chunking.left_chunks:
        raise ValueError(
            f"{source} caches {cached} frames; {chunking.describe()} needs "
            f"{chunking.chunk_size * chunking.left_chunks}: export it with these settings"
        )


def _zero_state(att: List, conv: List, batch: int) -> EncoderState:
    """Zero state of a program whose cache inputs have the shapes ``att`` and ``conv``."""
    return EncoderState(
        att_cache=torch.zeros(att[0], batch, *att[2:]),
        conv_cache=torch.zeros(conv[0], batch, *conv[2:]),
        cache_len=torch.zeros(batch, dtype=torch.long),
        cache_limit=torch.tensor([att[3]]),
        offset=torch.zeros(batch, dtype=torch.long),
    )


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
    state = engine.init_state(b)
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
