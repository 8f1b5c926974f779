"""Kaldi-style endpointing: when a streaming segment (utterance) is over.

Checked after every decoded chunk. "Silence" is the run of trailing encoder frames whose most
probable CTC output is the blank, so no separate voice-activity detector is needed and the
decision follows what the model hears. A segment ends as soon as one rule holds:

- rule 1: nothing decoded in the segment yet and trailing silence >= ``rule1_min_silence``
  (a long pause with no speech: drop it and start afresh);
- rule 2: something decoded and trailing silence >= ``rule2_min_silence`` (end of a sentence);
- rule 3: the segment is ``rule3_max_length`` seconds long (bounds latency of the final result
  and, with unlimited left context, the attention cache).

These are Kaldi's ``OnlineEndpointConfig`` rules 1, 2 and 5 with sherpa-onnx's defaults
(2.4 s, 1.2 s, 20 s). Durations count encoder frames of decoded audio, so they are exact
multiples of the encoder frame shift (40 ms for 10 ms fbank frames subsampled by 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wenet_lite.config import flag

__all__ = ["EndpointConfig", "detect_endpoint"]


@dataclass(frozen=True)
class EndpointConfig:
    """The rules; each field declares its flag of `stream`, `serve` and `transcribe`."""

    enabled: bool = field(default=True, metadata=flag("--no-endpoint", "one segment per input"))
    rule1_min_silence: float = field(
        default=2.4, metadata=flag("--rule1-silence", "s of silence that end a segment with "
                                   "nothing decoded (rule 1)", metavar="S"),
    )  # fmt: skip
    """seconds of trailing silence that end a segment in which nothing was decoded"""
    rule2_min_silence: float = field(
        default=1.2, metadata=flag("--rule2-silence", "s of silence that end a segment after "
                                   "speech (rule 2)", metavar="S"),
    )  # fmt: skip
    """seconds of trailing silence that end a segment after something was decoded"""
    rule3_max_length: float = field(
        default=20.0, metadata=flag("--max-segment", "s after which a segment ends whatever it "
                                    "holds (rule 3)", metavar="S"),
    )  # fmt: skip
    """seconds after which a segment ends whatever it holds"""

    def __post_init__(self) -> None:
        for name in ("rule1_min_silence", "rule2_min_silence", "rule3_max_length"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(
                    f"endpoint {name} must be a positive number of seconds, got {value}"
                )


def detect_endpoint(
    cfg: EndpointConfig, decoded_anything: bool, trailing_silence: float, length: float
) -> int:
    """The number of the first rule that ends the segment (1, 2 or 3), or 0 if none does.

    Args:
        decoded_anything: whether the segment's hypothesis holds any token.
        trailing_silence: seconds of blank frames at the end of the segment.
        length: seconds of audio decoded in the segment.
    """
    if not cfg.enabled:
        return 0
    if not decoded_anything and trailing_silence >= cfg.rule1_min_silence:
        return 1
    if decoded_anything and trailing_silence >= cfg.rule2_min_silence:
        return 2
    if length >= cfg.rule3_max_length:
        return 3
    return 0
