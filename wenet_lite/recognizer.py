"""One way to open a recogniser: an engine description and :func:`open_recognizer`.

Every rule about which engine runs what is checked here, once, with a ``ValueError`` that says
what to change: the CLI (`stream`, `serve`, `decode --simulate-streaming`), `transcribe` and
the benchmarks all open their recognisers (or engines) through this module.

Example (the executorch int8 engine from a model file, 4 threads)::

    rec = open_recognizer("exp/u2/avg_5.pt", Chunking(16, 4),
                          engine=EngineSpec("executorch", int8=True, threads=4))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple, Union

from wenet_lite.decode.endpoint import EndpointConfig
from wenet_lite.decode.engines import ENGINES, Engine
from wenet_lite.decode.options import SearchOptions
from wenet_lite.model.chunking import Chunking

__all__ = ["EngineSpec", "check_rules", "make_engine", "open_recognizer"]


@dataclass(frozen=True)
class EngineSpec:
    """What runs the encoder: ``kind`` (None: the source's own, torch for a model), int8
    linears (torch and executorch: batch-invariant; onnxruntime's int8 is not), intra-op
    threads, and the device (the torch fp32 engine only may leave the CPU)."""

    kind: Optional[str] = None
    int8: bool = False
    threads: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in ENGINES:
            raise ValueError(f"engine {self.kind!r} is not one of {', '.join(ENGINES)}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        what = "--int8" if self.int8 else f"--engine {self.kind}"
        if self.device != "cpu" and (self.int8 or self.kind not in (None, "torch")):
            raise ValueError(f"{what} runs on the CPU: drop --device {self.device}")
        if self.int8 and self.kind == "onnxruntime":
            raise ValueError(
                "--int8 runs on the torch or executorch engine (onnxruntime's int8 is not "
                "batch-invariant)"
            )

    def check_chunking(self, chunking: Chunking) -> None:
        """The exported engines need a fixed cache (ValueError)."""
        if self.kind not in (None, "torch") and chunking.left_chunks < 0:
            raise ValueError(
                f"--engine {self.kind} needs a fixed cache: --left-chunks >= 0 (got "
                f"{chunking.left_chunks}); 4 is a good choice"
            )


def make_engine(spec: EngineSpec, model: Any, chunking: Chunking) -> Engine:
    """The engine of ``spec`` for a model in memory (on the CPU unless torch fp32)."""
    from wenet_lite.decode.engines import ExecuTorchEngine, OnnxRuntimeEngine, TorchEngine

    spec.check_chunking(chunking)
    if spec.kind == "executorch":
        from wenet_lite.export.executorch import lower_executorch

        program = lower_executorch(model, chunking, "int8" if spec.int8 else None)
        return ExecuTorchEngine(program, chunking, spec.threads, int8=spec.int8)
    if spec.kind == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx

        return OnnxRuntimeEngine(export_batched_onnx(model, chunking), chunking, spec.threads)
    return TorchEngine(model, chunking, int8=spec.int8)


def check_rules(
    source: Union[str, Path, Tuple[Any, Any, Any]], chunking: Optional[Chunking], spec: EngineSpec
) -> Chunking:
    """The chunking to open ``source`` with (an export directory's by default, else 16/4),
    after every rule of engine, source and chunking (ValueError saying what to change)."""
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        from wenet_lite.bundle import read_bundle

        bundle = read_bundle(source)
        if spec.kind not in (None, bundle.engine):
            raise ValueError(f"{source} is for --engine {bundle.engine}, not {spec.kind}")
        if spec.device != "cpu":
            raise ValueError(f"--engine {bundle.engine} runs on the CPU: drop --device "
                             f"{spec.device}")  # fmt: skip
        if spec.int8 and bundle.engine == "onnxruntime":
            raise ValueError(
                f"{source} is for onnxruntime, whose int8 is not batch-invariant: export with "
                "--format executorch --int8, or stream the model file with --int8"
            )
        return chunking or bundle.chunking
    chunking = chunking or Chunking(16, 4)
    spec.check_chunking(chunking)
    return chunking


def open_recognizer(
    source: Union[str, Path, Tuple[Any, Any, Any]],
    chunking: Optional[Chunking] = None,
    search: Optional[SearchOptions] = None,
    endpoint: Optional[EndpointConfig] = None,
    engine: Optional[EngineSpec] = None,
) -> Any:
    """A :class:`~wenet_lite.decode.streaming.StreamingRecognizer` over any source.

    Args:
        source: a model file, an export directory (`wenet-lite export --format onnx |
            executorch`: its engine and chunking), or ``(model, tokenizer, config)`` in memory.
        chunking: chunk size and left chunks (default: an export directory's, else 16/4).
        search, endpoint: the search and endpointing (defaults as ``StreamingRecognizer``).
        engine: what runs the encoder (default :class:`EngineSpec`: the source's own engine).
    Raises:
        ValueError for a combination that cannot run, saying what to change;
        FileNotFoundError / CheckpointError for a bad source, naming it.
    """
    import torch

    from wenet_lite.decode.streaming import StreamingRecognizer
    from wenet_lite.model.chunking import check_chunking

    spec = engine or EngineSpec()
    chunking = check_rules(source, chunking, spec)
    torch.set_num_threads(spec.threads)
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        return StreamingRecognizer.from_export(
            source, search, chunking=chunking, endpoint=endpoint, int8=spec.int8,
            threads=spec.threads,
        )  # fmt: skip
    if isinstance(source, (str, Path)):
        if spec.kind in (None, "torch") and not spec.int8:
            return StreamingRecognizer(
                source, chunking, search, endpoint=endpoint, device=spec.device
            )
        from wenet_lite.model_io import load_model

        model, tokenizer, cfg = load_model(source, torch.device("cpu"))
        name = str(source)
    else:
        model, tokenizer, cfg = source
        name = "the model"
        if spec.device != "cpu":
            model = model.to(spec.device)
    check_chunking(cfg.encoder, chunking, cached=True, source=name)
    made = make_engine(spec, model, chunking)
    rec = StreamingRecognizer.from_model(
        model, cfg, tokenizer, chunking, search, endpoint=endpoint, engine=made
    )
    rec.source = name
    return rec
