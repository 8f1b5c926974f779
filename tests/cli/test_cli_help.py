"""`wenet-lite --help` and every subcommand's: each starts with a copy-pasteable usage line
whose flags exist, and the installed console script answers."""

import re
import subprocess
from typing import List, Tuple

import pytest

from wenet_lite.cli import build_parser

SUBCOMMANDS = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
EXPECTED = {"prepare", "compute-cmvn", "compute-fbank", "train", "average", "decode", "stream",
            "serve", "score", "train-lm", "export", "import-wenet", "transcribe", "train-punct",
            "punctuate"}  # fmt: skip


def test_the_subcommands() -> None:
    assert set(SUBCOMMANDS) == EXPECTED
    out = subprocess.run(["wenet-lite", "--help"], capture_output=True, text=True, check=True)
    for name in EXPECTED:
        assert name in out.stdout


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_help_of_every_subcommand(name: str) -> None:
    proc = subprocess.run(["wenet-lite", name, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    parser = SUBCOMMANDS[name]
    assert parser.usage.startswith(f"wenet-lite {name} ")
    assert proc.stdout.startswith(f"usage: {parser.usage.splitlines()[0]}\n")
    assert proc.stdout.count("usage:") == 1  # the written usage, not argparse's beside it
    known = {flag for action in parser._actions for flag in action.option_strings}
    for line in parser.usage.splitlines():  # the usage lines
        command = re.split(rf"wenet[-_]lite {name}\b", line)[-1]  # not arecord's or torchrun's
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command):
            assert flag in known, f"{name}'s usage names {flag}, which it does not take"


def test_version_and_verbose_after_the_subcommand() -> None:
    from wenet_lite import __version__

    out = subprocess.run(["wenet-lite", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"wenet-lite {__version__} (torch ")
    parser = build_parser()
    for name in EXPECTED:  # -v works on both sides of every subcommand
        assert "-v" in {f for a in SUBCOMMANDS[name]._actions for f in a.option_strings}
    before = parser.parse_args(["-v", "import-wenet", "d", "--out", "m.pt"])
    after = parser.parse_args(["import-wenet", "d", "--out", "m.pt", "-v"])
    neither = parser.parse_args(["import-wenet", "d", "--out", "m.pt"])
    assert before.verbose and after.verbose and not neither.verbose


def test_device_defaults_agree() -> None:
    """Every subcommand with --device runs on the CPU unless asked; auto picks CUDA."""
    from wenet_lite.cli.flags import device_from

    with_device = {name: next(a for a in p._actions if "--device" in a.option_strings)
                   for name, p in SUBCOMMANDS.items()
                   if any("--device" in a.option_strings for a in p._actions)}  # fmt: skip
    assert {"train", "decode", "stream", "serve", "transcribe"} <= set(with_device)
    assert {a.default for a in with_device.values()} == {"cpu"}
    assert device_from(None) == "cpu" and device_from("auto") in ("cpu", "cuda")


def test_one_spelling_of_int8() -> None:
    """--int8 in every subcommand that quantizes; export still reads --quantize int8."""
    for name in ("stream", "serve", "decode", "export"):
        assert "--int8" in {f for a in SUBCOMMANDS[name]._actions for f in a.option_strings}
    parser = build_parser()
    base = ["export", "--model", "m.pt", "--format", "onnx", "--out", "o"]
    assert parser.parse_args([*base, "--int8"]).quantize == "int8"
    assert parser.parse_args([*base, "--quantize", "int8"]).quantize == "int8"
    assert parser.parse_args(base).quantize is None


def _shown_flags(parser) -> set:
    import argparse

    return {f for a in parser._actions if a.help != argparse.SUPPRESS for f in a.option_strings}


def test_left_chunks_default_agrees() -> None:
    """Every subcommand that streams keeps 4 chunks of history unless asked: constant memory."""
    with_left = {name: p for name, p in SUBCOMMANDS.items() if "--left-chunks" in _shown_flags(p)}
    assert {"decode", "stream", "serve", "export", "transcribe"} <= set(with_left)
    assert {p.get_default("chunking_defaults")[1] for p in with_left.values()} == {4}


def test_one_spelling_of_parallelism() -> None:
    """--jobs: parallel processes or readers; --threads: one computation's intra-op threads.
    Older spellings still parse but are not shown."""
    parallel = re.compile(r"--(nj|workers|num-workers|num-threads|num-jobs|procs)$")
    for name, parser in SUBCOMMANDS.items():
        assert not {f for f in _shown_flags(parser) if parallel.match(f)}, name
    parser = build_parser()
    serve = ["serve", "--model", "m.pt"]
    assert parser.parse_args([*serve, "--jobs", "3"]).workers == 3
    assert parser.parse_args([*serve, "--workers", "3"]).workers == 3
    assert parser.parse_args(serve).workers == 1
    shown = subprocess.run(["wenet-lite", "serve", "--help"], capture_output=True, text=True)
    assert "--jobs" in shown.stdout and "--workers" not in shown.stdout


def test_every_default_is_shown() -> None:
    """A flag with a default says it in its help, as ``(4)`` (switches and hidden
    spellings aside)."""
    import argparse

    quiet = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction,
             argparse._StoreConstAction, argparse._AppendAction)  # fmt: skip
    missing = []
    for name, parser in SUBCOMMANDS.items():
        for action in parser._actions:
            default = action.default
            hidden = action.help == argparse.SUPPRESS or not action.option_strings
            if hidden or isinstance(action, quiet) or default in (None, argparse.SUPPRESS):
                continue
            if str(default) not in (action.help or ""):
                missing.append(f"{name} {action.option_strings[0]} ({default})")
    assert not missing, missing


def test_another_tools_flags_are_named_by_the_subcommand(capsys) -> None:
    """whisper's --output_format is the subcommand's error, with ours beside it."""
    from wenet_lite.cli import main

    assert main(["transcribe", "--model", "m.pt", "a.wav", "--output_format", "srt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wenet-lite transcribe: error: unrecognized arguments: --output_format")
    assert "--output_format: --format?" in err and err.count("\n") == 1


_SUBS = "|".join(sorted(map(re.escape, SUBCOMMANDS), key=len, reverse=True))
_NAMED = re.compile(
    rf"(?P<top>wenet-lite(?= --))|(?:wenet-lite |(?<![\w-]))(?P<sub>{_SUBS})(?= (--|[A-Z]))"
    r"|(?<![\w-])(?P<flag>--[a-z][a-z0-9-]*)(?![\w-])"
)


def flags_named(text: str, own: str) -> List[Tuple[str, str]]:
    """(subcommand, flag) for every flag a text names: after ``wenet-lite SUB`` in the same
    code span or line the flag is SUB's, else the text's own subcommand's (``wenet-lite
    --version`` is the top level's, skipped)."""
    found = []
    for span in re.split(r"`|\n|; |\. ", text):
        current = own
        for m in _NAMED.finditer(span):
            if m.group("top") is not None:
                current = ""  # wenet-lite --version: the top level's
            elif m.group("sub") is not None:
                current = m.group("sub")
            elif current:
                found.append((current, m.group("flag")))
    return found


def test_flags_named_in_help_texts_exist() -> None:
    """Every flag a help text names is a shown flag of the subcommand it belongs to."""
    import argparse

    bad = []
    for name, parser in SUBCOMMANDS.items():
        texts = [parser.usage or "", parser.description or ""]
        texts += [a.help for a in parser._actions if a.help and a.help != argparse.SUPPRESS]
        for text in texts:
            for sub, flag in flags_named(text, name):
                if flag not in _shown_flags(SUBCOMMANDS[sub]):
                    bad.append(f"{name}'s help names {sub} {flag}")
    assert not bad, bad
    # Negative control: a hidden or unknown flag is caught.
    assert flags_named("run `wenet-lite stream --model M --int8`", "export") == [
        ("stream", "--model"), ("stream", "--int8")]  # fmt: skip
    assert "--int8" not in _shown_flags(SUBCOMMANDS["stream"])


def test_out_always_takes_a_directory(tmp_path) -> None:
    """--out is where the output goes: a directory is taken by every subcommand, and one
    whose output is a single file writes it there under its default name."""
    from wenet_lite.cli.flags import in_dir

    parser = build_parser()
    d = str(tmp_path)
    cmvn = parser.parse_args(["compute-cmvn", "--config", "c", "--data", "x", "--out", d])
    assert cmvn.out == str(tmp_path / "cmvn.json")
    lm = parser.parse_args(["train-lm", "--text", "t", "--out", d + "/new/"])
    assert lm.out == str(tmp_path / "new" / "lm.json")
    wenet = parser.parse_args(["import-wenet", "w", "--out", d])
    assert wenet.out == str(tmp_path / "model.pt")
    named = parser.parse_args(["import-wenet", "w", "--out", str(tmp_path / "m.pt")])
    assert named.out == str(tmp_path / "m.pt")
    assert in_dir(d, "model.ts") == tmp_path / "model.ts"
    for name, parser_ in SUBCOMMANDS.items():
        for action in parser_._actions:
            if "--out" in action.option_strings:
                assert action.type is None or action.type(d), name
