"""One consumer's place in a stream's final results (a server connection, a printed input)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from wenet_lite.runtime.result import Result

if TYPE_CHECKING:
    from wenet_lite.runtime.streaming import Stream

__all__ = ["StreamCursor"]


class StreamCursor:
    """One consumer's place in a stream's results (a server connection, a printed input): the
    final segments it has taken. The server and `stream`'s printer read streams through one,
    so "which segments are new" is decided in one place."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.taken = 0
        """final segments taken so far"""

    def new_finals(self, limit: Optional[int] = None) -> List[Tuple[int, Result]]:
        """The segments closed since the last call (at most ``limit``), with their index."""
        s = self.stream
        if s.num_final_results <= self.taken:
            return []
        results = s.final_results[self.taken :]
        if limit is not None:
            results = results[:limit]
        out = list(enumerate(results, self.taken))
        self.taken += len(out)
        return out

    @property
    def pending(self) -> bool:
        """Closed segments wait that :meth:`new_finals` has not handed out."""
        return self.stream.num_final_results > self.taken
