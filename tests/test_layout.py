"""The package's layers: which modules may import which, and no import cycles.

Imports are read from the source (module level and inside functions; ``TYPE_CHECKING`` blocks
are left out: they never run), so a lazy import that breaks a layer fails here too.
"""

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "wenet_lite"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "wenet_lite" or m.startswith("wenet_lite.")}


def _graph() -> Dict[str, Set[str]]:
    graph = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}
    known = set(graph)
    # `from wenet_lite.model import X` means the package module; keep only known modules.
    return {m: {d for d in deps if d in known and d != m} for m, deps in graph.items()}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_layers() -> None:
    graph = _graph()
    run = ["wenet_lite.search", "wenet_lite.runtime", "wenet_lite.evaluation"]
    rules = {  # importer package -> packages it must not import
        "wenet_lite.checkpoint": ["wenet_lite.model", "wenet_lite.data", "wenet_lite.train",
                                  *run, "wenet_lite.export", "wenet_lite.features"],
        "wenet_lite.model": ["wenet_lite.data", "wenet_lite.train", *run,
                             "wenet_lite.export", "wenet_lite.model_io", "wenet_lite.cli"],
        "wenet_lite.features": ["wenet_lite.model", "wenet_lite.data", "wenet_lite.train",
                                *run, "wenet_lite.export"],
        # The runtime's layers, bottom up: the search (log-probs in, hypotheses out), the
        # streaming runtime (engines, recogniser, streams, results), evaluation of a set.
        "wenet_lite.search": ["wenet_lite.runtime", "wenet_lite.evaluation", "wenet_lite.train",
                              "wenet_lite.export", "wenet_lite.cli", "wenet_lite.serve",
                              "wenet_lite.features"],
        "wenet_lite.runtime": ["wenet_lite.evaluation", "wenet_lite.train", "wenet_lite.export",
                               "wenet_lite.cli", "wenet_lite.serve", "wenet_lite.recognizer",
                               "wenet_lite.transcription"],
        "wenet_lite.evaluation": ["wenet_lite.train", "wenet_lite.export", "wenet_lite.cli",
                                  "wenet_lite.serve", "wenet_lite.transcription"],
        "wenet_lite.serve": ["wenet_lite.train", "wenet_lite.export", "wenet_lite.cli",
                             "wenet_lite.evaluation"],
        "wenet_lite.export": ["wenet_lite.train", *run, "wenet_lite.cli"],
        "wenet_lite.data": ["wenet_lite.train", *run, "wenet_lite.export"],
        "wenet_lite.model_io": ["wenet_lite.train", *run, "wenet_lite.export"],
        "wenet_lite.bundle": ["wenet_lite.train", *run, "wenet_lite.export",
                              "wenet_lite.model_io", "wenet_lite.cli", "wenet_lite.serve"],
        # Opening recognisers and transcribing sit above the runtime and export, below the CLI.
        "wenet_lite.recognizer": ["wenet_lite.train", "wenet_lite.cli", "wenet_lite.serve",
                                  "wenet_lite.transcription", "wenet_lite.evaluation"],
        "wenet_lite.transcription": ["wenet_lite.train", "wenet_lite.cli", "wenet_lite.serve",
                                     "wenet_lite.evaluation"],
        # Each subcommand's module reads the shared flags, not another subcommand's module.
        "wenet_lite.cli.serve": ["wenet_lite.cli.decode", "wenet_lite.cli.transcribe"],
        "wenet_lite.cli.transcribe": ["wenet_lite.cli.decode", "wenet_lite.cli.serve"],
        "wenet_lite.wenet_import": ["wenet_lite.train", *run, "wenet_lite.export",
                                    "wenet_lite.cli", "wenet_lite.serve"],
        "wenet_lite.wenet_download": ["wenet_lite.model", "wenet_lite.data", "wenet_lite.train",
                                      *run, "wenet_lite.export", "wenet_lite.cli",
                                      "wenet_lite.serve", "wenet_lite.wenet_import"],
    }  # fmt: skip
    broken = [
        f"{module} imports {dep}"
        for module, deps in graph.items()
        for importer, banned in rules.items()
        if _in(module, importer)
        for dep in deps
        if any(_in(dep, b) for b in banned)
    ]
    assert not broken, broken


def test_no_import_cycles() -> None:
    graph = _graph()
    # Package __init__ modules only re-export their children: leave them out of cycles.
    packages = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph = {m: deps - packages for m, deps in graph.items()}
    cycles: List[List[str]] = []
    done: Set[str] = set()

    def visit(module: str, path: List[str]) -> None:
        if module in path:
            cycles.append(path[path.index(module) :] + [module])
            return
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not cycles, cycles


def test_search_imports_do_not_pull_the_streaming_stack() -> None:
    """`import wenet_lite.search` (and its search, options and LM modules) stays light: soxr,
    lhotse, the training code and the streaming runtime load only with what needs them."""
    import subprocess
    import sys

    code = (
        "import sys, wenet_lite.search, wenet_lite.search.ctc_search, wenet_lite.search.options, "
        "wenet_lite.search.lm, wenet_lite.runtime; print(sorted(m for m in ('soxr', 'lhotse', "
        "'wenet_lite.train', 'wenet_lite.runtime.streaming') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _foreign_private_uses(path: Path) -> List[str]:
    """``x._name`` where x is not ``self``/``cls``: one object reaching into another's
    private members."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.name}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and ast.unparse(node.value) not in ("self", "cls", "os", "sys")  # os._exit
    ]


def test_the_recogniser_and_its_streams_use_each_others_public_members() -> None:
    assert not _foreign_private_uses(PACKAGE / "runtime" / "streaming.py")
    assert not _foreign_private_uses(PACKAGE / "serve" / "server.py")


def test_the_server_does_not_branch_on_the_protocol() -> None:
    """Each protocol is one adapter class (serve/protocols.py); the server calls it."""
    import re

    for path in (PACKAGE / "serve").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"protocol\s*[!=]=", text), path.name
        assert not re.search(r"""[!=]=\s*["'](sherpa|wenet)["']""", text), path.name
