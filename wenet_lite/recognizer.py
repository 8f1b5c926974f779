"""The front door: one way to open a recogniser, streaming or offline.

:func:`open_recognizer` opens a model file, an export directory or a model in memory as a
:class:`~wenet_lite.runtime.streaming.StreamingRecognizer` (chunked: `stream`, `serve`,
`transcribe --chunk-size`) or an :class:`~wenet_lite.runtime.offline.OfflineRecognizer` (full
context, or `decode`'s batch modes: `transcribe`, `decode`). :func:`check_rules` checks every
rule of source, engine, precision and chunking, once, before anything is loaded, and raises a
:class:`RuleError` (a ``ValueError``) that names the fields to change (``precision="int8"``;
the CLI speaks of its flags instead). Nothing else builds recognisers or engines.

Example (the executorch int8 engine from a model file, 4 threads)::

    rec = open_recognizer("exp/u2/avg_5.pt", Chunking(16, 4),
                          engine=EngineSpec("executorch", "int8", threads=4))
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from wenet_lite.config.fields import FieldError, Setting, literal
from wenet_lite.files.export_dir import ExportDir, is_export_dir
from wenet_lite.host.cpu import PRECISIONS, auto_precision, cpu_model, native_bf16
from wenet_lite.itn.normalizer import Itn
from wenet_lite.model.chunking import Chunking
from wenet_lite.punct.punctuator import PunctSource, Punctuator, load_punctuator
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.engines import ENGINES, Engine
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.search.options import SearchOptions
from wenet_lite.vad.silero import VadChoice, VadOptions, choose_vad

if TYPE_CHECKING:
    from wenet_lite.config import ExperimentConfig
    from wenet_lite.data.tokenizer import Tokenizer
    from wenet_lite.model import ASRModel
    from wenet_lite.runtime.offline import OfflineRecognizer
    from wenet_lite.runtime.streaming import StreamingRecognizer

__all__ = [
    "EngineSpec",
    "Recognizer",
    "RuleError",
    "Source",
    "check_rules",
    "as_offline",
    "as_streaming",
    "make_engine",
    "open_offline",
    "open_recognizer",
    "open_streaming",
]

_log = logging.getLogger(__name__)

Source = Union[str, Path, ExportDir, Tuple["ASRModel", "Tokenizer", "ExperimentConfig"]]
"""a model file, an export directory (its path, or as read), or ``load_model``'s triple"""
Recognizer = Union["StreamingRecognizer", "OfflineRecognizer"]
ItnChoice = Union[bool, Any, None]
"""inverse text normalisation: True (English, wetext's grammars), False/None, or a stage
with ``spans`` (an ``Itn``)"""


class RuleError(FieldError):
    """A combination of source, engine, precision and chunking that cannot run; the message
    names the fields to change (``engine="executorch"``), the CLI its flags (fields.py)."""


def _engine(kind: Optional[str]) -> Setting:
    return Setting("engine", kind)


def _precision(spec: EngineSpec) -> Setting:
    return Setting("precision", spec.precision)


_STREAMING_ENGINES = ("onnxruntime", "executorch")
"""engines that run exported chunk programs with a fixed cache"""
ENGINE_CHOICES = ENGINES + ("auto",)
"""what ``kind`` may name: an engine, or ``auto``, the one that runs this model's batched chunk
step fastest here, chosen once (``runtime/fastest.py``; an export directory's own engine, torch
for offline decoding)"""


@dataclass(frozen=True)
class EngineSpec:
    """What runs the encoder: ``kind`` (None: the source's own, torch for a model; ``auto``:
    the fastest here, :data:`ENGINE_CHOICES`), the
    precision (``auto``: bf16 on a CPU that multiplies it natively, for an encoder 256 wide or
    more, else fp32, see ``wenet_lite.host.cpu``; ``bf16`` on the torch engine; ``int8`` on the
    torch or executorch engine, batch-invariant, where onnxruntime's is not), intra-op threads,
    and the device (the torch fp32 engine only may leave the CPU). A combination that cannot
    run is a :class:`RuleError`."""

    kind: Optional[str] = None
    precision: str = "auto"
    threads: int = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in ENGINE_CHOICES:
            raise RuleError(f"{{e}} is not one of {', '.join(ENGINE_CHOICES)}",
                            e=_engine(self.kind))  # fmt: skip
        if self.precision not in PRECISIONS:
            raise RuleError(f"{{p}} is not one of {', '.join(PRECISIONS)}", p=_precision(self))
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise RuleError("{t}: give an int >= 1", t=Setting("threads", self.threads))
        reduced = self.precision in ("bf16", "int8")
        what = _precision(self) if reduced else _engine(self.kind)
        if self.device != "cpu" and (reduced or self.kind in _STREAMING_ENGINES):
            raise RuleError("{what} runs on the CPU: drop {d}", what=what,
                            d=Setting("device", self.device))  # fmt: skip
        if self.precision == "int8" and self.kind == "onnxruntime":
            raise RuleError(
                "{p} runs on {t} or {x} (onnxruntime's int8 is not batch-invariant)",
                p=_precision(self), t=_engine("torch"), x=_engine("executorch"),
            )  # fmt: skip
        if self.precision == "bf16" and self.kind in _STREAMING_ENGINES:
            raise RuleError("{p} runs on {t}, not {k}", p=_precision(self), t=_engine("torch"),
                            k=_engine(self.kind))  # fmt: skip

    @property
    def int8(self) -> bool:
        return self.precision == "int8"

    @property
    def exported(self) -> bool:
        """An engine that runs an exported chunk program (chunk by chunk, fixed cache)."""
        return self.kind in _STREAMING_ENGINES

    def name_for(self, found: Optional[ExportDir] = None) -> str:
        """The engine that runs: this kind, else an export directory's, else torch."""
        if self.kind is not None:
            return self.kind
        return found.engine if found is not None else ENGINES[0]

    def resolved(self, exported: bool = False, width: Optional[int] = None) -> str:
        """fp32, bf16 or int8: what ``auto`` means here for an encoder ``width`` wide (bf16
        only for the torch engine on the CPU, ``host.cpu.auto_precision``; an export
        directory's own engines run fp32)."""
        if self.precision != "auto":
            return self.precision
        if exported or self.exported or self.device != "cpu":
            return "fp32"
        return auto_precision(width=width)


def check_rules(
    source: Source,
    chunking: Optional[Chunking],
    spec: EngineSpec,
    offline: Optional[DecodeOptions] = None,
) -> Chunking:
    """Every rule of source, engine, precision and chunking, in one place, before anything is
    loaded: the chunking to open ``source`` with (an export directory's by default, else
    16/4), or a :class:`RuleError` naming the fields to change. ``offline``: decode whole
    utterances in its mode (full context, chunk-masked or ``simulate_streaming``)."""
    if offline is not None:
        if chunking is not None and chunking != offline.chunking:
            raise RuleError(
                f"chunking {chunking.describe()} and offline {offline.chunking.describe()} "
                "differ: give one"
            )  # names no setting: two values of one
        chunking = offline.chunking
    if isinstance(source, ExportDir):
        return _export_dir_rules(source, chunking, spec, offline)
    chunking = chunking if chunking is not None else Chunking(16, 4)
    cached = offline.simulate_streaming if offline is not None else chunking.streaming
    if not cached and (spec.exported or spec.precision in ("bf16", "int8")):
        what = _engine(spec.kind) if spec.exported else _precision(spec)
        if chunking.streaming:
            raise RuleError("{what} runs chunk by chunk with caches: give {s}", what=what,
                            s=Setting("simulate_streaming", True))  # fmt: skip
        raise RuleError("{what} runs chunk by chunk with caches: give a chunk size (e.g. {c})",
                        what=what, c=Setting("chunk_size", 16))  # fmt: skip
    if spec.exported and chunking.left_chunks < 0:
        raise RuleError(
            f"{{e}} needs a fixed cache: {{n}} >= 0 (got {chunking.left_chunks}); 4 is a good "
            "choice", e=_engine(spec.kind), n=Setting("left_chunks"),
        )  # fmt: skip
    return chunking


def _export_dir_rules(
    found: ExportDir, chunking: Optional[Chunking], spec: EngineSpec,
    offline: Optional[DecodeOptions],
) -> Chunking:  # fmt: skip
    source, engine = found.directory, found.engine
    if offline is not None:
        raise RuleError(
            f"{literal(source)} is an export directory, which streams: decode a model file"
        )
    if spec.kind not in (None, "auto", engine):
        raise RuleError(f"{literal(source)} is for {{e}}, not {{k}}", e=_engine(engine),
                        k=_engine(spec.kind))  # fmt: skip
    try:  # the engine rules, each stated once (EngineSpec), for the directory's engine
        dataclasses.replace(spec, kind=engine)
    except RuleError as e:
        raise RuleError(
            f"{literal(source)} is for {{dir_engine}}: {e.says.template}",
            dir_engine=_engine(engine),
            **e.says.settings,
        ) from None
    if spec.int8 and "model_int8" not in found.files:
        raise RuleError(
            f"{literal(source)} has no int8 program: export it again with int8 programs"
        )
    if chunking is not None and chunking != found.chunking:
        raise RuleError(
            f"{literal(source)} was exported for {found.chunking.describe()}, not "
            f"{chunking.describe()}: export it again with those settings"
        )
    return found.chunking


def make_engine(spec: EngineSpec, model: ASRModel, chunking: Chunking) -> Engine:
    """The engine of ``spec`` for a model in memory (on the CPU unless torch fp32), for rules
    :func:`check_rules` passed."""
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine, TorchEngine

    precision = spec.resolved(width=model.encoder.d_model)
    if spec.kind == "auto":
        from wenet_lite.runtime.fastest import candidate_kinds, fastest, step_seconds

        found = [
            (kind, functools.partial(make_engine, dataclasses.replace(
                spec, kind=kind, precision=precision), model, chunking))
            for kind in candidate_kinds(chunking, precision, spec.device)
        ]  # fmt: skip
        if len(found) == 1:
            return found[0][1]()
        window = model.encoder.subsampling.window_size(chunking.chunk_size)
        feat_dim = model.encoder.cmvn.mean.numel()
        return fastest(found, lambda engine: step_seconds(engine, window, feat_dim))
    if spec.kind == "executorch":
        from wenet_lite.export.cache import open_cached
        from wenet_lite.export.executorch import lower_executorch

        quantize = "int8" if precision == "int8" else None
        return open_cached(
            "pte", model, f"{chunking} {quantize}",
            lambda: lower_executorch(model, chunking, quantize),
            lambda program: ExecuTorchEngine(program, chunking, spec.threads, int8=bool(quantize)),
            packages=("executorch",),
        )  # fmt: skip
    if spec.kind == "onnxruntime":
        from wenet_lite.export.batched import export_batched_onnx
        from wenet_lite.export.cache import open_cached

        return open_cached(
            "onnx", model, str(chunking), lambda: export_batched_onnx(model, chunking),
            lambda graph: OnnxRuntimeEngine(graph, chunking, spec.threads),
            packages=("onnx", "onnxscript", "onnx-ir"),
        )  # fmt: skip
    if precision == "bf16" and not native_bf16():
        _log.warning(
            'precision="bf16" on a CPU without native bf16 (%s): emulated, slower than fp32',
            cpu_model(),
        )
    return TorchEngine(model, chunking, precision)


def _export_dir_engine(found: ExportDir, spec: EngineSpec) -> Engine:
    """The engine of an export directory (config, tokenizer and chunking travel in it)."""
    from wenet_lite.runtime.engines import ExecuTorchEngine, OnnxRuntimeEngine

    if found.engine == "executorch":
        program = found.files["model_int8" if spec.int8 else "model"]
        return ExecuTorchEngine(program, found.chunking, spec.threads, int8=spec.int8)
    if found.engine == "onnxruntime":
        return OnnxRuntimeEngine(found.files["model"], found.chunking, spec.threads)
    raise ValueError(f"{found.directory}: unknown engine {found.engine!r} in its record")


def open_recognizer(
    source: Source,
    chunking: Optional[Chunking] = None,
    search: Optional[SearchOptions] = None,
    endpoint: Optional[EndpointConfig] = None,
    engine: Optional[EngineSpec] = None,
    *,
    offline: Optional[DecodeOptions] = None,
    slots: Optional[bool] = None,
    punct: Optional[PunctSource] = None,
    vad: VadChoice = "off",
    vad_options: Optional[VadOptions] = None,
    itn: ItnChoice = False,
) -> Recognizer:
    """A recogniser over any source: streaming for chunked ``chunking``, offline for full
    context (``Chunking(0)``) or when ``offline`` gives `decode`'s batch mode.

    Args:
        source: a model file, an export directory (`wenet-lite export --format onnx |
            executorch`: its engine and chunking; it needs no model file and no torch model;
            streaming only), its :class:`ExportDir` as read, or ``(model, tokenizer, config)``
            in memory (as ``load_model`` returns them).
        chunking: chunk size and left chunks (default: an export directory's, else 16/4;
            ``Chunking(0)``: full context, an offline recogniser).
        search, endpoint: the search and endpointing (defaults: greedy, ``EndpointConfig()``;
            offline recognisers have no endpointing).
        engine: what runs the encoder (default :class:`EngineSpec`: the source's own engine).
        offline: an offline recogniser in this mode (its chunking, batching, windows; its
            search unless ``search`` is given).
        slots: streaming: the streams' states in one batched tensor with a slot per stream
            (None: on a GPU with a fixed cache, see ``StreamingRecognizer``).
        punct: a punctuation model (`wenet-lite train-punct`: its directory, or a
            ``Punctuator``): final results cased and punctuated, each word with its mark
            (partial results stay as recognised).
        vad: Silero VAD ("on", "off", "auto": where silero-vad is installed; or one loaded):
            offline, a whole file's speech regions are decoded (:meth:`~wenet_lite.runtime.
            offline.OfflineRecognizer.file_results`); streaming, streams may end their segments
            by it (the endpoint rule ``vad_silence`` turns it on). ``vad_options``: offline,
            its threshold, shortest speech and silence, and padding.
        itn: final results with numbers, money, dates and times written as digits (True, or
            an ``Itn``; the ``itn`` extra), after punctuation.
    Raises:
        RuleError (a ValueError) for a combination that cannot run, naming the fields to
        change, before anything is loaded; FileNotFoundError / ValueError (CheckpointError, a
        bad export record) for a bad source, naming it.
    """
    spec = engine or EngineSpec()
    # a bad punctuation directory or a missing ITN package refused before the model loads
    stages = _Stages(load_punctuator(punct), vad, vad_options, _itn(itn))
    return _open(source, chunking, search, endpoint, spec, offline, slots, stages)


@dataclass(frozen=True)
class _Stages:
    """The optional stages a recogniser is built with (its constructor's arguments)."""

    punctuator: Optional[Punctuator]
    vad: VadChoice
    vad_options: Optional[VadOptions]
    itn: Optional[Any]

    def streaming(self, rate: int, endpoint: Optional[EndpointConfig]) -> Dict[str, Any]:
        rule = endpoint is not None and endpoint.vad_options() is not None
        return {"punctuator": self.punctuator, "itn": self.itn,
                "vad": choose_vad("on" if rule else self.vad, rate)}  # fmt: skip

    def offline(self, rate: int) -> Dict[str, Any]:
        return {"punctuator": self.punctuator, "itn": self.itn, "vad": choose_vad(self.vad, rate),
                "vad_options": self.vad_options}  # fmt: skip


def _itn(choice: ItnChoice) -> Optional[Any]:
    if choice is None or isinstance(choice, bool):
        return Itn() if choice else None
    return choice  # a stage of the caller's


def _open(
    source: Source,
    chunking: Optional[Chunking],
    search: Optional[SearchOptions],
    endpoint: Optional[EndpointConfig],
    spec: EngineSpec,
    offline: Optional[DecodeOptions],
    slots: Optional[bool],
    stages: _Stages,
) -> Recognizer:
    import torch

    from wenet_lite.model.chunking import check_chunking
    from wenet_lite.runtime.streaming import StreamingRecognizer

    if offline is None and chunking is not None and not chunking.streaming:
        offline = DecodeOptions(search or SearchOptions(), chunking)
    if is_export_dir(source) and not isinstance(source, ExportDir):
        from wenet_lite.files.export_dir import RECORD_FILE, read_export_dir

        # Offline, only an export directory's record is read (to refuse it by name); another
        # directory is for load_model to name (a WeNet model's gets a hint).
        if offline is None or (Path(source) / RECORD_FILE).is_file():
            source = read_export_dir(source)
    chunking = check_rules(source, chunking, spec, offline)
    torch.set_num_threads(spec.threads)
    if isinstance(source, ExportDir):
        return StreamingRecognizer(
            _export_dir_engine(source, spec), source.cfg, source.tokenizer, search,
            endpoint=endpoint, source=str(source.directory), slots=slots,
            **stages.streaming(source.cfg.features.sample_rate, endpoint),
        )  # fmt: skip
    if isinstance(source, (str, Path)):
        from wenet_lite.files.model_file import load_model

        torch_fp32 = not spec.exported and spec.resolved() == "fp32"
        device = torch.device(spec.device if torch_fp32 or offline is not None else "cpu")
        model, tokenizer, cfg = load_model(source, device)
        name = str(source)
    else:
        model, tokenizer, cfg = source
        name = "the model"
        if spec.device != "cpu":
            model = model.to(spec.device)
    rate = cfg.features.sample_rate
    if offline is not None:
        return _open_offline(model, tokenizer, cfg, spec, offline, search, name,
                             stages.offline(rate))  # fmt: skip
    if spec.exported:  # before the export (the recogniser checks it again, as for torch)
        check_chunking(cfg.encoder, chunking, cached=True, source=name)
    made = make_engine(spec, model, chunking)
    return StreamingRecognizer(
        made, cfg, tokenizer, search, endpoint=endpoint, model=model, source=name, slots=slots,
        **stages.streaming(rate, endpoint),
    )  # fmt: skip


def open_streaming(
    source: Source,
    chunking: Optional[Chunking] = None,
    search: Optional[SearchOptions] = None,
    endpoint: Optional[EndpointConfig] = None,
    engine: Optional[EngineSpec] = None,
    slots: Optional[bool] = None,
    punct: Optional[PunctSource] = None,
    vad: VadChoice = "off",
    itn: ItnChoice = False,
) -> StreamingRecognizer:
    """:func:`open_recognizer` for streaming, typed: ``chunking`` (default: an export
    directory's, else 16/4) must stream; full context is :func:`open_offline`'s. ``slots``:
    the streams' states in one batched tensor with a slot each (default: on a GPU with a fixed
    cache; see ``StreamingRecognizer``); ``punct``, ``vad``, ``itn`` as
    :func:`open_recognizer`'s."""
    from wenet_lite.runtime.streaming import StreamingRecognizer

    if chunking is not None and not chunking.streaming:
        raise RuleError(
            f"chunking={chunking.describe()} is full context, which does not stream: open it "
            "with open_offline"
        )
    rec = open_recognizer(source, chunking, search, endpoint, engine, slots=slots, punct=punct,
                          vad=vad, itn=itn)  # fmt: skip
    assert isinstance(rec, StreamingRecognizer)  # chunked: a streaming recogniser
    return rec


def open_offline(
    source: Source,
    options: Optional[DecodeOptions] = None,
    search: Optional[SearchOptions] = None,
    engine: Optional[EngineSpec] = None,
    punct: Optional[PunctSource] = None,
    vad: VadChoice = "off",
    vad_options: Optional[VadOptions] = None,
    itn: ItnChoice = False,
) -> OfflineRecognizer:
    """:func:`open_recognizer` for whole utterances, typed: ``options`` is the mode (default:
    full context in bounded windows, what `transcribe` and `decode` run), ``search`` its search
    when given; ``punct``, ``vad``, ``vad_options`` and ``itn`` as :func:`open_recognizer`'s."""
    from wenet_lite.runtime.offline import OfflineRecognizer

    rec = open_recognizer(
        source, None, search, None, engine, offline=options or DecodeOptions(), punct=punct,
        vad=vad, vad_options=vad_options, itn=itn,
    )  # fmt: skip
    assert isinstance(rec, OfflineRecognizer)  # offline= always gives one
    return rec


def as_streaming(rec: Recognizer) -> Optional[StreamingRecognizer]:
    """``rec`` when it streams, else None: with :func:`as_offline`, the one place a caller
    holding either kind learns which."""
    from wenet_lite.runtime.streaming import StreamingRecognizer

    return rec if isinstance(rec, StreamingRecognizer) else None


def as_offline(rec: Recognizer) -> Optional[OfflineRecognizer]:
    """``rec`` when it decodes whole utterances, else None."""
    from wenet_lite.runtime.offline import OfflineRecognizer

    return rec if isinstance(rec, OfflineRecognizer) else None


def _open_offline(
    model: ASRModel,
    tokenizer: Tokenizer,
    cfg: ExperimentConfig,
    spec: EngineSpec,
    options: DecodeOptions,
    search: Optional[SearchOptions],
    name: str,
    stages: Dict[str, Any],
) -> OfflineRecognizer:
    """Simulated streaming runs on ``spec``'s engine unless that is eager torch in fp32 (the
    model's own chunk-by-chunk forward); the other modes run the eager model."""
    from wenet_lite.model.chunking import check_chunking
    from wenet_lite.runtime.offline import OfflineRecognizer

    if search is not None:
        options = dataclasses.replace(options, search=search)
    check_chunking(cfg.encoder, options.chunking, options.simulate_streaming, name)
    made = None
    width = model.encoder.d_model
    if options.simulate_streaming and (spec.exported or spec.resolved(width=width) != "fp32"):
        made = make_engine(spec, model, options.chunking)
    return OfflineRecognizer(model, tokenizer, cfg, options, made, name, **stages)
