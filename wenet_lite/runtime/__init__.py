"""The runtime: engines that run the encoder chunk by chunk, the streaming recogniser and its
streams (features, search, endpointing, results), the offline recogniser of whole utterances,
long audio in bounded memory, and the position tables the torch engine caches.

Open a recogniser with :func:`wenet_lite.recognizer.open_recognizer`; the classes are here.
Names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Chunking",
    "DecodeOptions",
    "EndpointConfig",
    "OfflineRecognizer",
    "Result",
    "Stream",
    "StreamCursor",
    "StreamingRecognizer",
    "Word",
]

_WHERE = {
    "Chunking": "wenet_lite.model.chunking",
    "DecodeOptions": "wenet_lite.runtime.utterance",
    "EndpointConfig": "wenet_lite.runtime.endpoint",
    "OfflineRecognizer": "wenet_lite.runtime.offline",
    "Result": "wenet_lite.runtime.result",
    "Stream": "wenet_lite.runtime.streaming",
    "StreamCursor": "wenet_lite.runtime.cursor",
    "StreamingRecognizer": "wenet_lite.runtime.streaming",
    "Word": "wenet_lite.runtime.result",
}

if TYPE_CHECKING:
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.runtime.cursor import StreamCursor
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.runtime.offline import OfflineRecognizer
    from wenet_lite.runtime.result import Result, Word
    from wenet_lite.runtime.streaming import Stream, StreamingRecognizer
    from wenet_lite.runtime.utterance import DecodeOptions


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'wenet_lite.runtime' has no attribute {name!r}")
