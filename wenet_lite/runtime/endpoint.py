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

With ``vad_silence`` > 0 a neural VAD (Silero VAD, ``wenet_lite/vad``) decides silence instead
of the blanks: rule "vad" ends a segment once the VAD has heard ``vad_silence`` seconds of
quiet after speech (checked at the end of each chunk), and rules 1 and 2 give way to it; rule
3 still bounds a segment.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Optional

from wenet_lite.config import flag
from wenet_lite.config.fields import FieldError, Setting
from wenet_lite.vad.silero import VadOptions

__all__ = ["LENGTH_LIMIT_RULE", "VAD_RULE", "EndpointConfig", "SegmentRules", "detect_endpoint"]

VAD_RULE = 5
"""the number ``Stream`` gives rule "vad" where rules are numbered"""
LENGTH_LIMIT_RULE = 4
"""a segment ended where the model's absolute positions end (WeNet's)"""
_log = logging.getLogger(__name__)


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
    vad_silence: float = field(
        default=0.0, metadata=flag("--vad-silence", "s of quiet after speech, as Silero VAD "
                                   "hears it, that end a segment (rule vad, in place of rules "
                                   "1 and 2; needs silero-vad; 0: off)", metavar="S"),
    )  # fmt: skip
    """seconds of quiet after speech (by the VAD) that end a segment; 0: no VAD"""
    vad_threshold: float = field(
        default=0.5, metadata=flag("--vad-threshold", "speech probability at which Silero "
                                   "VAD hears speech", metavar="P"),
    )  # fmt: skip
    """the VAD's speech probability threshold (quiet is below it less 0.15)"""

    def __post_init__(self) -> None:
        for name in ("rule1_min_silence", "rule2_min_silence", "rule3_max_length"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(
                    f"endpoint {name} must be a positive number of seconds, got {value}"
                )
        if not (self.vad_silence >= 0 and math.isfinite(self.vad_silence)):
            raise FieldError("{silence}: give 0 (off) or a finite number of seconds",
                             silence=Setting("vad_silence", self.vad_silence))  # fmt: skip
        if not 0 < self.vad_threshold < 1:
            raise FieldError("{threshold}: give a probability in (0, 1)",
                             threshold=Setting("vad_threshold", self.vad_threshold))  # fmt: skip

    def vad_options(self) -> Optional[VadOptions]:
        """The VAD's settings of rule "vad" (None: the rule is off)."""
        if not self.enabled or self.vad_silence == 0:
            return None
        return VadOptions(self.vad_threshold, min_speech_ms=250,
                          min_silence_ms=round(self.vad_silence * 1000), pad_ms=0)  # fmt: skip


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


@dataclass(frozen=True)
class SegmentRules:
    """When a stream's open segment ends, asked after each decoded chunk: the endpoint rules
    over the search's trailing blanks (or the VAD's turns), then the model's own limit."""

    endpoint: EndpointConfig
    frame_s: float
    """seconds per encoder frame"""
    chunk: int
    """encoder frames per chunk"""
    max_frames: int = 0
    """encoder frames a segment may hold (0: any number); WeNet's absolute positions end"""

    def rule(self, has_tokens: bool, trailing_blanks: int, frames: int,
             vad_ended: Optional[bool]) -> int:  # fmt: skip
        """The rule that ends the segment now (0: none). ``trailing_blanks``: the search's
        frames since its last token; ``frames``: the segment's; ``vad_ended``: None without a
        VAD (the blanks decide silence), else whether it heard a turn end in this chunk (rules 1
        and 2 give way to it)."""
        silence = 0.0 if vad_ended is not None else trailing_blanks * self.frame_s
        ended = detect_endpoint(self.endpoint, has_tokens, silence, frames * self.frame_s)
        if vad_ended:
            ended = VAD_RULE
        if not ended and self.max_frames and frames + self.chunk > self.max_frames:
            _log.info(
                "a segment reached %d encoder frames (%.0f s) without an endpoint: ended there, "
                "where the absolute positions of this model (WeNet's) end", frames,
                frames * self.frame_s,
            )  # fmt: skip
            ended = LENGTH_LIMIT_RULE
        return ended
