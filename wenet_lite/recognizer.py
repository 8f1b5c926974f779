"""One way to open a recogniser: an engine description and :func:`open_recognizer`.

Every rule about which engine runs what is checked here, once, with a :class:`RuleError` (a
``ValueError``) that says what to change, before anything is loaded: the CLI (`stream`,
`serve`, `decode --simulate-streaming`), `transcribe` and the benchmarks all open their
recognisers (or engines) through this module.

Example (the executorch int8 engine from a model file, 4 threads)::

    rec = open_recognizer("exp/u2/avg_5.pt", Chunking(16, 4),
                          engine=EngineSpec("executorch", "int8", threads=4))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple, Union

from wenet_lite.cpu import PRECISIONS, auto_precision, cpu_model, native_bf16
from wenet_lite.model.chunking import Chunking
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.engines import ENGINES, Engine, require_fixed_cache
from wenet_lite.search.options import SearchOptions

__all__ = ["EngineSpec", "RuleError", "make_engine", "open_recognizer"]

_log = logging.getLogger(__name__)


class RuleError(ValueError):
    """A combination of source, engine and chunking that cannot run (the CLI's usage error)."""


@dataclass(frozen=True)
class EngineSpec:
    """What runs the encoder: ``kind`` (None: the source's own, torch for a model), the
    precision (``auto``: bf16 on a CPU that multiplies it natively, for an encoder 256 wide or
    more, else fp32, see ``wenet_lite.cpu``; ``bf16`` on the torch engine; ``int8`` on the
    torch or executorch engine, batch-invariant, where onnxruntime's is not), intra-op threads,
    and the device (the torch fp32 engine only may leave the CPU)."""

    kind: Optional[str] = None
    precision: str = "auto"
    threads: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in ENGINES:
            raise ValueError(f"engine {self.kind!r} is not one of {', '.join(ENGINES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        reduced = self.precision in ("bf16", "int8")
        what = f"--precision {self.precision}" if reduced else f"--engine {self.kind}"
        if self.device != "cpu" and (reduced or self.kind not in (None, "torch")):
            raise ValueError(f"{what} runs on the CPU: drop --device {self.device}")
        if self.precision == "int8" and self.kind == "onnxruntime":
            raise ValueError(
                "--precision int8 runs on the torch or executorch engine (onnxruntime's int8 "
                "is not batch-invariant)"
            )
        if self.precision == "bf16" and self.kind not in (None, "torch"):
            raise ValueError(f"--precision bf16 runs on the torch engine, not {self.kind}")

    @property
    def int8(self) -> bool:
        return self.precision == "int8"

    def resolved(self, exported: bool = False, width: Optional[int] = None) -> str:
        """fp32, bf16 or int8: what ``auto`` means here for an encoder ``width`` wide (bf16
        only for the torch engine on the CPU, ``cpu.auto_precision``; an export directory's
        own engines run fp32)."""
        if self.precision != "auto":
            return self.precision
        if exported or self.kind not in (None, "torch") or self.device != "cpu":
            return "fp32"
        return auto_precision(width=width)

    def check_chunking(self, chunking: Chunking) -> None:
        """The exported engines need a fixed cache (ValueError)."""
        if self.kind not in (None, "torch"):
            require_fixed_cache(self.kind, chunking)


def make_engine(spec: EngineSpec, model: Any, chunking: Chunking) -> Engine:
    """The engine of ``spec`` for a model in memory (on the CPU unless torch fp32)."""
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine, TorchEngine

    spec.check_chunking(chunking)
    precision = spec.resolved(width=model.encoder.d_model)
    if spec.kind == "executorch":
        from wenet_lite.export.executorch import lower_executorch

        int8 = precision == "int8"
        program = lower_executorch(model, chunking, "int8" if int8 else None)
        return ExecuTorchEngine(program, chunking, spec.threads, int8=int8)
    if spec.kind == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx

        return OnnxRuntimeEngine(export_batched_onnx(model, chunking), chunking, spec.threads)
    if precision == "bf16" and not native_bf16():
        _log.warning(
            "--precision bf16 on a CPU without native bf16 (%s): emulated, slower than fp32",
            cpu_model(),
        )
    return TorchEngine(model, chunking, precision)


def _check_rules(
    source: Any, bundle: Any, chunking: Optional[Chunking], spec: EngineSpec
) -> Chunking:
    """The chunking to open ``source`` (whose export ``bundle``, if it is a directory) with: an
    export directory's by default, else 16/4; after every rule of engine, source and chunking
    (ValueError saying what to change)."""
    if bundle is not None:
        if spec.kind not in (None, bundle.engine):
            raise ValueError(f"{source} is for --engine {bundle.engine}, not {spec.kind}")
        if spec.device != "cpu":
            raise ValueError(f"--engine {bundle.engine} runs on the CPU: drop --device "
                             f"{spec.device}")  # fmt: skip
        if spec.precision == "bf16":
            raise ValueError(
                f"{source} is for --engine {bundle.engine}: --precision bf16 runs on the torch "
                "engine, so stream the model file"
            )
        if spec.int8 and bundle.engine == "onnxruntime":
            raise ValueError(
                f"{source} is for onnxruntime, whose int8 is not batch-invariant: export with "
                "--format executorch --int8, or stream the model file with --int8"
            )
        if spec.int8 and "model_int8" not in bundle.files:
            raise ValueError(f"{source} has no int8 program: export with --int8")
        if chunking is not None and chunking != bundle.chunking:
            raise ValueError(
                f"{source} was exported for {bundle.chunking.describe()}, not "
                f"{chunking.describe()}: export it again with those settings"
            )
        return bundle.chunking
    chunking = chunking or Chunking(16, 4)
    spec.check_chunking(chunking)
    return chunking


def _bundle_engine(bundle: Any, spec: EngineSpec) -> Engine:
    """The engine of an export directory (``wenet_lite.bundle``: config, tokenizer and chunking
    travel in it) whose rules :func:`_check_rules` passed."""
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine

    if bundle.engine == "executorch":
        program = bundle.files["model_int8" if spec.int8 else "model"]
        return ExecuTorchEngine(program, bundle.chunking, spec.threads, int8=spec.int8)
    if bundle.engine == "onnxruntime":
        return OnnxRuntimeEngine(bundle.files["model"], bundle.chunking, spec.threads)
    raise ValueError(f"{bundle.directory}: unknown engine {bundle.engine!r} in its record")


def open_recognizer(
    source: Union[str, Path, Tuple[Any, Any, Any]],
    chunking: Optional[Chunking] = None,
    search: Optional[SearchOptions] = None,
    endpoint: Optional[EndpointConfig] = None,
    engine: Optional[EngineSpec] = None,
) -> Any:
    """A :class:`~wenet_lite.runtime.streaming.StreamingRecognizer` over any source.

    Args:
        source: a model file, an export directory (`wenet-lite export --format onnx |
            executorch`: its engine and chunking; it needs no model file and no torch model),
            or ``(model, tokenizer, config)`` in memory (as ``load_model`` returns them).
        chunking: chunk size and left chunks (default: an export directory's, else 16/4).
        search, endpoint: the search and endpointing (defaults: greedy, ``EndpointConfig()``).
        engine: what runs the encoder (default :class:`EngineSpec`: the source's own engine).
    Raises:
        RuleError (a ValueError) for a combination that cannot run, saying what to change,
        before anything is loaded; FileNotFoundError / ValueError (CheckpointError, a bad
        export record) for a bad source, naming it.
    """
    import torch

    from wenet_lite.model.chunking import check_chunking
    from wenet_lite.runtime.streaming import StreamingRecognizer

    spec = engine or EngineSpec()
    bundle = None
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        from wenet_lite.bundle import read_bundle

        bundle = read_bundle(source)
    try:
        chunking = _check_rules(source, bundle, chunking, spec)
    except ValueError as e:
        raise RuleError(str(e)) from None
    torch.set_num_threads(spec.threads)
    if bundle is not None:
        return StreamingRecognizer(
            _bundle_engine(bundle, spec), bundle.cfg, bundle.tokenizer, search,
            endpoint=endpoint, source=str(source),
        )  # fmt: skip
    if isinstance(source, (str, Path)):
        from wenet_lite.model_io import load_model

        torch_fp32 = spec.kind in (None, "torch") and spec.resolved() == "fp32"
        device = torch.device(spec.device if torch_fp32 else "cpu")
        model, tokenizer, cfg = load_model(source, device)
        name = str(source)
    else:
        model, tokenizer, cfg = source
        name = "the model"
        if spec.device != "cpu":
            model = model.to(spec.device)
    check_chunking(cfg.encoder, chunking, cached=True, source=name)  # before an export
    made = make_engine(spec, model, chunking)
    return StreamingRecognizer(
        made, cfg, tokenizer, search, endpoint=endpoint, model=model, source=name
    )
