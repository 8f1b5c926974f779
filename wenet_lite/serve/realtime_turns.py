"""A Realtime transcription session's turns as server events: the decode thread reads each
stream of the session (one input buffer) and writes its items: speech started and stopped,
committed, deltas and the completed transcript (realtime.py has the rules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

from wenet_lite.data.tokenizer import WORD_START
from wenet_lite.runtime.cursor import StreamCursor
from wenet_lite.runtime.result import Result, token_logprobs
from wenet_lite.runtime.streaming import Stream
from wenet_lite.serve.protocols import Boundary
from wenet_lite.vad.silero import RATE as VAD_RATE

__all__ = ["Buffers", "TurnWriter"]


@dataclass
class Buffers:
    """The session's input buffers, as the event loop closes them (read by the writer)."""

    ids: List[str]
    """each buffer's item id, the open one's last"""
    committed: Set[int] = field(default_factory=set)
    seconds: Dict[int, float] = field(default_factory=dict)
    """a closed buffer's length"""
    turns: bool = True
    """turn detection is on (else a committed buffer is one item)"""
    logprobs: bool = False
    """completed transcripts carry their tokens' log confidences"""


class TurnWriter:
    """Where the current stream is in the session, and its items' events."""

    def __init__(self, buffers: Buffers, event: Callable[..., str],
                 new_id: Callable[[], str]) -> None:  # fmt: skip
        self.buffers, self.event, self.new_id = buffers, event, new_id
        self._index = 0  # the buffer of the current stream
        self._offset = 0.0  # seconds of session audio before it
        self._item: Optional[str] = None  # the open item (turn detection)
        self._sent = ""  # text sent as deltas for it
        self._completed = False  # this stream's end is rendered
        self._previous: Optional[str] = None
        self._stopped = False  # the VAD said speech stopped for the open item
        self._start_s = 0.0  # where the open item's speech started
        self._parts: List[Result] = []  # the open item's segments ended inside it

    def stream_replaced(self, boundary: Boundary) -> None:
        """The decoder started a new stream at ``boundary`` (a commit or clear ends a buffer;
        a settings change on an empty buffer keeps it)."""
        if boundary.kind in ("commit", "clear"):
            self._index += 1
            self._offset += boundary.seconds
            self._item, self._sent, self._completed = None, "", False

    def events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        if self._completed:
            return [], stream.done
        out: List[str] = []
        if self.buffers.turns and stream.vad is not None:
            return self._vad_events(stream, cursor)
        if self.buffers.turns:
            finals = cursor.new_finals()
            for _, r in finals:
                self._open_item(out, r.start, r.timestamps)
                self._close_item(out, [r], r.end, r.start)
            if not stream.done and stream.hypothesis.num_tokens:
                partial = stream.partial_result(False)
                self._open_item(out, partial.start, partial.timestamps)
                self._delta(out, partial.text)
            if stream.done:
                self._completed = True
                if self._index in self.buffers.committed and not finals:
                    self._empty_item(out)
            return out, stream.done
        # no turn detection: the buffer is one item, transcribed when committed
        item = self.buffers.ids[self._index]
        results = [r for r in stream.final_results if r.text]
        cursor.new_finals()
        if stream.done:
            self._completed = True
            if self._index in self.buffers.committed:
                text = " ".join(r.text for r in results)
                self._delta(out, text, item)
                seconds = self.buffers.seconds.get(self._index, 0.0)
                out.append(self._completed_event(item, results, seconds))
            return out, True
        finals = [r.text for r in results]
        if stream.hypothesis.num_tokens:
            finals.append(stream.partial_result(False).text)
        self._delta(out, " ".join(t for t in finals if t), item)
        return out, False

    def _vad_events(self, stream: Stream, cursor: StreamCursor) -> Tuple[List[str], bool]:
        """Turns by the VAD: its starts and stops, and the segments they end, in time order. A
        turn is one item: segments that rule 3 ends inside it are joined into its text."""
        out: List[str] = []
        speech = [(e.decided / VAD_RATE, 0, e) for e in stream.take_speech_events()]
        finals = [(r.end, 1, r) for _, r in cursor.new_finals()]
        happened = sorted(speech + finals, key=lambda x: (x[0], x[1]))
        for k, (_, _, what) in enumerate(happened):
            if isinstance(what, Result):
                if self._item is None:  # words the VAD did not hear as a turn: their own item
                    self._open_item(out, what.start, what.timestamps)
                    self._close_item(out, [what], what.end)
                else:
                    self._parts.append(what)
                    if self._stopped:
                        self._close_item(out, self._parts, what.end)
            elif what.kind == "started":
                if self._item is None:
                    self._item = self.new_id()
                    out.append(self.event("input_audio_buffer.speech_started",
                                           item_id=self._item,
                                           audio_start_ms=self._ms(what.seconds)))  # fmt: skip
                    self._start_s, self._stopped, self._parts = what.seconds, False, []
            elif self._item is not None and not self._stopped:  # stopped
                out.append(self.event("input_audio_buffer.speech_stopped", item_id=self._item,
                                       audio_end_ms=self._ms(what.seconds)))  # fmt: skip
                self._stopped = True
                if not any(isinstance(x[2], Result) for x in happened[k + 1 :]):
                    # the turn's last segment held no words: the text is what came before
                    self._close_item(out, self._parts, what.seconds)
        if not stream.done and self._item is not None:
            partial = stream.partial_result(False).text if stream.hypothesis.num_tokens else ""
            self._delta(out, self._turn_text(partial))
        if stream.done:
            self._completed = True
            if self._item is not None:  # a turn still open at the buffer's end
                self._close_item(out, self._parts, max(stream.segment_start, self._start_s))
            elif self._index in self.buffers.committed and not finals:
                self._empty_item(out)
        return out, stream.done

    def _empty_item(self, out: List[str]) -> None:
        """A commit with no turn open: answered by an empty item all the same."""
        item = self.buffers.ids[self._index]
        out.append(self.event("input_audio_buffer.committed", item_id=item,
                               previous_item_id=self._previous))  # fmt: skip
        out.append(self._completed_event(item, [], 0.0))
        self._previous = item

    def _turn_text(self, more: str = "") -> str:
        """The open turn's text: its segments so far, then ``more``."""
        return " ".join(t for t in [*(r.text for r in self._parts), more] if t)

    def _close_item(
        self, out: List[str], results: List[Result], end: float, start: Optional[float] = None
    ) -> None:
        """The open item's end: speech stopped (unless the VAD said so), committed, the last
        delta and the completed transcript (its seconds from ``start``, by default where the
        item's speech started)."""
        item = self._item
        if not self._stopped:
            out.append(self.event("input_audio_buffer.speech_stopped", item_id=item,
                                   audio_end_ms=self._ms(end)))  # fmt: skip
        out.append(self.event("input_audio_buffer.committed", item_id=item,
                               previous_item_id=self._previous))  # fmt: skip
        text = " ".join(r.text for r in results if r.text)
        self._delta(out, text)
        start = self._start_s if start is None else start
        out.append(self._completed_event(item, results, max(0.0, end - start)))
        self._previous, self._item, self._sent = item, None, ""
        self._stopped, self._parts = False, []

    def _open_item(self, out: List[str], start: float, timestamps: List[float]) -> None:
        if self._item is None:
            self._item = self.new_id()
            self._stopped = False
            first = timestamps[0] if timestamps else start
            self._start_s = first
            out.append(self.event("input_audio_buffer.speech_started", item_id=self._item,
                                   audio_start_ms=self._ms(first)))  # fmt: skip

    def _delta(self, out: List[str], text: str, item: Optional[str] = None) -> None:
        """The text's new end as a delta, when it extends what was sent (the completed event
        has the final text either way)."""
        if text.startswith(self._sent) and len(text) > len(self._sent):
            out.append(self.event("conversation.item.input_audio_transcription.delta",
                                   item_id=item or self._item, content_index=0,
                                   delta=text[len(self._sent):]))  # fmt: skip
            self._sent = text

    def _completed_event(self, item: Optional[str], results: List[Result], seconds: float) -> str:
        """The item's transcript (its segments' texts joined) and, where the session asked
        for them, its tokens' log confidences as OpenAI's ``logprobs``."""
        results = [r for r in results if r.text]
        extra = {}
        if self.buffers.logprobs:
            pairs = [p for r in results for p in zip(_spaced(r.tokens), token_logprobs(r))]
            if pairs:  # the transcript starts with its first word, not a space
                pairs[0] = (pairs[0][0].lstrip(" "), pairs[0][1])
            extra["logprobs"] = [
                {"token": piece, "logprob": logp, "bytes": list(piece.encode("utf-8"))}
                for piece, logp in pairs
            ]
        return self.event("conversation.item.input_audio_transcription.completed",
                           item_id=item, content_index=0,
                           transcript=" ".join(r.text for r in results),
                           usage={"type": "duration", "seconds": round(seconds, 3)},
                           **extra)  # fmt: skip

    def _ms(self, seconds: float) -> int:
        return int(round((self._offset + seconds) * 1000))


def _spaced(pieces: List[str]) -> List[str]:
    """Sentencepiece pieces as text: the word-start mark a space (as a transcript's tokens
    read), so the tokens joined spell the words."""
    return [p.replace(WORD_START, " ") for p in pieces]
