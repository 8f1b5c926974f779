"""wenet_lite: a streaming Conformer CTC speech-recognition toolkit."""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["load_model", "__version__"]

if TYPE_CHECKING:
    from wenet_lite.model_io import load_model


def __getattr__(name: str) -> Any:
    # Lazy, so `import wenet_lite.config` does not pull in sentencepiece and lhotse.
    if name == "load_model":
        from wenet_lite.model_io import load_model

        return load_model
    raise AttributeError(f"module 'wenet_lite' has no attribute {name!r}")
