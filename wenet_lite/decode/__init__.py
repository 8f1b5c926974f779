"""Decoding: CTC greedy and prefix beam search (one-shot and streaming), WER/CER scoring,
streaming recognition with endpointing, and batch decoding of test sets (``recognize``)."""

from wenet_lite.decode.ctc_search import (
    Hypothesis,
    StreamingGreedySearch,
    StreamingPrefixBeamSearch,
    ctc_greedy_search,
    ctc_prefix_beam_search,
    frames_to_seconds,
)
from wenet_lite.decode.endpoint import EndpointConfig
from wenet_lite.decode.result import Result, Word
from wenet_lite.decode.streaming import Stream, StreamingRecognizer

__all__ = [
    "EndpointConfig",
    "Hypothesis",
    "Result",
    "Stream",
    "StreamingGreedySearch",
    "StreamingPrefixBeamSearch",
    "StreamingRecognizer",
    "Word",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "frames_to_seconds",
]
