"""The VAD on live streams: each stream's turns (where speech starts and stops) found as its
audio arrives, by the rules of :func:`~wenet_lite.vad.silero.speech_regions`, with the model
run for many streams in one call.

A :class:`SpeechTracker` holds one stream's recurrent state, the samples not yet in a window
and the open turn. :func:`track` runs the windows of many trackers up to a sample each, the
k-th window of every stream in one model call. A turn is reported once it is certain to be one
the file rules keep (longer than ``min_speech_ms``; its start then, padded back by ``pad_ms``)
and its end once ``min_silence_ms`` of quiet follow it, so the turns of a stream equal
``speech_regions`` of the same audio with no padding, whatever sizes the audio arrives in.
Every event carries the sample at which it was decided (the end of the window that decided
it): a caller that asks "what was decided by sample N" gets the same answer however the audio
was split or batched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from wenet_lite.vad.silero import RATE, WINDOW, SileroVad, VadOptions

__all__ = ["SpeechEvent", "SpeechTracker", "track"]


@dataclass(frozen=True)
class SpeechEvent:
    """A turn's start or end, in samples from the stream's start at 16 kHz."""

    kind: str  # "started" or "stopped"
    at: int
    """where speech started (padded back by ``pad_ms``, not before 0) or stopped"""
    decided: int
    """the sample by which the tracker knew it"""

    @property
    def seconds(self) -> float:
        return self.at / RATE


class SpeechTracker:
    """One stream's online VAD (module doc); feed it with :meth:`accept`, run it with
    :func:`track`, read :meth:`take`."""

    def __init__(self, options: VadOptions) -> None:
        self.options = options
        self.state, self.context = SileroVad.initial_state(1)
        self._samples = np.zeros(0, np.float32)  # received, not yet in a window
        self.windows = 0
        """windows run so far"""
        self._start: Optional[int] = None  # of the open (unconfirmed or confirmed) turn
        self._confirmed = False
        self._quiet_from: Optional[int] = None
        self._events: List[SpeechEvent] = []

    def accept(self, samples: np.ndarray) -> None:
        """Append 16 kHz float samples."""
        self._samples = np.concatenate([self._samples, samples.astype(np.float32, copy=False)])

    @property
    def received(self) -> int:
        """samples received so far"""
        return self.windows * WINDOW + self._samples.size

    @property
    def in_speech(self) -> bool:
        """Whether a reported turn is open."""
        return self._confirmed

    def windows_until(self, sample: int) -> int:
        """How many more windows end by ``sample`` and have all their audio."""
        return max(0, min(sample, self.received) // WINDOW - self.windows)

    def take(self, until: Optional[int] = None) -> List[SpeechEvent]:
        """The events decided by sample ``until`` (all: None), in order; each is taken once."""
        if until is None:
            taken, self._events = self._events, []
            return taken
        n = 0
        while n < len(self._events) and self._events[n].decided <= until:
            n += 1
        taken, self._events = self._events[:n], self._events[n:]
        return taken

    def _next_window(self) -> np.ndarray:
        window, self._samples = self._samples[:WINDOW], self._samples[WINDOW:]
        return window

    def _update(self, p: float) -> None:
        """The rules of ``speech_regions`` on the window just run."""
        o, ms = self.options, RATE // 1000
        at = self.windows * WINDOW
        self.windows += 1
        decided = at + WINDOW
        if p >= o.threshold:
            self._quiet_from = None
            if self._start is None:
                self._start = at
        elif self._start is not None and p < o.end_threshold:
            if self._quiet_from is None:
                self._quiet_from = at
            if at - self._quiet_from >= o.min_silence_ms * ms:
                if self._confirmed:
                    self._events.append(SpeechEvent("stopped", self._quiet_from, decided))
                self._start, self._quiet_from, self._confirmed = None, None, False
                return
        # a turn is kept once it runs past min_speech with no quiet begun (speech_regions
        # keeps those whose quiet starts later than min_speech after their start)
        if (
            self._start is not None
            and not self._confirmed
            and self._quiet_from is None
            and decided - self._start > o.min_speech_ms * ms
        ):
            self._confirmed = True
            padded = max(0, self._start - o.pad_ms * ms)
            self._events.append(SpeechEvent("started", padded, decided))


def track(vad: SileroVad, trackers: Sequence[SpeechTracker], until: Sequence[int]) -> None:
    """Run every tracker's windows that end by its ``until`` sample (and have their audio),
    the k-th window of each tracker in one model call."""
    todo = [(t, t.windows_until(u)) for t, u in zip(trackers, until)]
    todo = [(t, n) for t, n in todo if n > 0]
    step = 0
    while todo:
        group = [t for t, _ in todo]
        windows = np.stack([t._next_window() for t in group])
        state = np.concatenate([t.state for t in group], axis=1)
        context = np.concatenate([t.context for t in group], axis=0)
        probs, state, context = vad.step(windows, state, context)
        for i, t in enumerate(group):
            t.state, t.context = state[:, i : i + 1], context[i : i + 1]
            t._update(float(probs[i]))
        step += 1
        todo = [(t, n) for t, n in todo if n > step]
