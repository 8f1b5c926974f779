"""The library's messages name settings by field; the CLI says the same in its own flags,
taken from what its subcommands declare."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from wenet_lite.cli import _in_flags
from wenet_lite.cli.flags import _declared, cli_words, in_cli_words, rule_error
from wenet_lite.config.fields import FieldError, Says, Setting, raised
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, check_rules
from wenet_lite.search.options import SearchOptions
from wenet_lite.serve.options import ServerOptions

PACKAGE = Path(__file__).resolve().parents[2] / "wenet_lite"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]+")


@pytest.mark.parametrize(
    "make, library, cli",
    [
        (lambda: EngineSpec("onnxruntime", "int8"), 'precision="int8" runs on engine="torch"',
         "--precision int8 runs on --engine torch"),
        (lambda: EngineSpec(threads=0), "threads=0", "--threads 0"),
        (lambda: EngineSpec(precision="bf16", device="cuda"), 'drop device="cuda"',
         "drop --device cuda"),
        (lambda: check_rules("m.pt", Chunking(0), EngineSpec("executorch")),
         "(e.g. chunk_size=16)", "(e.g. --chunk-size 16)"),
        (lambda: check_rules("m.pt", Chunking(4, -1), EngineSpec("executorch")),
         "left_chunks >= 0", "--left-chunks >= 0"),
        (lambda: check_rules("m.pt", Chunking(16, 4, ), EngineSpec("executorch"),
                             _offline(False)),
         "give simulate_streaming=True", "give --simulate-streaming"),
        (lambda: SearchOptions(mode="greedy", lm="lm.json"),
         'a word LM (lm) needs the prefix beam (mode="prefix_beam" or '
         'mode="attention_rescoring")',
         "a word LM (--lm) needs the prefix beam (--mode prefix_beam or "
         "--mode attention_rescoring)"),
        (lambda: ServerOptions(max_upload_mb=0), "max_upload_mb must be > 0, got 0",
         "--max-upload-mb must be > 0, got 0"),
        (lambda: ServerOptions(upload_context="x{y}"), "upload_context must be full or "
         "streamed, got 'x{y}'", "--upload-context must be full or streamed, got 'x{y}'"),
        (lambda: ServerOptions(certfile="c.pem"), "certfile and keyfile go together",
         "--certfile and --keyfile go together"),
    ],
)  # fmt: skip
def test_fields_become_flags(make, library: str, cli: str) -> None:
    with pytest.raises(ValueError) as e:
        make()
    assert library in str(e.value) and "--" not in str(e.value)
    assert cli in str(rule_error(e.value))


def _offline(streaming: bool):
    from wenet_lite.runtime.utterance import DecodeOptions

    return DecodeOptions(SearchOptions(), chunking=Chunking(16, 4), simulate_streaming=streaming)


def test_switches_and_other_exceptions() -> None:
    """A store_false switch is its --no- flag for False; a FileNotFoundError carries its
    settings too; a message without settings passes unchanged."""
    assert cli_words(Setting("upsample", False)) == "--no-upsample"
    assert cli_words(Setting("resume", True)) == "--resume"
    assert cli_words(Setting("left_chunks", -1)) == "--left-chunks -1"
    error = raised(FileNotFoundError, "no {part} here", part=Setting("train_parts"))
    assert str(error) == "no train_parts here" and in_cli_words(error) == "no --train-part here"
    assert in_cli_words(ValueError("plain")) == "plain"
    with pytest.raises(KeyError):  # a mark without its setting fails where it is written
        FieldError("{missing} is wrong")


def test_warnings_name_flags_in_the_cli() -> None:
    """A warning whose message is a Says is rendered with flags by the CLI's log filter."""
    says = Says("%s: all history ({all}) grows", all=Setting("left_chunks", -1))
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, says, ("a.wav",), None)
    assert record.getMessage() == "a.wav: all history (left_chunks=-1) grows"
    assert (
        _in_flags(record) and record.getMessage() == "a.wav: all history (--left-chunks -1) grows"
    )


def _messages(tree: ast.AST) -> Iterator[Tuple[int, str]]:
    """String pieces of what is raised or logged."""
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("warning", "warn", "info", "error", "exception", "debug"):
                target = node
        for sub in ast.walk(target) if target is not None else ():
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                yield sub.lineno, sub.value


def _flags_named(source: str) -> List[str]:
    return [f"{n}: {m}" for n, text in _messages(ast.parse(source)) for m in FLAG.findall(text)]


def test_no_message_outside_the_cli_names_a_flag() -> None:
    """Flags are the CLI's words: the library's errors and warnings name fields."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] != "cli":
            found += [f"{path.relative_to(PACKAGE)}:{f}" for f in _flags_named(path.read_text())]
    assert not found
    planted = 'def f(n):\n    raise ValueError(f"--num must be >= 1, got {n}")\n'
    assert _flags_named(planted) == ["2: --num"]  # the scan sees one where it is


def _settings_named(source: str) -> List[str]:
    return [
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Setting"
        and node.args and isinstance(node.args[0], ast.Constant)
    ]  # fmt: skip


def test_every_setting_named_has_a_flag() -> None:
    """Each field a library message names is a flag's destination in some subcommand (else
    the CLI would print the Python name)."""
    names = {n for p in PACKAGE.rglob("*.py") for n in _settings_named(p.read_text())}
    assert {"engine", "mode", "left_chunks", "resume", "train_parts"} <= names
    declared = _declared()
    assert sorted(n for n in names if n not in declared) == []
    assert "no_such_field" not in declared  # the control: an undeclared name is caught
