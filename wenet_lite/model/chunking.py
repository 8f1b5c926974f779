"""Chunk settings of a decode, a stream or an export, and the one check of whether a model can
run with them.

Sizes count encoder frames (after subsampling): 16 frames are 640 ms for 10 ms fbank frames
subsampled by 4.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from wenet_lite.config import EncoderConfig

__all__ = ["Chunking", "check_chunking"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunking:
    """Which keys each query sees: its chunk of ``chunk_size`` frames and ``left_chunks`` chunks
    before it (-1: all history). ``chunk_size`` 0 is full context (whole utterances)."""

    chunk_size: int = 0
    left_chunks: int = -1

    def __post_init__(self) -> None:
        if self.chunk_size < 0:
            raise ValueError(f"chunk size must be >= 0 (0: full context), got {self.chunk_size}")
        if self.left_chunks < -1:
            raise ValueError(
                f"left chunks must be -1 (all history) or >= 0, got {self.left_chunks}"
            )
        if self.chunk_size == 0 and self.left_chunks != -1:
            raise ValueError(
                f"left chunks ({self.left_chunks}) need chunks: full context (chunk size 0) "
                "sees the whole utterance; give a chunk size or left chunks -1"
            )

    @property
    def streaming(self) -> bool:
        return self.chunk_size > 0

    def describe(self) -> str:
        if not self.streaming:
            return "full context"
        return f"chunk {self.chunk_size}, left {self.left_chunks}"


def check_chunking(encoder: EncoderConfig, chunking: Chunking, cached: bool, source: str) -> None:
    """Refuse or warn about running a model (named by ``source``) with ``chunking``.

    A non-causal conv sees future frames: a chunk-by-chunk run with caches (``cached``: a
    stream, simulated streaming, a streaming export) cannot reproduce its training, so it is a
    ValueError; a chunk-masked forward runs but matches no streaming condition (a warning). A
    causal model trained only with full context streams exactly, but not accurately (a warning).
    """
    if not chunking.streaming:
        return
    kept = chunking.chunk_size * chunking.left_chunks  # cached frames (< 0: all)
    if cached and encoder.conv_pad == "wenet" and 0 <= kept < encoder.conv_kernel - 1:
        raise ValueError(
            f"{source} pads its convolution as WeNet does (encoder.conv_pad: wenet), which "
            f"needs at least conv_kernel - 1 = {encoder.conv_kernel - 1} cached frames; chunk "
            f"{chunking.chunk_size} x left {chunking.left_chunks} keeps {kept}: use more "
            "left chunks (or -1)"
        )
    if not encoder.causal_conv:
        message = (
            f"{source} was trained full-context (encoder.causal_conv: false): its convolution "
            "sees future frames, so chunked decoding will not match streaming or its training"
        )
        if cached:
            raise ValueError(f"{message}; decode or export it with chunk size 0 (full context)")
        _log.warning("%s", message)
    elif encoder.chunk.mode == "full":
        _log.warning(
            "%s was trained with full context only (encoder.chunk.mode: full): chunked decoding "
            "is exact but its accuracy may be poor",
            source,
        )
