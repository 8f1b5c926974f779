"""The search: CTC log-probabilities in, hypotheses out.

Greedy and prefix beam search (one-shot and streaming), the word n-gram LM and its ARPA files,
the hotword graph, attention rescoring, and the search options that choose among them. Nothing
here reads audio or runs the encoder.

Names are imported on first use, so ``import wenet_lite.search`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "ContextGraph",
    "Hypothesis",
    "SearchOptions",
    "StreamingGreedySearch",
    "StreamingPrefixBeamSearch",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "frames_to_seconds",
]

_WHERE = {
    "ContextGraph": "wenet_lite.search.context",
    "Hypothesis": "wenet_lite.search.ctc_search",
    "SearchOptions": "wenet_lite.search.options",
    "StreamingGreedySearch": "wenet_lite.search.ctc_search",
    "StreamingPrefixBeamSearch": "wenet_lite.search.ctc_search",
    "ctc_greedy_search": "wenet_lite.search.ctc_search",
    "ctc_prefix_beam_search": "wenet_lite.search.ctc_search",
    "frames_to_seconds": "wenet_lite.search.ctc_search",
}

if TYPE_CHECKING:
    from wenet_lite.search.context import ContextGraph
    from wenet_lite.search.ctc_search import (
        Hypothesis,
        StreamingGreedySearch,
        StreamingPrefixBeamSearch,
        ctc_greedy_search,
        ctc_prefix_beam_search,
        frames_to_seconds,
    )
    from wenet_lite.search.options import SearchOptions


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'wenet_lite.search' has no attribute {name!r}")
