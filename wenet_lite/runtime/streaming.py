"""Streaming recognition: online fbank, chunk-by-chunk encoding with caches, CTC search and
endpointing, with many streams batched through one feature call and one encoder call.

Shapes: the legend in ``wenet_lite`` (B: streams decoded in one call).

A stream is exact: its tokens equal those of ``ConformerEncoder.forward_chunk_by_chunk`` over
the offline features of the whole audio (``stream_fbank.offline_fbank``, equal to training's
kaldi-native-fbank features within float32 rounding), and so the chunk-masked full forward,
whatever sizes the audio arrives in, whether it is batched with other streams, and at any
input sample rate (soxr's streaming resampler gives the same samples as resampling the whole
file). The last, partial window at ``input_finished`` is zero-padded with its true length
passed as ``window_lens``, which masks exactly what ``forward_chunk_by_chunk``'s shorter window
leaves out. When an endpoint closes a segment the encoder state and the search restart (as the WeNet
and sherpa-onnx runtimes do): the next segment is decoded as if its audio started at that
chunk, which keeps the context within what the model was trained on and bounds the attention
cache even with unlimited left context.

With ``--mode attention_rescoring`` the partial results stay CTC's; when a segment closes (an
endpoint, or the end of input) its n-best from the prefix beam is rescored by the model's
attention decoder over the segment's encoder output (``search/rescore.py``), which the stream
keeps until then (D floats per 40 ms: 14 KB per second of audio at D = 144). The segments
that close in one ``decode_streams`` call are rescored in one batched decoder call.

Memory per stream: with ``left_chunks >= 0`` the caches have a fixed size and fbank frames
are discarded once no window needs them, so an endless stream runs in constant memory and
time per chunk. With ``left_chunks = -1`` the attention cache grows until the next endpoint
(a warning says so once a stream holds more than ``HISTORY_WARNING_SECONDS`` of it).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import soxr
import torch

from wenet_lite.config import ExperimentConfig
from wenet_lite.config.fields import FieldError, Says, Setting, literal
from wenet_lite.data.tokenizer import BLANK_ID, Tokenizer
from wenet_lite.features.stream_fbank import FbankStream, compute_ready
from wenet_lite.host.malloc import keep_freed_memory
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking, check_chunking
from wenet_lite.model.posenc import WENET_MAX_POSITIONS
from wenet_lite.model.state import EncoderState, StateBatcher, StatePool
from wenet_lite.model.subsampling import (
    min_input_frames,
    output_length,
    subsampling_layers,
    window_size,
)
from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.runtime.endpoint import VAD_RULE, EndpointConfig, detect_endpoint
from wenet_lite.runtime.engines import Engine
from wenet_lite.runtime.result import Result, make_result, merge_results, punctuated, spell
from wenet_lite.search.context import ContextGraph, hotword_phrases, word_starts
from wenet_lite.search.ctc_search import (
    ChunkPath,
    Hypothesis,
    StreamingGreedySearch,
    StreamingPrefixBeamSearch,
    greedy_chunks,
    penalize_blank,
)
from wenet_lite.search.options import SearchOptions
from wenet_lite.search.rescore import Segment, check_decoder, rescore
from wenet_lite.search.transducer_search import TransducerSearch, TransducerState, check_transducer
from wenet_lite.vad.online import SpeechEvent, SpeechTracker, track
from wenet_lite.vad.silero import RATE as VAD_RATE
from wenet_lite.vad.silero import SileroVad, VadOptions

__all__ = ["STREAM_CHUNKING", "Stream", "StreamCursor", "StreamingRecognizer"]

STREAM_CHUNKING = Chunking(16, -1)
"""The default of ``StreamingRecognizer`` and `wenet-lite stream`: 640 ms, all history."""
_SOXR_QUALITY = "HQ"  # as features.audio.load_audio, so streamed and offline samples agree
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
        self.vad: Optional[SpeechTracker] = None
        """the stream's VAD (rule "vad" ends its segments), or None"""
        if options is not None:
            recognizer.require_vad()
            self.vad = SpeechTracker(options)
        self._speech: List[SpeechEvent] = []
        self._context = hotwords if hotwords is not None else recognizer.models.context
        self.fbank = FbankStream(recognizer.cfg.features, recognizer.device)
        """Online features (computed for all ready streams at once by ``decode_streams``, on
        the engine's device); frames before the next window are discarded as decoding goes."""
        self._resampler: Optional[soxr.ResampleStream] = None
        self._input_rate: Optional[int] = None
        self._next_frame = 0  # first input frame of the next chunk's window
        self._kept_from = 0  # fbank frames before this are discarded
        self._closed: List[Tuple[Hypothesis, int, int]] = []  # (hyp, first frame, frames)
        self._finals: List[Result] = []  # results of self._closed[: len(self._finals)]
        self._pending: List[Tuple[int, Segment]] = []  # closed segments awaiting rescoring
        self._done = False
        self._slot: Optional[int] = None
        self._leave: Optional[weakref.finalize] = None
        pool = recognizer.pool
        if pool is not None:  # the state lives in the recogniser's slots until the stream ends
            self._slot = pool.join()
            self._leave = weakref.finalize(self, pool.leave, self._slot)
        self._start_segment()

    def _start_segment(self) -> None:
        rec = self._rec
        if self._slot is not None:
            assert rec.pool is not None
            rec.pool.reset(self._slot)
        else:
            self._state: EncoderState = rec.engine.init_state(1)
        self._search = rec.new_search(self._context)
        self._hyp = Hypothesis([], 0.0, [], 1.0)
        self._nbest: List[Hypothesis] = []  # the search's n-best (attention rescoring)
        self._encoded: List[torch.Tensor] = []  # (C, D) encoder outputs (attention rescoring)
        self._segment_start = self._next_frame // rec.subsampling_rate  # encoder frame
        self._segment_frames = 0  # encoder frames decoded in this segment
        self._trailing_blanks = 0

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Append (N,) mono float samples in [-1, 1] at ``sample_rate`` Hz (any rate; it must
        not change within a stream). Values beyond full scale are clipped, as on file input.
        Integer samples (e.g. int16 PCM) are refused: clipped to [-1, 1] they would be noise."""
        if self.fbank.finished:
            raise RuntimeError("accept_waveform called after input_finished")
        kind = np.asarray(samples).dtype.kind
        if kind not in "f":
            raise ValueError(
                f"accept_waveform takes float samples in [-1, 1], got {np.asarray(samples).dtype}"
                + (": divide 16-bit PCM by 32768" if kind in "iu" else "")
            )
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"expected mono samples of shape (N,), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("samples contain NaN or inf")
        target = self.fbank.cfg.sample_rate
        if self._input_rate is None:
            self._input_rate = sample_rate
            if sample_rate != target:
                self._resampler = soxr.ResampleStream(
                    sample_rate, target, 1, dtype="float32", quality=_SOXR_QUALITY
                )
        elif sample_rate != self._input_rate:
            raise ValueError(
                f"a stream's sample rate cannot change: got {sample_rate} Hz after "
                f"{self._input_rate} Hz"
            )
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        self._take_audio(np.clip(x, -1.0, 1.0))

    def _take_audio(self, x: np.ndarray) -> None:
        self.fbank.accept_waveform(self.fbank.cfg.sample_rate, x)
        if self.vad is not None:
            self.vad.accept(x)

    def input_finished(self) -> None:
        """No more audio: the rest is decoded (a last partial chunk included) and closed."""
        if self.fbank.finished:
            return
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros(0, np.float32), last=True)
            self._take_audio(np.clip(tail, -1.0, 1.0))
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
    def greedy(self) -> Optional[StreamingGreedySearch]:
        """The open segment's greedy search (None: it searches with the prefix beam)."""
        return self._search if isinstance(self._search, StreamingGreedySearch) else None

    @property
    def recognizer(self) -> StreamingRecognizer:
        """The recogniser that created this stream (and alone may decode it)."""
        return self._rec

    @property
    def state(self) -> EncoderState:
        """The encoder state, a batch of one."""
        if self._slot is not None:
            assert self._rec.pool is not None
            return self._rec.pool.gather(torch.tensor([self._slot], device=self._rec.device))
        return self._state

    @property
    def slot(self) -> Optional[int]:
        """Its slot in the recogniser's :class:`StatePool` (None: it holds its state, or it
        is done)."""
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

    def take_pending(self) -> List[Tuple[int, Segment]]:
        """The closed segments that wait for attention rescoring, as (index, segment); taken
        by the recogniser, which hands each one's best back through :meth:`rescored`."""
        pending, self._pending = self._pending, []
        return pending

    def rescored(self, index: int, hyp: Hypothesis) -> None:
        """The rescored best hypothesis of closed segment ``index``."""
        _, first, frames = self._closed[index]
        self._closed[index] = (hyp, first, frames)

    @property
    def buffered_frames(self) -> int:
        """fbank frames held in memory."""
        return self.fbank.num_frames_ready - self._kept_from

    @property
    def final_results(self) -> List[Result]:
        """Closed segments that hold at least one token, in order (attention rescoring: each
        rescored, if :meth:`StreamingRecognizer.decode_streams` has not done so already)."""
        if self._pending:
            self._rec.rescore_pending([self])
        for closed in self._closed[len(self._finals) :]:  # spelled once, when first asked for
            final = self._make_result(*closed, is_final=True)
            self._finals.append(punctuated(final, self._rec.punctuator))
        return list(self._finals)

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

    def advance(
        self,
        log_probs: torch.Tensor,
        state: Optional[EncoderState],
        encoded: Optional[torch.Tensor],
        path: ChunkPath,
    ) -> None:
        """Take one decoded chunk (the recogniser's call): (n, V) log-probs of its valid
        frames, the new state, for attention rescoring the (n, D) encoder output, and the
        chunk's greedy path (:func:`greedy_chunks`, found for the whole batch at once): the
        greedy search takes it, the prefix beam the log-probs. ``state`` None: the recogniser
        wrote it into the stream's slot."""
        rec = self._rec
        if state is not None:
            self._state = state
        if isinstance(self._search, StreamingGreedySearch):
            found = self._search.accept_path(path)  # only the new tokens left the device
        elif isinstance(self._search, TransducerState):
            found = self._search.hypotheses()  # the recogniser stepped it with the batch
        else:
            found = self._search.accept(log_probs)  # the n-best, best first
        self._hyp = found[0]
        if encoded is not None:  # rescoring: the search is the prefix beam, found its n-best
            self._nbest = found
            self._encoded.append(encoded)
        n = path.num_frames
        if path.last_token >= 0:
            self._trailing_blanks = n - 1 - path.last_token
        else:
            self._trailing_blanks += n
        self._segment_frames += n
        self._next_frame += rec.chunk_size * rec.subsampling_rate
        self._kept_from = min(self._next_frame, self.fbank.num_frames_ready)
        self.fbank.discard_before(self._kept_from)
        frame_s = rec.subsampling_rate * rec.frame_shift_s
        heard_quiet = False
        if self.vad is not None:  # its events up to this chunk's end (decode_streams ran it)
            events = self.vad.take(self._next_frame * rec.hop_samples)
            self._keep_speech(events)
            heard_quiet = any(e.kind == "stopped" for e in events)
        ended = detect_endpoint(
            rec.endpoint,
            self._hyp.num_tokens > 0,
            0.0 if self.vad is not None else self._trailing_blanks * frame_s,  # rules 1, 2 off
            self._segment_frames * frame_s,
        )
        if heard_quiet:
            ended = VAD_RULE
        limit = rec.max_segment_frames
        if not ended and limit and self._segment_frames + rec.chunk_size > limit:
            _log.info(
                "a segment reached %d encoder frames (%.0f s) without an endpoint: ended there, "
                "where the absolute positions of this model (WeNet's) end", self._segment_frames,
                self._segment_frames * frame_s,
            )  # fmt: skip
            ended = 4
        if ended:
            self._close_segment()
            self._start_segment()
        self._check_done()

    @property
    def transducer_state(self) -> TransducerState:
        """The transducer search of the open segment (transducer modes only)."""
        assert isinstance(self._search, TransducerState), "a transducer mode's stream"
        return self._search

    def _close_segment(self) -> None:
        if self._hyp.num_tokens:
            self._closed.append((self._hyp, self._segment_start, self._segment_frames))
            if self._encoded:
                segment = Segment(self._nbest, torch.cat(self._encoded))  # (S, D)
                self._pending.append((len(self._closed) - 1, segment))
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
            if self._leave is not None:  # its slot is free for another stream
                self._leave()
                self._slot = None
            self._state = self._rec.engine.init_state(0)  # free the caches


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
    ) -> None:
        if not engine.chunking.streaming:
            raise ValueError(f"streaming needs a chunk size >= 1, got {engine.chunking.chunk_size}")
        chunking = engine.chunking
        check_chunking(cfg.encoder, chunking, cached=True, source=source)
        keep_freed_memory()  # batched steps reuse freed activations (wenet_lite/host/malloc.py)
        self.engine: Engine = engine
        """runs the chunks (runtime/engines.py)"""
        self.model = model if model is not None else engine.model
        self.cfg, self.tokenizer = cfg, tokenizer
        self.source = source
        self.chunking = chunking
        self.options = (options or SearchOptions()).resolved(cfg.decode)
        self.endpoint = endpoint if endpoint is not None else EndpointConfig()
        self.punctuator: Optional[Punctuator] = None
        """cases and punctuates final results (``open_recognizer(punct=)``)"""
        self._layers = subsampling_layers(cfg.encoder.subsampling_rate)
        self.subsampling_rate: int = cfg.encoder.subsampling_rate
        self.window_size: int = window_size(chunking.chunk_size, self._layers)
        """W: input frames of one chunk's window"""
        self.min_window_size: int = min_input_frames(self._layers)
        """input frames that give one encoder frame: a shorter final window gives nothing"""
        self.frame_shift_s: float = cfg.features.frame_shift_ms / 1000
        self.hop_samples: int = round(cfg.features.sample_rate * self.frame_shift_s)
        """samples per fbank frame"""
        self.vad_options: Optional[VadOptions] = self.endpoint.vad_options()
        """the VAD of every stream (rule "vad" of ``endpoint``), or None"""
        self._vad: Optional[SileroVad] = None
        if self.vad_options is not None:
            self.require_vad()  # a missing VAD is said now, not at the first stream
        self.max_segment_frames: int = WENET_MAX_POSITIONS if cfg.encoder.pos_enc == "wenet" else 0
        """encoder frames after which a segment ends without an endpoint (0: never); WeNet's
        absolute positions stop at its table's end"""
        self._batcher = StateBatcher()
        self.device, self.dtype = engine.device, engine.dtype  # e.g. a bfloat16 model
        if slots is None:  # on a GPU the states stay there; on the CPU a step reuses its batch
            slots = torch.device(self.device).type == "cuda" and chunking.left_chunks >= 0
        if slots and chunking.left_chunks < 0:
            raise ValueError("slots hold fixed-size caches: give left chunks >= 0")
        self.pool: Optional[StatePool] = StatePool(engine.init_state) if slots else None
        """the streams' states in one batched tensor, a slot each (fixed caches; by default
        on CUDA), or None: each stream holds its own"""
        self._frame_seconds = self.subsampling_rate * self.frame_shift_s
        self._growth_warning = int(HISTORY_WARNING_SECONDS / self._frame_seconds)
        self._warned_growth = chunking.left_chunks >= 0  # a fixed cache never grows
        self.models = self.options.load(tokenizer)  # the word LM and hotwords, if any
        self._transducer: Optional[TransducerSearch] = None
        if self.options.transducer:
            if self.model is None:
                raise FieldError(
                    f"{literal(source)} holds the encoder only: {{mode}} needs the transducer "
                    "head, so stream the model file", mode=Setting("mode", self.options.mode),
                )  # fmt: skip
            check_transducer(self.model, source, self.options.mode)
            assert self.model.transducer is not None
            beam = self.options.beam_size if self.options.mode == "transducer_beam" else None
            self._transducer = TransducerSearch(self.model.transducer, beam,
                                                self.options.max_symbols)  # fmt: skip
        if self.options.rescoring:
            if self.model is None:
                raise ValueError(
                    f'{source} holds the encoder only: mode="attention_rescoring" needs the '
                    "attention decoder, so stream the model file"
                )
            check_decoder(self.model, source)

    def settings_record(self) -> Dict[str, Any]:
        """The settings for summaries (``summary.json``, `stream --json`'s last line)."""
        return {
            "model": self.source,
            "chunking": dataclasses.asdict(self.chunking),
            "engine": self.engine.name,
            "search": dataclasses.asdict(self.options),
            "endpoint": dataclasses.asdict(self.endpoint),
            "describe": f"search {self.options.describe()}, {self.chunking.describe()}, "
            + ("streamed" if self.endpoint.enabled else "streamed, no endpointing")
            + (", VAD endpoints" if self.vad_options is not None else ""),
        }

    @property
    def chunk_size(self) -> int:
        """C, encoder frames per chunk."""
        return self.chunking.chunk_size

    @property
    def left_chunks(self) -> int:
        """Chunks of history each chunk sees (-1: all)."""
        return self.chunking.left_chunks

    def create_stream(
        self, hotwords: Optional[ContextGraph] = None, vad: Optional[VadOptions] = None
    ) -> Stream:
        """A new stream; ``hotwords``: its own graph (:meth:`hotwords_graph`) instead of the
        recognizer's list; ``vad``: its own VAD settings (its turns end its segments) instead
        of the recognizer's (``endpoint.vad_silence``)."""
        return Stream(self, hotwords, vad)

    def require_vad(self) -> SileroVad:
        """The VAD the streams share (loaded once); VadError naming what is missing."""
        if self._vad is None:
            rate = self.cfg.features.sample_rate
            if rate != VAD_RATE:
                raise ValueError(f"the VAD runs on {VAD_RATE} Hz audio; this model's features "
                                 f"are at {rate} Hz")  # fmt: skip
            self._vad = SileroVad()
        return self._vad

    def hotwords_graph(self, lines: Sequence[str], source: str = "hotwords") -> ContextGraph:
        """A hotword graph for one stream: the recognizer's phrases (``options.hotwords``) and
        ``lines`` (``PHRASE`` or ``PHRASE :SCORE``; ``options.hotwords_score`` per token
        otherwise). ValueError naming ``source`` for a bad line, or a greedy recognizer."""
        if not self.options.takes_hotwords:
            raise ValueError(
                f"{source}: hotwords need a beam search (mode=prefix_beam or transducer_beam); "
                "this recognizer searches greedily"
            )
        tokenizer = self.require_tokenizer()
        own = self.models.context.phrases if self.models.context is not None else []
        added = hotword_phrases(lines, tokenizer, self.options.hotwords_score, source)
        return ContextGraph(own + added, word_starts(tokenizer))

    def decode_streams(self, streams: Sequence[Stream]) -> List[Stream]:
        """Decode one chunk of every ready stream in ONE batched encoder call.

        Streams that are not ready are skipped. Each stream's result equals decoding it alone.
        Returns the streams that were decoded.
        """
        ready = [s for s in streams if s.is_ready]
        if len({id(s) for s in ready}) != len(ready):
            raise ValueError("decode_streams got the same stream twice")
        if not ready:
            self.rescore_pending(streams)
            return []
        for s in ready:
            if s.recognizer is not self:
                raise ValueError("a stream can only be decoded by the recognizer that created it")
        compute_ready([s.fbank for s in ready])  # every ready stream's new frames, one call
        heard = [s for s in ready if s.vad is not None]
        if heard:  # every VAD up to its chunk's end, one model call a window
            track(self.require_vad(), [s.vad for s in heard], [s.chunk_end_sample for s in heard])
        feats, lens = self._batch_windows(ready)  # (B, W, F), (B,)
        slots = None
        if self.pool is not None:
            slots = torch.tensor([s.slot for s in ready], device=self.device)
            state = self.pool.gather(slots)
        else:
            state = self._batcher.stack([s.state for s in ready])
        encoded: Optional[torch.Tensor] = None
        if self.options.rescoring or self._transducer is not None:
            encoded, log_probs, new_state = self.engine.run_encoder(feats, lens, state)
        else:
            log_probs, new_state = self.engine.run(feats, lens, state)  # (B, C, V)
        log_probs = penalize_blank(log_probs, self.options.blank_penalty)
        valid = [output_length(n, self._layers) for n in lens.tolist()]
        if not self._warned_growth and new_state.att_cache.size(3) > self._growth_warning:
            self._warned_growth = True
            _log.warning(
                Says("a stream holds %d s of history in its attention cache ({all}, no endpoint "
                     "yet): time and memory per chunk grow with it; {four} or endpointing keep "
                     "them flat", all=Setting("left_chunks", -1), four=Setting("left_chunks", 4)),
                round(self._growth_warning * self._frame_seconds),
            )  # fmt: skip
        searches = [s.greedy for s in ready]  # None: the prefix beam
        last_ids = torch.tensor([g.last_id if g else BLANK_ID for g in searches])
        scores = torch.tensor([g.score if g else 0.0 for g in searches], dtype=torch.float64)
        paths = greedy_chunks(log_probs, torch.tensor(valid), last_ids, scores)
        if self.pool is not None:
            assert slots is not None
            self.pool.scatter(slots, new_state)
            owns: List[Optional[EncoderState]] = [None] * len(ready)
        else:
            owns = list(self._batcher.unstack(new_state))
        if self.options.beam:  # the beam searches on the host: one copy for the batch
            log_probs = log_probs.cpu()
        if self._transducer is not None:  # every stream's frames, one joiner call a step
            assert encoded is not None
            self._transducer.step(encoded.float(), valid, [s.transducer_state for s in ready])
            encoded = None  # (kept for attention rescoring only)
        for i, (s, own) in enumerate(zip(ready, owns)):
            n = valid[i]
            s.advance(log_probs[i, :n], own, None if encoded is None else encoded[i, :n], paths[i])
        self.rescore_pending(streams)
        return ready

    def decode_until_done(self, streams: Sequence[Stream]) -> None:
        """Decode every ready chunk of ``streams``, batched, until none is ready."""
        while self.decode_streams(streams):
            pass

    def rescore_pending(self, streams: Sequence[Stream]) -> None:
        """Rescore the closed segments of ``streams`` that wait for it, in one decoder call."""
        waiting = [(s, index, seg) for s in streams for index, seg in s.take_pending()]
        if not waiting:
            return
        assert self.model is not None and self.model.decoder is not None, "checked in __init__"
        opts = self.options
        found = rescore(
            self.model.decoder, [seg for _, _, seg in waiting], opts.ctc_weight, opts.reverse_weight
        )
        for (s, index, _), hyps in zip(waiting, found):
            s.rescored(index, hyps[0])

    def new_search(
        self, context: Optional[ContextGraph]
    ) -> Union[StreamingGreedySearch, StreamingPrefixBeamSearch, TransducerState]:
        opts = self.options
        if self._transducer is not None:  # advanced by decode_streams, for the whole batch
            return self._transducer.new_state(context)
        if opts.mode == "greedy":
            return StreamingGreedySearch()
        assert opts.beam_size is not None, "resolved in __init__"
        nbest = opts.nbest if opts.rescoring else 1
        assert nbest is not None, "resolved in __init__"
        return StreamingPrefixBeamSearch(
            opts.beam_size, nbest, scorer=self.models.scorer, token_min_logp=opts.token_min_logp,
            context=context,
        )  # fmt: skip

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
