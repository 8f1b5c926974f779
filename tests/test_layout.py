"""The package's layout rules, each a checker run over the package's source and, as a negative
control, over a planted violation that must be caught:

- layers: an ordered list, each module importing only its own layer and lower ones (imports
  are read from the source, module level and inside functions; ``TYPE_CHECKING`` blocks are
  left out: they never run); ``from wenet_lite import x`` is the module ``x``;
- no relative imports (also ruff's TID252);
- no import cycles;
- no reaching into another object's private members in the runtime, the server, the CLI and
  the front door;
- the server never branches on which protocol a client speaks: each protocol is one adapter
  class (serve/protocols.py) that the server calls.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "wenet_lite"

LAYERS: List[Tuple[str, ...]] = [
    ("wenet_lite.fileio", "wenet_lite.host"),  # atomic files; the CPU and the allocator
    ("wenet_lite.config",),
    ("wenet_lite.features",),
    ("wenet_lite.model",),
    ("wenet_lite.data",),
    ("wenet_lite.files",),  # checkpoints, model files, export directories
    ("wenet_lite.export",),
    ("wenet_lite.search",),  # log-probs in, hypotheses out
    ("wenet_lite.runtime",),  # engines, the streaming and offline recognisers, results
    ("wenet_lite.wenet",),  # WeNet's models and units converted, downloaded
    ("wenet_lite.evaluation",),  # decoding and scoring a set
    ("wenet_lite.train",),
    ("wenet_lite.recognizer",),  # the front door: open_recognizer
    ("wenet_lite.transcript", "wenet_lite.transcription"),
    ("wenet_lite.serve",),
    ("wenet_lite.cli",),
    ("wenet_lite", "wenet_lite.__main__"),
]
"""bottom up; a module belongs to the layer of its longest matching prefix"""

CLI_SUBCOMMANDS = ("wenet_lite.cli.serve", "wenet_lite.cli.transcribe", "wenet_lite.cli.decode",
                   "wenet_lite.cli.stream")  # fmt: skip
"""each subcommand's module reads the shared flags, not another subcommand's module"""

THIRD_PARTY = ("os", "sys", "argparse", "parser", "parser._subparsers", "portable_lib")
"""objects of other libraries whose private members are used where they offer no public way
(os._exit, argparse's subparser actions, ExecuTorch's thread-pool reset)"""
PRIVATE_CHECKED = ("runtime", "serve", "cli", "recognizer.py", "transcription.py", "transcript.py")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> Dict[str, str]:
    return {_module_name(p): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}


def _running(tree: ast.AST) -> Iterable[ast.AST]:
    """The nodes of ``tree`` that run (``if TYPE_CHECKING:`` blocks left out)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return (n for n in ast.walk(tree) if id(n) not in skipped)


def _imports(source: str, known: Set[str]) -> Set[str]:
    """The package's modules that ``source`` imports (``from P import x``: ``P.x`` when that
    is a module, else ``P``; the version string is no dependency)."""
    found = set()
    for node in _running(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif not (node.module == "wenet_lite" and alias.name == "__version__"):
                    found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in known}


def _graph(sources: Dict[str, str]) -> Dict[str, Set[str]]:
    known = set(sources)
    return {m: _imports(text, known) - {m} for m, text in sources.items()}


def _layer(module: str) -> Optional[int]:
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and p.count(".") > depth:
                best, depth = i, p.count(".")
    return best


def layer_violations(sources: Dict[str, str]) -> List[str]:
    broken = []
    for module, deps in sorted(_graph(sources).items()):
        mine = _layer(module)
        if mine is None:
            broken.append(f"{module} is in no layer")
            continue
        for dep in sorted(deps):
            theirs = _layer(dep)
            if theirs is not None and theirs > mine:
                broken.append(f"{module} (layer {mine}) imports {dep} (layer {theirs})")
            if module in CLI_SUBCOMMANDS and dep in CLI_SUBCOMMANDS:
                broken.append(f"{module} imports another subcommand, {dep}")
    return broken


def relative_imports(sources: Dict[str, str]) -> List[str]:
    return [
        f"{module}:{node.lineno}"
        for module, text in sorted(sources.items())
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]


def import_cycles(sources: Dict[str, str]) -> List[List[str]]:
    # Package __init__ modules only re-export their children: leave them out of cycles.
    packages = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph = {m: deps - packages for m, deps in _graph(sources).items()}
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
    return cycles


def foreign_private_uses(name: str, source: str) -> List[str]:
    """``x._name`` where x is not ``self``/``cls``: one object reaching into another's
    private members."""
    return [
        f"{name}:{node.lineno} {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and ast.unparse(node.value) not in ("self", "cls", *THIRD_PARTY)
    ]


def _protocol_names() -> Set[str]:
    """The ``name`` of each adapter class in serve/protocols.py."""
    tree = ast.parse((PACKAGE / "serve" / "protocols.py").read_text(encoding="utf-8"))
    names = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if (isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "name"
                    and isinstance(stmt.value, ast.Constant) and stmt.value.value):  # fmt: skip
                names.add(stmt.value.value)
    return names


def protocol_branches(name: str, source: str, protocols: Set[str]) -> List[str]:
    """Comparisons with a protocol's name or with anything named protocol, and isinstance
    tests against an adapter class: the server deciding by protocol instead of calling it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            texts = [ast.unparse(o) for o in operands]
            constants = {
                c.value for o in operands for c in ast.walk(o)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }  # fmt: skip
            if constants & protocols or any("protocol" in t.lower() for t in texts):
                found.append(f"{where} {ast.unparse(node)}")
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant):
            if node.value.value in protocols:
                found.append(f"{where} case {node.value.value!r}")
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance"
              and "Protocol" in ast.unparse(node.args[1])):  # fmt: skip
            found.append(f"{where} {ast.unparse(node)}")
    return found


# ---- the rules over the package ----


def test_layers() -> None:
    assert not layer_violations(_sources())


def test_no_relative_imports() -> None:
    assert not relative_imports(_sources())


def test_no_import_cycles() -> None:
    assert not import_cycles(_sources())


def test_no_reaching_into_private_members() -> None:
    found = []
    for entry in PRIVATE_CHECKED:
        path = PACKAGE / entry
        for p in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            found += foreign_private_uses(str(p.relative_to(PACKAGE)), p.read_text("utf-8"))
    assert not found


def test_the_server_does_not_branch_on_the_protocol() -> None:
    protocols = _protocol_names()
    assert protocols >= {"sherpa", "wenet"}
    found = []
    for path in sorted((PACKAGE / "serve").glob("*.py")):
        if path.name != "protocols.py":
            found += protocol_branches(path.name, path.read_text("utf-8"), protocols)
    assert not found


def test_every_module_is_in_a_layer_and_the_top_floor_is_small() -> None:
    assert all(_layer(m) is not None for m in _sources())
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 7, top


def test_search_imports_do_not_pull_the_streaming_stack() -> None:
    """`import wenet_lite.search` (and its search, options and LM modules) stays light: soxr,
    lhotse, the training code and the streaming runtime load only with what needs them."""
    code = (
        "import sys, wenet_lite.search, wenet_lite.search.ctc_search, wenet_lite.search.options, "
        "wenet_lite.search.lm, wenet_lite.runtime; print(sorted(m for m in ('soxr', 'lhotse', "
        "'wenet_lite.train', 'wenet_lite.runtime.streaming') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- negative controls: each rule catches a planted violation ----


def _planted(module: str, text: str) -> Dict[str, str]:
    sources = _sources()
    sources[module] = sources.get(module, "") + "\n" + text + "\n"
    return sources


def test_planted_evaluation_importing_the_recogniser_fails() -> None:
    sources = _planted(
        "wenet_lite.evaluation.recognize",
        "def f():\n    from wenet_lite.recognizer import open_recognizer",
    )
    assert any("imports wenet_lite.recognizer" in v for v in layer_violations(sources))


def test_planted_from_package_import_module_in_search_fails() -> None:
    sources = _planted("wenet_lite.search.lm", "from wenet_lite import transcription")
    assert any("imports wenet_lite.transcription" in v for v in layer_violations(sources))


def test_planted_runtime_importing_the_wenet_importer_fails() -> None:
    sources = _planted("wenet_lite.runtime.engines", "import wenet_lite.wenet.convert")
    assert any("imports wenet_lite.wenet.convert" in v for v in layer_violations(sources))


def test_planted_type_checking_import_is_not_a_dependency() -> None:
    text = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import wenet_lite.cli"
    assert not layer_violations(_planted("wenet_lite.model.ctc", text))


def test_planted_subcommand_importing_another_fails() -> None:
    sources = _planted("wenet_lite.cli.serve", "from wenet_lite.cli.transcribe import x")
    assert any("another subcommand" in v for v in layer_violations(sources))


def test_planted_relative_import_fails() -> None:
    sources = _planted("wenet_lite.search.lm", "from .options import SearchOptions")
    assert [v.split(":")[0] for v in relative_imports(sources)] == ["wenet_lite.search.lm"]


def test_planted_cycle_fails() -> None:
    sources = _planted("wenet_lite.fileio", "import wenet_lite.config")
    assert import_cycles(sources)


def test_planted_private_access_in_the_protocols_fails() -> None:
    text = "def peek(stream):\n    return stream._cursor"
    assert foreign_private_uses("serve/protocols.py", text) == [
        "serve/protocols.py:2 stream._cursor"
    ]
    assert "serve" in PRIVATE_CHECKED  # protocols.py is among the files checked


def test_planted_protocol_branches_fail() -> None:
    protocols = _protocol_names()
    for text in (
        "if c.protocol.name == 'sherpa':\n    pass",
        "if 'wenet' == kind:\n    pass",  # the name on the left
        "if kind in ('sherpa', 'other'):\n    pass",
        "ok = isinstance(c.protocol, WenetProtocol)",
        "match kind:\n    case 'wenet':\n        pass",
        "if type(p) is SherpaProtocol:\n    pass",
    ):
        assert protocol_branches("server.py", text, protocols), text
    assert not protocol_branches("server.py", "if code == 1000:\n    pass", protocols)
