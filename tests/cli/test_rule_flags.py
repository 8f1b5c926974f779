"""The library's rule errors name fields; the CLI says the same in its flags."""

from __future__ import annotations

import pytest

from wenet_lite.cli.flags import rule_error
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, RuleError, check_rules


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
    ],
)  # fmt: skip
def test_fields_become_flags(make, library: str, cli: str) -> None:
    with pytest.raises(RuleError) as e:
        make()
    assert library in str(e.value) and "--" not in str(e.value)
    assert cli in str(rule_error(e.value))


def test_no_library_rule_names_a_flag() -> None:
    """The CLI's flags are the CLI's: the front door never writes one."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "wenet_lite" / "recognizer.py").read_text()
    messages = re.findall(r"RuleError\((.*?)\)\n", text, re.S)
    assert messages
    flags = [m for m in messages if re.search(r"--(engine|precision|device|threads|chunk|left)", m)]
    assert not flags
