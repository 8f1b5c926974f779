"""Streaming recognition: online fbank, chunk-by-chunk encoding with caches, a search and
endpointing, with many streams batched through one feature call and one encoder call.

Shapes: the legend in ``wenet_lite`` (B: streams decoded in one call).

A stream is exact: its tokens equal those of ``ConformerEncoder.forward_chunk_by_chunk`` over
the offline features of the whole audio (``stream_fbank.offline_fbank``), and so the
chunk-masked full forward, whatever sizes the audio arrives in, whatever streams share its
batch, at any input sample rate. The last, partial window is zero-padded with its true length
passed as ``window_lens``. When an endpoint closes a segment the encoder state and the search
restart (as WeNet's and sherpa-onnx's runtimes do), which bounds the attention cache even with
unlimited left context.

The search is any :class:`~wenet_lite.search.stream_search.StreamSearch`: each step hands it
the batch's chunk and the streams' search states, and the segment rules
(``endpoint.SegmentRules``) read what it found. A closed segment is spelled, and punctuated
when the recogniser has a punctuator (a stream's punctuation carries its words across
segments), as it closes; with attention rescoring, once the segments that closed in one
``decode_streams`` call are rescored together over the encoder output each kept (D floats per
40 ms). With ``left_chunks >= 0`` an endless stream runs in constant memory and time per
chunk; with -1 the cache grows until the next endpoint (a warning past
``HISTORY_WARNING_SECONDS``).
"""

from __future__ import annotations

import logging
import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from wenet_lite.config import ExperimentConfig
from wenet_lite.config.fields import Says, Setting
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.stream_audio import StreamAudio
from wenet_lite.features.stream_fbank import FbankStream, compute_ready
from wenet_lite.host.malloc import keep_freed_memory
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking, check_chunking
from wenet_lite.model.posenc import WENET_MAX_POSITIONS
from wenet_lite.model.state import EncoderState, StateList, StatePool
from wenet_lite.model.subsampling import (
    min_input_frames,
    output_length,
    subsampling_layers,
    window_size,
)
from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.runtime.endpoint import EndpointConfig, SegmentRules
from wenet_lite.runtime.engines import Engine
from wenet_lite.runtime.result import Result, SpanStage, make_result, merge_results, spell
from wenet_lite.runtime.segments import ClosedSegments, text_stages
from wenet_lite.search.context import ContextGraph, extended_context
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.options import SearchOptions
from wenet_lite.search.rescore import Segment, check_decoder, rescore
from wenet_lite.search.stream_search import SearchChunk, SearchState, StreamSearch, make_search
from wenet_lite.vad.online import SpeechEvent, SpeechTracker, track
from wenet_lite.vad.silero import SileroVad, VadError, VadOptions

__all__ = ["STREAM_CHUNKING", "Stream", "StreamingRecognizer"]

STREAM_CHUNKING = Chunking(16, -1)
"""The default of ``StreamingRecognizer`` and `wenet-lite stream`: 640 ms, all history."""
MAX_SPEECH_EVENTS = 256
"""a stream keeps at most this many untaken VAD events (the newest): flat memory for hours when
no one reads them"""
HISTORY_WARNING_SECONDS = 120.0
"""With all history (-1): warn once a stream's attention cache spans this much audio."""
_log = logging.getLogger(__name__)


class Stream:
    """One audio stream being recognised; create it with ``StreamingRecognizer.create_stream``.

    Feed audio with :meth:`accept_waveform`, call :meth:`input_finished` at its end, and let
    ``StreamingRecognizer.decode_streams`` consume it while :attr:`is_ready`. Results:
    :meth:`partial_result` (the open segment), :attr:`final_results` (closed segments) and
    :meth:`result` (everything). Frame bookkeeping is in fbank frames ("input frames").
    With a VAD (``vad``, or the recogniser's rule "vad") :meth:`take_speech_events` hands out
    where its turns start and stop.
    """

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        hotwords: Optional[ContextGraph] = None,
        vad: Optional[VadOptions] = None,
    ) -> None:
        self._rec = recognizer
        options = vad if vad is not None else recognizer.vad_options
        if options is not None and recognizer.vad is None:
            raise VadError("this recogniser was opened without a VAD: open it with vad='on'")
        self.vad: Optional[SpeechTracker] = None if options is None else SpeechTracker(options)
        """the stream's VAD (rule "vad" ends its segments), or None"""
        self._speech: List[SpeechEvent] = []
        self._context = hotwords if hotwords is not None else recognizer.models.context
        self.fbank = FbankStream(recognizer.cfg.features, recognizer.device)
        """Online features (computed for all ready streams at once by ``decode_streams``, on
        the engine's device); frames before the next window are discarded as decoding goes."""
        self._audio = StreamAudio(recognizer.cfg.features.sample_rate)
        self._next_frame = 0  # first input frame of the next chunk's window
        self._kept_from = 0  # fbank frames before this are discarded
        self._closed = ClosedSegments(
            lambda hyp, first, frames: self._make_result(hyp, first, frames, is_final=True),
            text_stages(recognizer.punctuator, recognizer.itn),
        )
        self._done = False
        self._slot: Optional[int] = recognizer.states.join()  # its state, until it is done
        self._leave = weakref.finalize(self, recognizer.states.leave, self._slot)
        self._start_segment()

    def _start_segment(self) -> None:
        rec = self._rec
        assert self._slot is not None
        rec.states.reset(self._slot)
        self._search: SearchState = rec.search.new_state(self._context)
        self._hyp = Hypothesis([], 0.0, [], 1.0)
        self._nbest: List[Hypothesis] = []  # the search's n-best (attention rescoring)
        self._encoded: List[torch.Tensor] = []  # (C, D) encoder outputs (attention rescoring)
        self._segment_start = self._next_frame // rec.subsampling_rate  # encoder frame
        self._segment_frames = 0  # encoder frames decoded in this segment

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Append (N,) mono float samples in [-1, 1] at ``sample_rate`` Hz (any rate; it must
        not change within a stream). Values beyond full scale are clipped, as on file input.
        Integer samples (e.g. int16 PCM) are refused: clipped to [-1, 1] they would be noise."""
        if self.fbank.finished:
            raise RuntimeError("accept_waveform called after input_finished")
        self._take_audio(self._audio.accept(sample_rate, samples))

    def _take_audio(self, x: np.ndarray) -> None:
        self.fbank.accept_waveform(self.fbank.cfg.sample_rate, x)
        if self.vad is not None:
            self.vad.accept(x)

    def input_finished(self) -> None:
        """No more audio: the rest is decoded (a last partial chunk included) and closed."""
        if self.fbank.finished:
            return
        self._take_audio(self._audio.finish())
        self.fbank.input_finished()
        self._check_done()

    @property
    def is_ready(self) -> bool:
        """Whether a chunk can be decoded now: a full window, or a last partial one."""
        if self._done:
            return False
        available = self.fbank.num_frames_ready - self._next_frame
        if available >= self._rec.window_size:
            return True
        return self.fbank.finished and available >= self._rec.min_window_size

    @property
    def done(self) -> bool:
        """True once the input is finished and fully decoded."""
        return self._done

    @property
    def recognizer(self) -> StreamingRecognizer:
        """The recogniser that created this stream (and alone may decode it)."""
        return self._rec

    @property
    def state(self) -> EncoderState:
        """The encoder state, a batch of one (read from its slot)."""
        if self._slot is None:
            return self._rec.engine.init_state(0)  # done: its caches are freed
        return self._rec.states.gather([self._slot])

    @property
    def search(self) -> SearchState:
        """The open segment's search state (the recogniser steps it with the batch)."""
        return self._search

    @property
    def slot(self) -> Optional[int]:
        """Its slot in the recogniser's :attr:`~StreamingRecognizer.states` (None once it is
        done)."""
        return self._slot

    def take_speech_events(self) -> List[SpeechEvent]:
        """The VAD's turn starts and stops found since the last call (decided by the end of
        the last decoded chunk, so the same whatever sizes the audio came in)."""
        events, self._speech = self._speech, []
        return events

    @property
    def chunk_end_sample(self) -> int:
        """The 16 kHz sample where the next chunk's frames end (the VAD runs up to it)."""
        rec = self._rec
        return (self._next_frame + rec.chunk_size * rec.subsampling_rate) * rec.hop_samples

    @property
    def closed(self) -> ClosedSegments:
        """The closed segments (the recogniser takes those that wait for rescoring)."""
        return self._closed

    @property
    def buffered_frames(self) -> int:
        """fbank frames held in memory."""
        return self.fbank.num_frames_ready - self._kept_from

    @property
    def final_results(self) -> List[Result]:
        """Closed segments that hold at least one token, in order (attention rescoring: each
        rescored, if :meth:`StreamingRecognizer.decode_streams` has not done so already)."""
        if self._closed.pending:
            self._rec.rescore_pending([self])
        return self._closed.finals

    @property
    def num_final_results(self) -> int:
        """``len(final_results)``, without building them."""
        return len(self._closed)

    @property
    def hypothesis(self) -> Hypothesis:
        """The open segment's best hypothesis, as the search has it (no spelling: cheap)."""
        return self._hyp

    @property
    def segment_start(self) -> float:
        """Seconds from the start of the stream where the open segment starts."""
        return round(self._segment_start * self._rec.subsampling_rate * self._rec.frame_shift_s, 6)

    def piece(self, token: int) -> str:
        return self._rec.require_tokenizer().id_to_piece(token)

    def spell(self, tokens: Sequence[int]) -> str:
        """Text of token ids (as results spell them)."""
        return spell(self._rec.require_tokenizer(), tokens)

    def partial_result(self, with_words: bool = True) -> Result:
        """The open segment so far (empty once the stream is done); ``with_words=False``
        leaves out the words (cheaper)."""
        return self._make_result(
            self._hyp, self._segment_start, self._segment_frames, False, with_words
        )

    def _make_result(
        self, hyp: Hypothesis, first: int, frames: int, is_final: bool, with_words: bool = True
    ) -> Result:
        rec = self._rec
        tokenizer = rec.require_tokenizer()
        return make_result(
            hyp, tokenizer, first, frames, rec.subsampling_rate, rec.frame_shift_s, is_final,
            self._context, with_words,
        )  # fmt: skip

    def result(self) -> Result:
        """All closed segments and the open one, merged; final once :attr:`done`."""
        parts = list(self.final_results)
        if not self._done:
            parts.append(self.partial_result())
        return merge_results(parts, is_final=self._done)

    def next_window(self) -> torch.Tensor:
        """(n, F) fbank frames of the next chunk's window, n <= W."""
        available = self.fbank.num_frames_ready - self._next_frame
        return self.fbank.get_frames(self._next_frame, min(available, self._rec.window_size))

    def advance(self, search: SearchState, encoded: Optional[torch.Tensor], frames: int) -> None:
        """Take one decoded chunk (the recogniser's call, the encoder state already in the
        stream's slot): the search state after it, for attention rescoring the (n, D) encoder
        output, and its ``frames`` valid encoder frames; then the segment rules decide whether
        the segment ends here."""
        rec = self._rec
        self._search = search
        found = search.hypotheses(rec.nbest)
        self._hyp = found[0]
        if encoded is not None:  # rescoring: keep the n-best and the segment's frames
            self._nbest = found
            self._encoded.append(encoded)
        self._segment_frames += frames
        self._next_frame += rec.chunk_size * rec.subsampling_rate
        self._kept_from = min(self._next_frame, self.fbank.num_frames_ready)
        self.fbank.discard_before(self._kept_from)
        vad_ended = None
        if self.vad is not None:  # its events up to this chunk's end (decode_streams ran it)
            events = self.vad.take(self._next_frame * rec.hop_samples)
            self._keep_speech(events)
            vad_ended = any(e.kind == "stopped" for e in events)
        has_tokens = self._hyp.num_tokens > 0
        if rec.segment_rules.rule(has_tokens, search.trailing_blanks, self._segment_frames,
                                  vad_ended):  # fmt: skip
            self._close_segment()
            self._start_segment()
        self._check_done()

    def _close_segment(self) -> None:
        if self._hyp.num_tokens:
            rescore = Segment(self._nbest, torch.cat(self._encoded)) if self._encoded else None
            self._closed.close(self._hyp, self._segment_start, self._segment_frames, rescore)
        self._encoded = []

    def _keep_speech(self, events: List[SpeechEvent]) -> None:
        self._speech = (self._speech + events)[-MAX_SPEECH_EVENTS:]

    def _check_done(self) -> None:
        if not self._done and self.fbank.finished and not self.is_ready:
            if self.vad is not None:  # what the decoded audio's windows decided
                self._keep_speech(self.vad.take())
            self._close_segment()
            self._hyp = Hypothesis([], 0.0, [], 1.0)
            self._segment_frames = 0
            self._done = True
            self._leave()  # its slot is free for another stream
            self._slot = None


class StreamingRecognizer:
    """Streams audio through a causal model chunk by chunk; batches many streams at once.

    Open one with :func:`wenet_lite.recognizer.open_recognizer` (a model file, an export
    directory or a model in memory, on any engine); then::

        stream = rec.create_stream()
        for samples in microphone_pieces():          # (N,) float32 at any rate
            stream.accept_waveform(16000, samples)
            while stream.is_ready:
                rec.decode_streams([stream])
            print(stream.partial_result().text)
        stream.input_finished()
        rec.decode_until_done([stream])
        print(stream.result().words)

    Args:
        engine: what runs the chunks (``runtime/engines.py``), built for the chunking to
            stream with: C, encoder frames per chunk (C * 40 ms of audio for 10 ms frames and
            subsampling 4; latency and accuracy grow with it), and the left chunks of history
            each chunk attends to (-1: all; >= 0: constant memory per stream).
        cfg, tokenizer: the model's config and tokenizer (without a tokenizer streams decode
            but results, which need text, cannot be read: for benchmarks).
        options: the CTC search (greedy, or prefix beam with an optional word LM, hotwords,
            token pruning and a blank penalty, or that beam's n-best rescored by the model's
            attention decoder at each final segment), as ``decode`` takes it; default greedy.
        endpoint: endpointing rules (default: ``EndpointConfig()``, see ``endpoint.py``);
            ``EndpointConfig(enabled=False)`` keeps a whole stream in one segment.
        model: the torch model, for attention rescoring (default: the torch engine's).
        source: what the model came from, for messages and summaries.
        slots: keep the streams' states in one batched tensor with a slot per stream
            (:class:`~wenet_lite.model.state.StatePool`; fixed caches only). Default: on when
            the engine runs on CUDA with left chunks >= 0, where the states then never leave
            the GPU; off on the CPU, where reusing the last step's batch costs less.
    """

    def __init__(
        self,
        engine: Engine,
        cfg: ExperimentConfig,
        tokenizer: Optional[Tokenizer],
        options: Optional[SearchOptions] = None,
        *,
        endpoint: Optional[EndpointConfig] = None,
        model: Optional[ASRModel] = None,
        source: str = "the model",
        slots: Optional[bool] = None,
        search: Optional[StreamSearch] = None,
        vad: Optional[SileroVad] = None,
        punctuator: Optional[Punctuator] = None,
        itn: Optional[SpanStage] = None,
    ) -> None:
        if not engine.chunking.streaming:
            raise ValueError(f"streaming needs a chunk size >= 1, got {engine.chunking.chunk_size}")
        check_chunking(cfg.encoder, engine.chunking, cached=True, source=source)
        keep_freed_memory()  # batched steps reuse freed activations (wenet_lite/host/malloc.py)
        self.engine: Engine = engine  # runs the chunks (runtime/engines.py)
        self.model = model if model is not None else engine.model
        self.cfg, self.tokenizer, self.source = cfg, tokenizer, source
        self.chunking = engine.chunking
        self.options = (options or SearchOptions()).resolved(cfg.decode)
        self.endpoint = endpoint if endpoint is not None else EndpointConfig()
        self.punctuator: Optional[Punctuator] = punctuator  # cases and punctuates finals
        self.itn: Optional[SpanStage] = itn  # writes the finals' numbers as digits
        self._layout(cfg)
        self.vad: Optional[SileroVad] = vad  # the streams' VAD model (None: no stream has one)
        self.vad_options = _rule_vad(self.endpoint, vad)  # every stream's VAD (rule "vad")
        self.device, self.dtype = engine.device, engine.dtype  # e.g. a bfloat16 model
        self.pool: Optional[StatePool] = self._pool(slots)
        """the streams' states in one batched tensor, a slot each (fixed caches; by default
        on CUDA), or None: each stream holds its own"""
        self.states = self.pool if self.pool is not None else StateList(engine.init_state)
        """where the streams' encoder states live, a slot each"""
        self.models = self.options.load(tokenizer)  # the word LM and hotwords, if any
        # the search every stream's chunks go through
        self.search: StreamSearch = search or make_search(self.options, self.models,
                                                          self.model, source)  # fmt: skip
        # hypotheses a stream keeps of each chunk (attention rescoring's n-best)
        self.nbest = (self.options.nbest or 1) if self.options.rescoring else 1
        if self.options.rescoring:
            check_decoder(self.model, source)

    def _layout(self, cfg: ExperimentConfig) -> None:
        """Windows, frames and segment rules of the model's front-end and the chunking."""
        self._layers = subsampling_layers(cfg.encoder.subsampling_rate)
        self.subsampling_rate: int = cfg.encoder.subsampling_rate
        self.window_size: int = window_size(self.chunking.chunk_size, self._layers)
        """W: input frames of one chunk's window"""
        self.min_window_size: int = min_input_frames(self._layers)
        """input frames that give one encoder frame: a shorter final window gives nothing"""
        self.frame_shift_s: float = cfg.features.frame_shift_ms / 1000
        self.hop_samples: int = round(cfg.features.sample_rate * self.frame_shift_s)
        """samples per fbank frame"""
        frame_s = self.subsampling_rate * self.frame_shift_s
        limit = WENET_MAX_POSITIONS if cfg.encoder.pos_enc == "wenet" else 0
        self.segment_rules = SegmentRules(self.endpoint, frame_s, self.chunk_size, limit)
        """when a segment ends (the endpoint rules; WeNet's absolute positions' end)"""
        self._growth_warning = int(HISTORY_WARNING_SECONDS / frame_s)
        self._warned_growth = self.chunking.left_chunks >= 0  # a fixed cache never grows

    def _pool(self, slots: Optional[bool]) -> Optional[StatePool]:
        if slots is None:  # on a GPU the states stay there; on the CPU a step reuses its batch
            slots = torch.device(self.device).type == "cuda" and self.chunking.left_chunks >= 0
        if slots and self.chunking.left_chunks < 0:
            raise ValueError("slots hold fixed-size caches: give left chunks >= 0")
        return StatePool(self.engine.init_state) if slots else None

    @property
    def chunk_size(self) -> int:
        """C, encoder frames per chunk."""
        return self.chunking.chunk_size

    def create_stream(
        self, hotwords: Optional[ContextGraph] = None, vad: Optional[VadOptions] = None
    ) -> Stream:
        """A new stream; ``hotwords``: its own graph (:meth:`hotwords_graph`) instead of the
        recognizer's list; ``vad``: its own VAD settings (its turns end its segments) instead
        of the recognizer's (``endpoint.vad_silence``)."""
        return Stream(self, hotwords, vad)

    def hotwords_graph(self, lines: Sequence[str], source: str = "hotwords") -> ContextGraph:
        """A hotword graph for one stream: the recognizer's phrases (``options.hotwords``) and
        ``lines`` (``PHRASE`` or ``PHRASE :SCORE``; ``options.hotwords_score`` per token
        otherwise). ValueError naming ``source`` for a bad line, or a greedy recognizer."""
        if not self.options.takes_hotwords:
            raise ValueError(
                f"{source}: hotwords need a beam search (mode=prefix_beam or transducer_beam); "
                "this recognizer searches greedily"
            )
        return extended_context(self.models.context, lines, self.require_tokenizer(),
                                self.options.hotwords_score, source)  # fmt: skip

    def decode_streams(self, streams: Sequence[Stream]) -> List[Stream]:
        """Decode one chunk of every ready stream in ONE batched encoder call.

        Streams that are not ready are skipped. Each stream's result equals decoding it alone.
        Returns the streams that were decoded.
        """
        ready = self._ready(streams)
        if ready:
            compute_ready([s.fbank for s in ready])  # every ready stream's new frames, one call
            heard = [s for s in ready if s.vad is not None]
            if heard:  # every VAD up to its chunk's end, one model call a window
                assert self.vad is not None, "a stream has a VAD only where the recogniser has"
                track(self.vad, [s.vad for s in heard], [s.chunk_end_sample for s in heard])
            chunk = self._encode(ready)
            searches = self.search.step(chunk, [s.search for s in ready])
            keep = chunk.encoded if self.options.rescoring else None
            for i, (s, search) in enumerate(zip(ready, searches)):
                n = chunk.lens[i]
                s.advance(search, None if keep is None else keep[i, :n], n)
        self.rescore_pending(streams)
        return ready

    def _ready(self, streams: Sequence[Stream]) -> List[Stream]:
        ready = [s for s in streams if s.is_ready]
        if len({id(s) for s in ready}) != len(ready):
            raise ValueError("decode_streams got the same stream twice")
        if any(s.recognizer is not self for s in ready):
            raise ValueError("a stream can only be decoded by the recognizer that created it")
        return ready

    def _encode(self, ready: List[Stream]) -> SearchChunk:
        """The ready streams' next chunk through the engine, their states read from and
        written back to their slots."""
        feats, lens = self._batch_windows(ready)  # (B, W, F), (B,)
        slots = [s.slot for s in ready]
        state = self.states.gather(slots)
        encoded: Optional[torch.Tensor] = None
        if self.options.rescoring or self.search.needs_encoder:
            encoded, log_probs, new_state = self.engine.run_encoder(feats, lens, state)
        else:
            log_probs, new_state = self.engine.run(feats, lens, state)  # (B, C, V)
        self.states.scatter(slots, new_state)
        if not self._warned_growth and new_state.att_cache.size(3) > self._growth_warning:
            self._warned_growth = True
            _log.warning(
                Says("a stream holds %d s of history in its attention cache ({all}, no endpoint "
                     "yet): time and memory per chunk grow with it; {four} or endpointing keep "
                     "them flat", all=Setting("left_chunks", -1), four=Setting("left_chunks", 4)),
                round(HISTORY_WARNING_SECONDS),
            )  # fmt: skip
        valid = [output_length(n, self._layers) for n in lens.tolist()]
        return SearchChunk(log_probs, encoded, valid)

    def decode_until_done(self, streams: Sequence[Stream]) -> None:
        """Decode every ready chunk of ``streams``, batched, until none is ready."""
        while self.decode_streams(streams):
            pass

    def rescore_pending(self, streams: Sequence[Stream]) -> None:
        """Rescore the closed segments of ``streams`` that wait for it, in one decoder call."""
        waiting = [(s, index, seg) for s in streams for index, seg in s.closed.take_pending()]
        if not waiting:
            return
        assert self.model is not None and self.model.decoder is not None, "checked in __init__"
        opts = self.options
        found = rescore(
            self.model.decoder, [seg for _, _, seg in waiting], opts.ctc_weight, opts.reverse_weight
        )
        for (s, index, _), hyps in zip(waiting, found):
            s.closed.rescored(index, hyps[0])

    def require_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise RuntimeError("this recognizer has no tokenizer: results cannot be spelled")
        return self.tokenizer

    def _batch_windows(self, streams: Sequence[Stream]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Windows zero-padded to W (a last partial window is shorter), and their lengths."""
        windows = [s.next_window() for s in streams]  # on the device
        sizes = [w.size(0) for w in windows]
        if min(sizes) == self.window_size:  # all full: one call
            feats = torch.stack(windows)
        else:
            feats = windows[0].new_zeros(len(windows), self.window_size, windows[0].size(1))
            for i, w in enumerate(windows):
                feats[i, : w.size(0)] = w
        lens = torch.tensor(sizes, dtype=torch.long)
        return feats.to(self.dtype), lens.to(self.device)


def _rule_vad(endpoint: EndpointConfig, vad: Optional[SileroVad]) -> Optional[VadOptions]:
    """The VAD settings of the endpoint rule "vad" (None: off); VadError when it has no VAD."""
    options = endpoint.vad_options()
    if options is not None and vad is None:
        raise VadError(f"the endpoint rule {Setting('vad_silence')} needs a VAD: open the "
                       "recogniser with one")  # fmt: skip
    return options
