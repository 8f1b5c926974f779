"""The package's layout rules, each a checker run over the package's source and, as a negative
control, over a planted violation that must be caught:

- layers: an ordered list, each module importing only its own layer and lower ones (imports
  are read from the source, module level and inside functions, ``importlib.import_module``
  and the lazy name tables too: a string that names a module of the package is a dependency;
  only the body of an ``if TYPE_CHECKING:`` is left out: it never runs); ``from wenet_lite
  import x`` is the module ``x``; inside ``runtime/`` and ``serve/`` the modules have layers
  of their own;
- no relative imports (also ruff's TID252);
- no import cycles;
- no reaching into another object's private members anywhere in the package (``x._name``
  and ``from m import _name``), except members of classes the same module defines;
- the server never branches on which protocol a client speaks or what its peer is: each
  protocol is one adapter class (serve/protocols.py) that the server calls, each peer one
  object with the same attributes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[1] / "wenet_lite"

LAYERS: List[Tuple[str, ...]] = [
    ("wenet_lite.fileio", "wenet_lite.host", "wenet_lite.weights"),  # files; the CPU; weights
    ("wenet_lite.config",),
    ("wenet_lite.features",),
    ("wenet_lite.punct", "wenet_lite.vad", "wenet_lite.itn"),  # text stages; speech regions
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
    ("wenet_lite.transcript", "wenet_lite.speakers", "wenet_lite.transcription"),  # and who spoke
    ("wenet_lite.serve",),
    ("wenet_lite.cli",),
    ("wenet_lite", "wenet_lite.__main__"),
]
"""bottom up; a module belongs to the layer of its longest matching prefix"""

SUBLAYERS: Dict[str, List[Tuple[str, ...]]] = {
    "wenet_lite.runtime": [
        ("positions", "result", "endpoint", "long_audio", "segments"),
        ("engines",),
        ("utterance",),
        ("offline", "streaming"),
        ("cursor",),
    ],
    "wenet_lite.serve": [
        (
            "options",
            "http_front",
            "workers",
            "protocols",
            "upload_form",
            "uploads",
            "realtime_session",
            "realtime_turns",
        ),
        ("gate",),
        ("connection",),
        ("decode_thread",),
        ("hub",),
        ("openai_api", "realtime"),
        ("routes", "sessions"),
        ("server",),
    ],
}
"""bottom up, inside a package: its modules (by their last name) import their own sub-layer and
lower ones"""

CLI_SUBCOMMANDS = ("wenet_lite.cli.serve", "wenet_lite.cli.transcribe", "wenet_lite.cli.decode",
                   "wenet_lite.cli.stream")  # fmt: skip
"""each subcommand's module reads the shared flags, not another subcommand's module"""

THIRD_PARTY = ("os", "sys", "argparse", "parser", "parser._subparsers", "portable_lib", "torch",
               "super()")  # fmt: skip
"""objects of other libraries whose private members are used where they offer no public way
(os._exit, argparse's subparser actions, ExecuTorch's thread-pool reset, torch._int_mm, a
torch method overridden)"""
PUBLIC_UNDERSCORED = ("_replace", "_asdict", "_fields", "_make")
"""NamedTuple's public methods, named with an underscore so as not to clash with fields"""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> Dict[str, str]:
    return {_module_name(p): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}


def _running(tree: ast.AST) -> Iterable[ast.AST]:
    """The nodes of ``tree`` that run: all but the body of ``if TYPE_CHECKING:`` (its test
    exactly that; its ``else`` runs)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return (n for n in ast.walk(tree) if id(n) not in skipped)


def _imports(source: str, known: Set[str], typed: bool = False) -> Set[str]:
    """The package's modules that ``source`` imports (``from P import x``: ``P.x`` when that
    is a module, else ``P``; the version string is no dependency); ``typed``: the imports
    for type checking only too."""
    found = set()
    tree = ast.parse(source)
    names = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call)
             and ast.unparse(n.func).endswith("getLogger") for a in n.args}  # fmt: skip
    for node in ast.walk(tree) if typed else _running(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif not (node.module == "wenet_lite" and alias.name == "__version__"):
                    found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value != "wenet_lite" and id(node) not in names):  # fmt: skip
            found.add(node.value)  # importlib.import_module("wenet_lite.x"), a lazy table
    return {m for m in found if m in known}


def _graph(sources: Dict[str, str], typed: bool = False) -> Dict[str, Set[str]]:
    known = set(sources)
    return {m: _imports(text, known, typed) - {m} for m, text in sources.items()}


def _sublayer(module: str) -> Optional[Tuple[str, int]]:
    """(package, sub-layer) of a module of a package with sub-layers."""
    package, _, name = module.rpartition(".")
    for i, names in enumerate(SUBLAYERS.get(package, [])):
        if name in names:
            return package, i
    return None


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
            inner, inner_dep = _sublayer(module), _sublayer(dep)
            if inner and inner_dep and inner[0] == inner_dep[0] and inner_dep[1] > inner[1]:
                broken.append(f"{module} (sub-layer {inner[1]}) imports {dep} (sub-layer "
                              f"{inner_dep[1]})")  # fmt: skip
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
    """Cycles of imports, those for type checking only included (a type that needs its user
    is a circle all the same)."""
    # Package __init__ modules only re-export their children: leave them out of cycles.
    packages = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph = {m: deps - packages for m, deps in _graph(sources, typed=True).items()}
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


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_private_members(tree: ast.AST) -> Set[str]:
    """The private members of the classes a module defines (methods, class attributes and
    fields, ``self._x`` assignments): the module's own code may use them on any instance."""
    own = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            elif isinstance(node, ast.Assign):
                own.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
    return {n for n in own if _private(n)}


def foreign_private_uses(name: str, source: str) -> List[str]:
    """``x._name`` where x is not ``self``/``cls`` and ``_name`` is no member of a class of
    this module, and ``from m import _name``: code reaching into another's private members."""
    tree = ast.parse(source)
    own = _own_private_members(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and node.attr not in own and node.attr not in PUBLIC_UNDERSCORED
                and ast.unparse(node.value) not in ("self", "cls", *THIRD_PARTY)):  # fmt: skip
            found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wenet_lite"):
            found += [f"{name}:{node.lineno} from {node.module} import {a.name}"
                      for a in node.names if _private(a.name)]  # fmt: skip
    return found


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


def _peer_and_protocol_classes() -> Set[str]:
    """The classes of serve/ that are a protocol adapter (a subclass of ``Protocol``, at any
    depth) or a peer (a class with the Peer interface's ``unsent`` and ``abort``, or a
    ``remote_address``)."""
    bases: Dict[str, List[str]] = {}
    peers = set()
    for path in sorted((PACKAGE / "serve").glob("*.py")):
        for cls in (n for n in ast.walk(ast.parse(path.read_text("utf-8")))
                    if isinstance(n, ast.ClassDef)):  # fmt: skip
            bases[cls.name] = [ast.unparse(b) for b in cls.bases]
            methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
            if "remote_address" in ast.unparse(cls) or {"unsent", "abort"} <= methods:
                peers.add(cls.name)
    adapters = {"Protocol"}
    while True:
        more = {c for c, b in bases.items() if set(b) & adapters} - adapters
        if not more:
            return adapters | peers
        adapters |= more


def protocol_branches(name: str, source: str, protocols: Set[str],
                      classes: Set[str] = frozenset()) -> List[str]:  # fmt: skip
    """Comparisons with a protocol's name or with anything named protocol, and isinstance or
    type tests against an adapter or peer class (``classes``) or anything named so, or of a
    peer or protocol whatever the class (it may be passed in): the server deciding by
    protocol or peer instead of calling it."""
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
            typed_peer = any(t.startswith("type(") and "peer" in t.lower() for t in texts)
            if constants & protocols or typed_peer or any("protocol" in t.lower() for t in texts):
                found.append(f"{where} {ast.unparse(node)}")
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant):
            if node.value.value in protocols:
                found.append(f"{where} case {node.value.value!r}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass"):
            tested = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            tested |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            subject = ast.unparse(node.args[0]).lower()
            if (tested & classes or "Protocol" in ast.unparse(node.args[1])
                    or "peer" in subject or "protocol" in subject):  # fmt: skip
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
    for p in sorted(PACKAGE.rglob("*.py")):
        found += foreign_private_uses(str(p.relative_to(PACKAGE)), p.read_text("utf-8"))
    assert not found


def test_the_server_does_not_branch_on_the_protocol() -> None:
    protocols, classes = _protocol_names(), _peer_and_protocol_classes()
    assert protocols >= {"sherpa", "wenet"}
    assert {"RequestPeer", "RequestProtocol", "WebSocketPeer"} <= classes
    found = []
    for path in sorted((PACKAGE / "serve").glob("*.py")):
        if path.name != "protocols.py":
            found += protocol_branches(path.name, path.read_text("utf-8"), protocols, classes)
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
        "wenet_lite.evaluation.decode_set",
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
    sources = _planted("wenet_lite.fileio", "import wenet_lite.config.loading")
    assert import_cycles(sources)


def test_planted_type_only_cycle_fails() -> None:
    text = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import wenet_lite.config.loading"
    )
    assert not layer_violations(_planted("wenet_lite.fileio", text))  # no dependency at run time
    assert import_cycles(_planted("wenet_lite.fileio", text))  # but a circle of the types


def test_planted_private_access_in_the_protocols_fails() -> None:
    text = "def peek(stream):\n    return stream._cursor"
    assert foreign_private_uses("serve/protocols.py", text) == [
        "serve/protocols.py:2 stream._cursor"
    ]


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


def test_planted_import_in_the_else_of_type_checking_fails() -> None:
    for text in ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n"
                 "    import wenet_lite.cli",
                 "from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n"
                 "    import wenet_lite.cli",
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING or True:\n"
                 "    import wenet_lite.cli"):  # fmt: skip
        violations = layer_violations(_planted("wenet_lite.model.ctc", text))
        assert any("imports wenet_lite.cli" in v for v in violations), text


def test_planted_dynamic_imports_fail() -> None:
    text = "import importlib\nserve = importlib.import_module('wenet_lite.serve.server')"
    violations = layer_violations(_planted("wenet_lite.model.ctc", text))
    assert any("imports wenet_lite.serve.server" in v for v in violations)
    text = "_WHERE = {'train': 'wenet_lite.train.trainer'}"  # a lazy table
    violations = layer_violations(_planted("wenet_lite.search", text))
    assert any("wenet_lite.search (layer 8) imports wenet_lite.train.trainer" in v
               for v in violations)  # fmt: skip


def test_planted_import_up_inside_a_package_fails() -> None:
    text = "def f():\n    from wenet_lite.runtime.offline import OfflineRecognizer"
    violations = layer_violations(_planted("wenet_lite.runtime.endpoint", text))
    assert any("runtime.endpoint (sub-layer 0) imports wenet_lite.runtime.offline" in v
               for v in violations)  # fmt: skip
    text = "from wenet_lite.serve.server import Server"
    assert layer_violations(_planted("wenet_lite.serve.protocols", text))


def test_planted_private_imports_and_uses_anywhere_fail() -> None:
    text = "from wenet_lite.features.fbank import _private_helper"
    assert foreign_private_uses("features/stream_fbank.py", text) == [
        "features/stream_fbank.py:1 from wenet_lite.features.fbank import _private_helper"
    ]
    text = "class Own:\n    _mine = 1\n\ndef f(other, x):\n    return other._mine + x._theirs"
    assert foreign_private_uses("data/dataset.py", text) == ["data/dataset.py:5 x._theirs"]
    assert not foreign_private_uses("data/dataset.py", "b = batch._replace(ids=[])")


def test_planted_branch_on_a_peer_fails_whatever_its_name() -> None:
    protocols, classes = _protocol_names(), _peer_and_protocol_classes()
    for text in ("if isinstance(c.peer, RequestPeer):\n    pass",
                 "ok = isinstance(c.protocol, (str, RequestProtocol))",
                 "def f(c, kind):\n    return isinstance(c.peer, kind)",  # the class passed in
                 "ok = type(peer) is kind", "ok = isinstance(self.peer, cls)"):  # fmt: skip
        assert protocol_branches("server.py", text, protocols, classes), text
    assert not protocol_branches("server.py", "ok = isinstance(a, Boundary)", protocols, classes)
