import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator, List

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = (
    REPO / "tools",
    REPO / "benchmarks",
    REPO / "recipes" / "common",
    REPO / "recipes" / "synthetic" / "local",
)


@pytest.fixture(scope="module")
def load_tool() -> Iterator[Callable[[str], ModuleType]]:
    """Import a script of tools/, benchmarks/ or a recipe's folder as a module
    (``load_tool("results_table")``)."""
    loaded: List[str] = []

    def load(name: str) -> ModuleType:
        path = next(f / f"{name}.py" for f in FOLDERS if (f / f"{name}.py").is_file())
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded.append(name)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)
