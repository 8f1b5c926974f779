"""A stream's closed segments: with text stages (punctuation, ITN) each is spelled and
written as it closes (or, with attention rescoring, once its rescored best comes back), a stage
reading each segment after the one before; without them, spelled when first asked for (a
recogniser without a tokenizer, as the benchmarks', never spells). Finals are handed out in
order."""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.runtime.result import Result, SpanStage, normalized, punctuated
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.rescore import Segment

__all__ = ["ClosedSegments", "text_stages"]

Spell = Callable[[Hypothesis, int, int], Result]
"""(best hypothesis, first encoder frame, frames) -> the segment's final result"""


class ClosedSegments:
    """The segments a stream closed (those holding a token), in order."""

    def __init__(self, spell: Spell, write: Optional[Callable[[Result], Result]] = None) -> None:
        """``write``: the text stages of a final (None: none, spelled lazily)."""
        self._spell, self._write = spell, write
        self._closed: List[Tuple[Hypothesis, int, int]] = []  # (hyp, first frame, frames)
        self._finals: List[Result] = []  # results of self._closed[: len(self._finals)]
        self._pending: List[Tuple[int, Segment]] = []  # closed, not yet taken for rescoring
        self._waiting = 0  # closed, their rescored best not back yet

    def __len__(self) -> int:
        return len(self._closed)

    def close(self, hyp: Hypothesis, first: int, frames: int, rescore: Optional[Segment]) -> None:
        """A segment ends: its best, where it starts and its length in encoder frames, and
        with attention rescoring its n-best and encoder output (its final waits for it)."""
        self._closed.append((hyp, first, frames))
        if rescore is not None:
            self._pending.append((len(self._closed) - 1, rescore))
            self._waiting += 1
        if self._write is not None:
            self._finish()

    @property
    def pending(self) -> bool:
        """Segments wait to be taken for rescoring."""
        return bool(self._pending)

    def take_pending(self) -> List[Tuple[int, Segment]]:
        """The segments that wait for rescoring, as (index, segment); each one's rescored best
        comes back through :meth:`rescored`."""
        pending, self._pending = self._pending, []
        return pending

    def rescored(self, index: int, hyp: Hypothesis) -> None:
        _, first, frames = self._closed[index]
        self._closed[index] = (hyp, first, frames)
        self._waiting -= 1
        if self._write is not None:
            self._finish()

    @property
    def finals(self) -> List[Result]:
        """The finals of the closed segments, in order, up to one that waits for rescoring."""
        self._finish()
        return list(self._finals)

    def _finish(self) -> None:
        """Spell (and write) the closed segments in order, up to one that waits for its
        rescoring: a text stage reads a segment after the one before it."""
        while len(self._finals) + self._waiting < len(self._closed):
            final = self._spell(*self._closed[len(self._finals)])
            self._finals.append(self._write(final) if self._write is not None else final)


def text_stages(
    punctuator: Optional[Punctuator], itn: Optional[SpanStage]
) -> Optional[Callable[[Result], Result]]:
    """What one stream does to each final: its own punctuation (which carries words across
    its segments), then ITN; None without either."""
    if punctuator is None and itn is None:
        return None
    punct = punctuator.stream() if punctuator is not None else None
    return lambda final: normalized(punctuated(final, punct), itn)
