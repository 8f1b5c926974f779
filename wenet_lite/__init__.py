"""wenet_lite: a streaming Conformer CTC speech-recognition toolkit.

Shapes: one legend for the whole package. Docstrings and the shape comments after views,
transposes and concats (``# (B, H, C, M+C)``) use these letters, each in one meaning only:

    B    batch: utterances, or streams decoded together
    N    audio samples; Ch audio channels
    T_in input (fbank) frames; F fbank bins (``features.num_mel_bins``)
    W    input frames of one streaming chunk's window: (C-1) * rate + right context + 1
    T    encoder frames, after subsampling by ``rate``
    C    encoder frames of one chunk (the queries of a streaming step)
    M    cached encoder frames of the left context; a chunk's keys are the M+C frames
    P    distinct relative distances of a window of C queries over M+C keys: M+2C-1
    D    model dim; H attention heads; d_k = D / H, the head dim
    L    layers (Conformer blocks); K the depthwise conv's kernel
    V    vocabulary (id 0 is the CTC blank); U target tokens of an utterance
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

__version__ = "0.1.0"
__all__ = [
    "Chunking",
    "EngineSpec",
    "RuleError",
    "Transcriber",
    "Transcript",
    "__version__",
    "load_model",
    "open_recognizer",
    "transcribe",
]

_WHERE = {
    "Chunking": "wenet_lite.model.chunking",
    "EngineSpec": "wenet_lite.recognizer",
    "RuleError": "wenet_lite.recognizer",
    "Transcriber": "wenet_lite.transcription",
    "Transcript": "wenet_lite.transcript",
    "load_model": "wenet_lite.files.model_file",
    "open_recognizer": "wenet_lite.recognizer",
    "transcribe": "wenet_lite.transcription",
}

if TYPE_CHECKING:
    from wenet_lite.files.model_file import load_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, RuleError, open_recognizer
    from wenet_lite.transcript import Transcript
    from wenet_lite.transcription import Transcriber, transcribe


def __getattr__(name: str) -> Any:
    # Lazy, so `import wenet_lite.config` does not pull in sentencepiece and lhotse.
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'wenet_lite' has no attribute {name!r}")


# ---- modules that moved: their old names still import, with a DeprecationWarning ----

MOVED: Dict[str, str] = {
    "wenet_lite.bundle": "wenet_lite.files.export_dir",
    "wenet_lite.checkpoint": "wenet_lite.files.checkpoint",
    "wenet_lite.cpu": "wenet_lite.host.cpu",
    "wenet_lite.data.wenet_units": "wenet_lite.wenet.units",
    "wenet_lite.evaluation.recognize": "wenet_lite.evaluation.decode_set",
    "wenet_lite.extras": "wenet_lite.cli.extras",
    "wenet_lite.malloc": "wenet_lite.host.malloc",
    "wenet_lite.model_io": "wenet_lite.files.model_file",
    "wenet_lite.wenet_download": "wenet_lite.wenet.download",
    "wenet_lite.wenet_import": "wenet_lite.wenet.convert",
    "wenet_lite.wenet_keys": "wenet_lite.wenet.keys",
}
"""old module -> where it lives now (kept for one release; the CHANGELOG lists them)"""
MOVED_UNTIL = "0.2.0"
"""the release that removes the old module names"""
RENAMED: Dict[str, str] = {
    "Bundle": "ExportDir",
    "BUNDLE_FILE": "RECORD_FILE",
    "BUNDLE_VERSION": "RECORD_VERSION",
    "read_bundle": "read_export_dir",
    "write_bundle": "write_export_dir",
}
"""old name -> new name, in the moved modules"""


class _MovedModule(importlib.abc.Loader):
    """Loads an old module name as a forwarder to the module's new home."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None  # a plain module, filled by exec_module

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(
            f"{self.old} moved to {self.new}; the old name goes in {MOVED_UNTIL}",
            DeprecationWarning,
            stacklevel=2,
        )
        target = importlib.import_module(self.new)

        def forward(name: str) -> Any:
            return getattr(target, RENAMED.get(name, name))

        module.__getattr__ = forward  # type: ignore[method-assign]
        module.__all__ = list(getattr(target, "__all__", ()))
        module.__doc__ = f"Moved to {self.new}."


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModule(fullname, MOVED[fullname]))


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
