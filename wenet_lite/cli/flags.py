"""What several `wenet-lite` subcommands share: option flags declared from dataclasses, the
chunk flags, devices, and the usage error that main() prints as one line (exit code 2)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Literal, Optional, Sequence, Tuple, Union

from wenet_lite.config.fields import Setting, python_words, rendered
from wenet_lite.host.cpu import PRECISIONS

if TYPE_CHECKING:  # imported where used: `wenet-lite --help` stays instant
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.runtime.offline import OfflineRecognizer
    from wenet_lite.runtime.streaming import StreamingRecognizer
    from wenet_lite.runtime.utterance import DecodeOptions
    from wenet_lite.search.options import SearchOptions

__all__ = [
    "UsageError", "add_set", "add_options", "options_from", "add_chunking", "chunking_from",
    "add_endpoint", "endpoint_from", "add_punct", "add_upsample",
    "device_from", "output_dir", "output_file", "output_path", "file_in", "in_dir", "add_engine",
    "engine_spec", "offline_from", "recognizer_from", "check_recognizer_flags", "rule_error",
    "cli_words", "in_cli_words",
]  # fmt: skip


class UsageError(Exception):
    """Bad flags: reported without a traceback, exit code 2."""


def add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="override a config value, e.g. train.max_steps=1000 (repeatable)",
    )  # fmt: skip


def add_options(p: argparse.ArgumentParser, cls: type, skip: Sequence[str] = ()) -> None:
    """One flag per field of the options dataclass ``cls`` that declares one in its metadata
    (see ``search/options.py``): type, choices and default come from the field."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "flag" not in f.metadata or f.name in skip:
            continue
        extra = {k: v for k, v in f.metadata.items() if k not in ("flag", "help", "aliases")}
        kind = hints[f.name]
        if typing.get_origin(kind) is Union:  # Optional[X]
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if typing.get_origin(kind) is Literal:
            extra.setdefault("choices", typing.get_args(kind))
            kind = str
        default = f.default
        if kind is bool:  # a switch: --x sets True, or for a default of True (--no-x) False
            action = "store_false" if default else "store_true"
            p.add_argument(f.metadata["flag"], dest=f.name, action=action,
                           help=f.metadata["help"], **extra)  # fmt: skip
            continue
        help_text = f.metadata["help"] + ("" if default in (None, "") else f" ({default})")
        p.add_argument(
            f.metadata["flag"], dest=f.name, type=kind, default=default, help=help_text, **extra
        )
        for alias in f.metadata.get("aliases", ()):  # older spellings: accepted, not shown
            p.add_argument(alias, dest=f.name, type=kind, default=argparse.SUPPRESS,
                           help=argparse.SUPPRESS, **extra)  # fmt: skip


def options_from(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """``cls`` from the flags :func:`add_options` declared; a refused value is a usage error."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name in args}
    try:
        return cls(**{**values, **given})
    except ValueError as e:
        raise UsageError(in_cli_words(e)) from None


def add_chunking(p: argparse.ArgumentParser, chunk: int, left: int, full: bool = False) -> None:
    """``--chunk-size`` (a positive number of encoder frames, or ``full`` where whole-utterance
    context is allowed) and ``--left-chunks``."""
    shown = "full" if chunk == 0 else str(chunk)
    p.set_defaults(chunking_defaults=(chunk, left))  # None below: given or not (export dirs)
    p.add_argument(
        "--chunk-size", type=_chunk_size if full else _positive_chunk, default=None,
        metavar="C|full" if full else "C",
        help=f"encoder frames per chunk{', or full (whole utterances)' if full else ''} ({shown})",
    )  # fmt: skip
    p.add_argument(
        "--left-chunks", type=int, default=None, help=f"history chunks, -1: all ({left})"
    )


def _chunk_size(text: str) -> int:
    """``full`` -> 0; else a positive int (0 and negatives read as full context were silently
    wrong: a typo of -1 for left chunks decoded in full context)."""
    if text == "full":
        return 0
    return _positive_chunk(text)


def _positive_chunk(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a chunk is a positive number of frames")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "must be at least 1")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 for any free one."""
    return _number(text, int, lambda v: 0 <= v <= 65535, "is not a port (0..65535; 0: any)")


def non_negative(text: str) -> float:
    """An argparse type: a number >= 0 (not NaN)."""
    return _number(text, float, lambda v: v >= 0, "must be a number >= 0")


def _number(text: str, kind: Callable[[str], Any], ok: Callable[[Any], bool], what: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r}: {what}")
    return value


def chunking_from(args: argparse.Namespace, defaults: Any = None) -> Any:
    """The Chunking of ``--chunk-size`` / ``--left-chunks``; a flag not given takes its value
    from ``defaults`` (a Chunking, e.g. an export directory's), else the command's default."""
    from wenet_lite.model.chunking import Chunking

    chunk, left = args.chunking_defaults
    if defaults is not None:
        chunk, left = defaults.chunk_size, defaults.left_chunks
    chunk = chunk if args.chunk_size is None else args.chunk_size
    if args.left_chunks is not None:
        left = args.left_chunks
    elif chunk == 0:
        left = -1  # full context: the whole utterance, so no chunks to count
    try:
        return Chunking(chunk, left)
    except ValueError as e:
        raise UsageError(in_cli_words(e)) from None


def add_endpoint(p: argparse.ArgumentParser) -> None:
    """The endpointing flags of `stream`, `serve` and `transcribe` (``EndpointConfig``'s)."""
    from wenet_lite.runtime.endpoint import EndpointConfig

    add_options(p, EndpointConfig)


def endpoint_from(args: argparse.Namespace) -> Any:
    from wenet_lite.runtime.endpoint import EndpointConfig

    return options_from(EndpointConfig, args)


def output_dir(text: str) -> str:
    """argparse type of a directory to write into: not a file, nor under one."""
    _check_parents(text)
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory")
    return text


def output_file(text: str) -> str:
    """argparse type of a file to write: not a directory, nor under a file."""
    _check_parents(text)
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    return text


def file_in(default_name: str) -> Callable[[str], str]:
    """argparse type of an output file where a directory is taken too: an existing directory,
    or a path ending in '/', means ``DIR/default_name``. So ``--out`` means one thing in every
    subcommand: where the output goes, a directory always accepted."""

    def check(text: str) -> str:
        return output_file(str(in_dir(text, default_name)))

    return check


def in_dir(text: str, default_name: str) -> Path:
    """``text``, or ``text/default_name`` when it names a directory (existing, or ending in
    '/')."""
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        return Path(text) / default_name
    return Path(text)


def output_path(text: str) -> str:
    """argparse type of an output that is a file or a directory by the subcommand's other
    flags: at least not under a file."""
    _check_parents(text)
    return text


def _check_parents(text: str) -> None:
    for parent in Path(text).parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a directory")
            return


DEVICE_HELP = "cpu (default), auto (cuda when present, else cpu), cuda or cuda:N"
"""the ``--device`` of every subcommand"""


def device_from(name: Optional[str]) -> str:
    """A ``--device`` value checked against this machine: None is cpu, ``auto`` cuda when
    available, else cpu. A mistyped device, or CUDA where there is none, is a usage error
    naming both."""
    import torch

    if name is None:
        return "cpu"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {name!r} is not a device (cpu, cuda, cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {name}: CUDA is not available here (a CPU build of torch, or no GPU "
                "visible); use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {name}: this machine has {torch.cuda.device_count()} GPU(s)"
            )
    elif device.type != "cpu":
        raise UsageError(f"--device {name}: only cpu and cuda devices are supported")
    return name


def add_punct(p: argparse.ArgumentParser, what: str) -> None:
    """``--punct DIR`` on a subcommand whose final results it writes."""
    p.add_argument(
        "--punct", metavar="DIR", default=None,
        help=f"a punctuation model (`wenet-lite train-punct`): {what}",
    )  # fmt: skip


def add_itn(p: argparse.ArgumentParser, what: str) -> None:
    """``--itn`` on a subcommand whose final results it writes."""
    p.add_argument(
        "--itn", action="store_true",
        help=f"inverse text normalisation (the itn extra: wetext's English grammars): {what} "
        "with numbers, money, dates and times as digits, each written word with the times "
        "and confidence of the spoken words it came from (after --punct)",
    )  # fmt: skip


def add_upsample(p: argparse.ArgumentParser) -> None:
    """`--no-upsample`: audio below the model's rate is refused instead of upsampled."""
    p.add_argument(
        "--no-upsample", dest="upsample", action="store_false",
        help="refuse audio below the model's sample rate (default: upsample it, with a "
        "warning naming the rate: telephone audio decodes worse)",
    )  # fmt: skip


def add_engine(p: argparse.ArgumentParser, scope: str = "") -> None:
    """`--engine`, `--precision` and `--threads` of `stream`, `serve` and `decode`."""
    p.add_argument(
        "--engine", choices=("torch", "onnxruntime", "executorch", "auto"), default=None,
        help=f"{scope}what runs the encoder: torch (eager; the default for a model file), "
        "onnxruntime (the batched graph) or executorch (XNNPACK); from a model file these "
        "two export at their first start with torch.export (seconds to minutes) and keep "
        "the graph for the next (~/.cache/wenet_lite, $WENET_LITE_CACHE: a folder or off); "
        "they need --left-chunks >= 0; an export directory brings its own. auto: streaming "
        "from a model file, the one of torch and onnxruntime (fp32, --left-chunks >= 0, where "
        "installed) that runs a 16-stream chunk step fastest here, timed once at start",
    )  # fmt: skip
    p.add_argument("--threads", type=positive_int, default=1, help="intra-op threads (1)")
    p.add_argument(
        "--precision", choices=PRECISIONS, default="auto",
        help="the encoder's arithmetic: fp32; bf16 (torch engine: linears and subsampling in "
        "bf16, fast where the CPU multiplies bf16 natively: AMX, AVX-512 bf16); int8 (torch or "
        "executorch engine: int8 linears scaled per frame); auto (default): bf16 where native "
        "and the encoder is 256 wide or more, else fp32. "
        "Batched == alone holds for each; `wenet-lite --version` shows what auto picks here",
    )  # fmt: skip
    p.add_argument(
        "--int8", dest="precision", action="store_const", const="int8", help=argparse.SUPPRESS
    )  # the older spelling of --precision int8


def cli_words(s: Setting) -> str:
    """A setting in the CLI's words, from the flags the subcommands declare: ``--chunk-size``,
    ``--precision int8``, ``--simulate-streaming`` for True, ``--no-upsample`` for False (a
    field no flag sets keeps its Python name)."""
    action = _declared().get(s.name)
    if action is None or not action.option_strings:
        return python_words(s)
    flag = action.option_strings[-1]
    if not s.has_value:
        return flag
    if action.nargs == 0:  # a switch: the flag is the value it stores
        const = getattr(action, "const", None)
        return flag if s.value == const else python_words(s)
    return f"{flag} {s.value}"


@functools.lru_cache(maxsize=1)
def _declared() -> Dict[str, argparse.Action]:
    """Each field (an argparse ``dest``) and the flag that sets it, over every subcommand; a
    documented flag wins over a hidden older spelling."""
    from wenet_lite.cli import build_parser

    found: Dict[str, argparse.Action] = {}

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
                continue
            if not action.option_strings or action.dest in found:
                continue
            if action.help != argparse.SUPPRESS:
                found[action.dest] = action

    walk(build_parser())
    return found


def in_cli_words(e: BaseException) -> str:
    """An exception's message in the CLI's words (the settings it names as flags)."""
    return rendered(e, cli_words)


def rule_error(e: ValueError) -> UsageError:
    """A library rule (``RuleError``, naming fields) as a usage error in the CLI's words."""
    return UsageError(in_cli_words(e))


def engine_spec(args: argparse.Namespace, device: str) -> EngineSpec:
    """The engine description of `--engine`, `--precision`, `--threads` and `--device` (a
    refused combination is a usage error)."""
    from wenet_lite.recognizer import EngineSpec

    try:
        return EngineSpec(args.engine, args.precision, args.threads, device)
    except ValueError as e:
        raise rule_error(e) from None


def offline_from(args: argparse.Namespace, options: DecodeOptions) -> OfflineRecognizer:
    """``open_offline`` over `--model`, `--device` and the engine flags; a broken rule is a
    usage error in the CLI's words."""
    from wenet_lite.recognizer import RuleError, open_offline

    spec = engine_spec(args, device_from(args.device))
    try:
        return open_offline(args.model, options, engine=spec)
    except RuleError as e:  # checked before anything is loaded
        raise rule_error(e) from None


def _recognizer_plan(args: argparse.Namespace) -> Tuple[Any, Chunking, EngineSpec]:
    """The source (an export directory read once, or the model path), chunking and engine
    spec of `stream`'s and `serve`'s flags."""
    from wenet_lite.files.export_dir import is_export_dir, read_export_dir

    spec = engine_spec(args, device_from(args.device))
    found = read_export_dir(args.model) if is_export_dir(args.model) else None
    chunking = chunking_from(args, found.chunking if found is not None else None)
    return (found or args.model), chunking, spec


def check_recognizer_flags(args: argparse.Namespace) -> None:
    """The rules of :func:`recognizer_from`'s flags alone, loading nothing (a usage error)."""
    from wenet_lite.recognizer import RuleError, check_rules

    source, chunking, spec = _recognizer_plan(args)
    try:
        check_rules(source, chunking, spec)
    except RuleError as e:
        raise rule_error(e) from None


def recognizer_from(
    args: argparse.Namespace,
    options: SearchOptions,
    endpoint: EndpointConfig,
    announce: bool = False,
    vad: str = "off",
) -> StreamingRecognizer:
    """The streaming recognizer of `stream`'s and `serve`'s flags (``recognizer.py``; an
    export directory read once); ``announce`` logs what loads before it loads (a large model
    or an engine export takes a minute); ``vad``: auto, on or off (the endpoint rule "vad"
    turns it on)."""
    import logging

    from wenet_lite.recognizer import RuleError, open_streaming

    source, chunking, spec = _recognizer_plan(args)
    if announce:
        logging.getLogger("wenet_lite.serve").info(
            "loading %s (%s, engine %s, precision %s)", args.model, chunking.describe(),
            spec.name_for(None if isinstance(source, str) else source), args.precision,
        )  # fmt: skip
    if not chunking.streaming:
        raise UsageError("--chunk-size 0 decodes whole files: use `transcribe` or `decode`")
    try:
        return open_streaming(
            source, chunking, options, endpoint, spec, punct=getattr(args, "punct", None), vad=vad,
            itn=getattr(args, "itn", False),
        )  # fmt: skip
    except RuleError as e:  # checked before anything is loaded
        raise rule_error(e) from None


def settings_record(rec: StreamingRecognizer) -> Dict[str, Any]:
    """A streaming recogniser's settings for summaries (``summary.json``, `stream --json`'s
    last line)."""
    import dataclasses

    return {
        "model": rec.source,
        "chunking": dataclasses.asdict(rec.chunking),
        "engine": rec.engine.name,
        "search": dataclasses.asdict(rec.options),
        "endpoint": dataclasses.asdict(rec.endpoint),
        "describe": f"search {rec.options.describe()}, {rec.chunking.describe()}, "
        + ("streamed" if rec.endpoint.enabled else "streamed, no endpointing")
        + (", VAD endpoints" if rec.vad_options is not None else ""),
    }
