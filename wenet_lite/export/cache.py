"""Exported graphs of in-memory models, kept on disk from one start to the next.

The onnxruntime and ExecuTorch engines of a model file export its graph when they start: about
25 s for the demo model with onnxruntime on a 2-core CPU, about two minutes for conformer_u2 in
ExecuTorch int8, and again at every start of ``serve --engine auto``. The graph depends only on
the model (its weights and the settings of its modules), the chunking, the export's options and
the software that exports it, so it is kept under a SHA-256 of all of them and the next start
reads it instead. The software's part is the versions of torch and the exporter's packages and
the source of wenet_lite itself: a changed model or export code never meets an old graph.

The folder: ``$WENET_LITE_CACHE``, else ``$XDG_CACHE_HOME/wenet_lite``, else
``~/.cache/wenet_lite``; ``WENET_LITE_CACHE=off`` keeps nothing. Files are written whole (a
temporary name renamed into place), so a run killed while writing leaves no half graph; one
that does not load anyway is rebuilt and replaced (:meth:`Cached.forget`), and the temporary
file a killed writer left is removed by the next write once it is a day old (a live writer's
never is). A folder that cannot
be written costs only the time: the graph is built as without a cache, with one warning.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeVar

import torch
from torch import nn

from wenet_lite.fileio import TEMPORARY_PREFIX, atomic_open

__all__ = [
    "CACHE_ENV", "Cached", "cache_dir", "cached_graph", "model_fingerprint", "open_cached",
]  # fmt: skip

CACHE_ENV = "WENET_LITE_CACHE"

_log = logging.getLogger(__name__)

T = TypeVar("T")

_PLAIN = (bool, int, float, str, tuple, type(None))


def cache_dir() -> Optional[Path]:
    """The cache folder, or None where ``$WENET_LITE_CACHE`` is ``off``."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "wenet_lite"


@functools.cache
def _source_digest() -> str:
    """SHA-256 of wenet_lite's own Python source, file names included."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _versions(packages: Iterable[str]) -> str:
    found = []
    for name in packages:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return " ".join(found)


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of what a model's exported graph can depend on: every module's class and plain
    settings (numbers, flags, strings: ``num_heads``, ``key_positions``, ``training``...) and
    every parameter's and buffer's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for name, module in model.named_modules():
        h.update(f"[{name}:{type(module).__module__}.{type(module).__qualname__}]".encode())
        for key, value in sorted(vars(module).items()):
            if not key.startswith("_") and isinstance(value, _PLAIN):
                h.update(f"{key}={value!r};".encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        h.update(f"<{name}:{flat.dtype}:{tuple(tensor.shape)}>".encode())
        h.update(memoryview(flat.view(torch.uint8).numpy()))
    return h.hexdigest()


@dataclass
class Cached:
    """A graph and where it is kept (``path`` None: not kept)."""

    data: bytes
    path: Optional[Path]
    reused: bool

    def forget(self) -> None:
        """Drop the kept file (a graph that did not load)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def cached_graph(
    kind: str, model: nn.Module, options: str, build: Callable[[], bytes],
    packages: Iterable[str] = (),
) -> Cached:  # fmt: skip
    """The graph ``build()`` makes of ``model``, from the cache when it holds one made of the
    same model with the same ``options`` (the chunking, the precision) by the same software
    (torch, ``packages``, wenet_lite's source); else built and kept.

    Args:
        kind: the engine's name, the file's suffix (``onnx``, ``pte``).
    """
    return _graph_at(_entry(kind, model, options, packages), build)


def _entry(kind: str, model: nn.Module, options: str, packages: Iterable[str]) -> Optional[Path]:
    """Where the cache keeps this graph (None: the cache is off)."""
    folder = cache_dir()
    if folder is None:
        return None
    h = hashlib.sha256()
    for part in (kind, options, torch.__version__, _versions(packages), _source_digest(),
                 model_fingerprint(model)):  # fmt: skip
        h.update(part.encode() + b"\0")
    return folder / "graphs" / f"{h.hexdigest()[:32]}.{kind}"


def _graph_at(path: Optional[Path], build: Callable[[], bytes]) -> Cached:
    """The graph kept at ``path``, else ``build()``'s, kept there (``path`` None: not kept)."""
    if path is None:
        return Cached(build(), None, reused=False)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        pass
    except OSError as e:
        _log.warning("the graph cache %s cannot be read (%s): exporting again", path, e)
    else:
        if data:
            _log.info("the exported graph is read from the cache: %s", path)
            return Cached(data, path, reused=True)
    data = build()
    try:
        with atomic_open(path, "wb") as f:  # a temporary name of its own for each writer
            f.write(data)
    except OSError as e:
        _log.warning(
            "the exported graph is not kept: %s is not writable (%s); set %s to another "
            "folder, or to 'off'", path.parent, e, CACHE_ENV,
        )  # fmt: skip
        return Cached(data, None, reused=False)
    _log.info("the exported graph is kept for the next start: %s", path)
    _sweep(path.parent)
    return Cached(data, path, reused=False)


STALE_SECONDS = 24 * 3600
"""a temporary file this old was left by a writer that was killed (an export takes minutes)"""


def _sweep(folder: Path) -> None:
    """Remove the temporary files (:func:`~wenet_lite.fileio.temporary_path`'s) in ``folder``
    older than :data:`STALE_SECONDS`: each writer's is a name of its own, so nothing else would
    ever remove a killed one's."""
    now = time.time()
    for stale in folder.glob(f"{TEMPORARY_PREFIX}*"):
        try:
            if now - stale.stat().st_mtime > STALE_SECONDS:
                stale.unlink()
        except OSError:  # gone meanwhile, or not ours to remove: the cache works without
            pass


def open_cached(
    kind: str, model: nn.Module, options: str, build: Callable[[], bytes],
    open_engine: Callable[[bytes], T], packages: Iterable[str] = (),
) -> T:  # fmt: skip
    """``open_engine`` of the graph :func:`cached_graph` gives; a kept graph that does not open
    (damaged on disk) is dropped, exported again and kept anew."""
    graph = _graph_at(_entry(kind, model, options, packages), build)  # the weights hashed once
    try:
        return open_engine(graph.data)
    except Exception as e:  # noqa: BLE001 - whatever the runtime raises for a damaged file
        if not graph.reused:
            raise
        _log.warning("the cached graph %s does not open (%s): exporting again", graph.path, e)
        graph.forget()
    return open_engine(_graph_at(graph.path, build).data)
