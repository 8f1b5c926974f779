"""Decoding: CTC greedy and prefix beam search (one-shot and streaming), WER/CER scoring."""

from wenet_lite.decode.ctc_search import (
    Hypothesis,
    StreamingGreedySearch,
    StreamingPrefixBeamSearch,
    ctc_greedy_search,
    ctc_prefix_beam_search,
    frames_to_seconds,
)

__all__ = [
    "Hypothesis",
    "StreamingGreedySearch",
    "StreamingPrefixBeamSearch",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "frames_to_seconds",
]
