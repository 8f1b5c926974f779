"""Decoding: CTC greedy and prefix beam search (one-shot and streaming), WER/CER scoring,
streaming recognition with endpointing, and batch decoding of test sets (``recognize``).

Names are imported on first use, so ``import wenet_lite.decode.ctc_search`` (or the word LM,
or the options) does not pull in the streaming stack (soxr, the online fbank) or lhotse.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Chunking",
    "DecodeOptions",
    "EndpointConfig",
    "Hypothesis",
    "Result",
    "SearchOptions",
    "Stream",
    "StreamingGreedySearch",
    "StreamingPrefixBeamSearch",
    "StreamingRecognizer",
    "Word",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "frames_to_seconds",
]

_WHERE = {
    "Chunking": "wenet_lite.model.chunking",
    "DecodeOptions": "wenet_lite.decode.utterance",
    "EndpointConfig": "wenet_lite.decode.endpoint",
    "Hypothesis": "wenet_lite.decode.ctc_search",
    "Result": "wenet_lite.decode.result",
    "SearchOptions": "wenet_lite.decode.options",
    "Stream": "wenet_lite.decode.streaming",
    "StreamingGreedySearch": "wenet_lite.decode.ctc_search",
    "StreamingPrefixBeamSearch": "wenet_lite.decode.ctc_search",
    "StreamingRecognizer": "wenet_lite.decode.streaming",
    "Word": "wenet_lite.decode.result",
    "ctc_greedy_search": "wenet_lite.decode.ctc_search",
    "ctc_prefix_beam_search": "wenet_lite.decode.ctc_search",
    "frames_to_seconds": "wenet_lite.decode.ctc_search",
}

if TYPE_CHECKING:
    from wenet_lite.decode.ctc_search import (
        Hypothesis,
        StreamingGreedySearch,
        StreamingPrefixBeamSearch,
        ctc_greedy_search,
        ctc_prefix_beam_search,
        frames_to_seconds,
    )
    from wenet_lite.decode.endpoint import EndpointConfig
    from wenet_lite.decode.options import SearchOptions
    from wenet_lite.decode.result import Result, Word
    from wenet_lite.decode.streaming import Stream, StreamingRecognizer
    from wenet_lite.decode.utterance import DecodeOptions
    from wenet_lite.model.chunking import Chunking


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'wenet_lite.decode' has no attribute {name!r}")
