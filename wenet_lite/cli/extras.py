"""Which optional extra brings which module: the core (``pip install wenet_lite``) transcribes,
streams and serves; the rest comes with an extra, named in a one-line error when it is used."""

from __future__ import annotations

from typing import Optional

__all__ = ["EXTRAS", "missing_extra"]

EXTRAS = {
    "lhotse": "train",
    "kaldialign": "train",
    "tensorboard": "train",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxscript": "onnx",
    "executorch": "executorch",
    "websockets": "serve",
    "silero_vad": "vad",
    "kenlm": "kenlm",
    "wetext": "itn",
}
"""top-level module -> the extra that installs it"""


def missing_extra(error: ImportError) -> Optional[str]:
    """One line naming the extra to install for a failed import of one of its modules (or
    the message of an ImportError that already says what to install); None for others."""
    if "pip install" in str(error):
        return str(error)
    top = (getattr(error, "name", None) or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return f"this needs {top}, which is not installed: pip install 'wenet_lite[{EXTRAS[top]}]'"
