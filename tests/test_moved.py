"""Modules that moved keep their old names for one release: they import, warn, and hand out
the very objects of the new module (renamed classes under their old names too)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import wenet_lite


@pytest.mark.parametrize("old, new", sorted(wenet_lite.MOVED.items()))
def test_old_module_names_import_with_a_warning(old: str, new: str) -> None:
    code = (
        "import warnings, importlib\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        "assert any(issubclass(x.category, DeprecationWarning) and "
        f"{new!r} in str(x.message) and {wenet_lite.MOVED_UNTIL!r} in str(x.message) "
        "for x in w), [str(x.message) for x in w]\n"
        "names = getattr(new, '__all__', [])\n"
        "assert names and all(getattr(old, n) is getattr(new, n) for n in names)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_renamed_names_and_the_public_door() -> None:
    from wenet_lite.files.export_dir import ExportDir, read_export_dir

    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("wenet_lite.bundle")
    assert old.Bundle is ExportDir and old.read_bundle is read_export_dir
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018
    from wenet_lite import Chunking, EngineSpec, RuleError, open_recognizer, transcribe

    assert callable(open_recognizer) and callable(transcribe) and EngineSpec and Chunking
    assert issubclass(RuleError, ValueError)


def test_an_unknown_module_is_still_missing() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("wenet_lite.no_such_module")


def test_the_changelog_names_each_old_module_and_its_removal() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
    deprecated = text[text.index("### Deprecated") :].split("\n### ")[0]
    assert f"removed in {wenet_lite.MOVED_UNTIL}" in deprecated
    for old in wenet_lite.MOVED:
        assert f"`{old[len('wenet_lite') :]}`" in deprecated or f"`{old}`" in deprecated, old
