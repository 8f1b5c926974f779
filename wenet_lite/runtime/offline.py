"""The offline recogniser: whole utterances in, hypotheses and results out.

It is the streaming recogniser's sibling for audio that is all there at once (`decode`,
`transcribe` in full context). One of three encoder modes runs, as its ``DecodeOptions`` say:
full context (chunk size 0); chunk-masked (the whole utterance in one forward with the
streaming attention mask); ``simulate_streaming`` (chunk by chunk with caches, on an engine
when one is given: what a streaming recogniser computes, over the streams' own features). An
utterance longer than ``max_window_seconds`` runs in bounded memory (``long_audio.py``).

Open one with :func:`wenet_lite.recognizer.open_recognizer` and full-context chunking (or a
``DecodeOptions``); the rules of engine and mode are checked there.

A whole file (`transcribe`, the server's uploads) is decoded by its speech spans
(:meth:`OfflineRecognizer.speech_spans`): with a VAD its speech regions, each an utterance of
its own, else all of it; :meth:`~OfflineRecognizer.span_results` puts each span's result in
file time, cased and punctuated by the recogniser's punctuator.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from wenet_lite.config import ExperimentConfig
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.audio import AudioError, resample
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking
from wenet_lite.punct.punctuator import Punctuator
from wenet_lite.runtime.engines import Engine
from wenet_lite.runtime.result import (
    Result,
    SpanStage,
    make_result,
    normalized,
    punctuated,
    shifted,
)
from wenet_lite.runtime.utterance import DecodeOptions, decode_batch, decode_long
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.rescore import check_decoder
from wenet_lite.search.transducer_search import check_transducer
from wenet_lite.vad.silero import RATE as VAD_RATE
from wenet_lite.vad.silero import SileroVad, VadOptions

__all__ = ["OfflineRecognizer", "SPAN_BATCH"]

SPAN_BATCH = 8
"""a file's speech spans decoded together in one padded batch"""


class OfflineRecognizer:
    """Recognition of whole utterances with one model, its search loaded once.

    Args:
        model, tokenizer, cfg: the model in memory (``load_model``'s triple).
        options: the encoder mode, search and batching (``DecodeOptions``); its search is
            resolved against the model's ``decode`` section here.
        engine: runs ``simulate_streaming`` chunk by chunk (``runtime/engines.py``); None: the
            model in eager PyTorch.
        source: what the model came from, for messages and summaries.
        vad: finds a whole file's speech regions (:meth:`speech_spans`), or None.
        vad_options: the VAD's threshold, shortest speech and silence, and padding.
        punctuator: cases and punctuates results, or None.
        itn: writes their numbers as digits (after punctuation), or None.
    Raises:
        ValueError: an engine without ``simulate_streaming`` or built for other chunking;
        attention rescoring without the model's decoder.
    """

    def __init__(
        self,
        model: ASRModel,
        tokenizer: Tokenizer,
        cfg: ExperimentConfig,
        options: Optional[DecodeOptions] = None,
        engine: Optional[Engine] = None,
        source: str = "the model",
        *,
        vad: Optional[SileroVad] = None,
        vad_options: Optional[VadOptions] = None,
        punctuator: Optional[Punctuator] = None,
        itn: Optional[SpanStage] = None,
    ) -> None:
        options = options or DecodeOptions()
        if engine is not None and not options.simulate_streaming:
            raise ValueError(f"the {engine.name} engine streams: it needs simulate_streaming")
        if engine is not None and engine.chunking != options.chunking:
            raise ValueError(
                f"the {engine.name} engine was built for {engine.chunking.describe()}, decoding "
                f"asks for {options.chunking.describe()}"
            )
        search = options.search.resolved(cfg.decode)
        if search.rescoring:
            check_decoder(model, source)
        if search.transducer:
            check_transducer(model, source, search.mode)
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.options: DecodeOptions = dataclasses.replace(options, search=search)
        self.engine = engine
        self.source = source
        self.punctuator: Optional[Punctuator] = punctuator
        """cases and punctuates results, or None"""
        self.itn: Optional[SpanStage] = itn
        """writes the results' numbers as digits, or None"""
        self.vad: Optional[SileroVad] = vad
        """finds a whole file's speech regions, or None"""
        self.vad_options: VadOptions = vad_options or VadOptions()
        self.models = search.load(tokenizer)  # the word LM and hotwords, if any
        self.sample_rate: int = cfg.features.sample_rate
        self.frame_shift_s: float = cfg.features.frame_shift_ms / 1000
        self.subsampling_rate: int = model.encoder.subsampling.rate

    @property
    def chunking(self) -> Chunking:
        return self.options.chunking

    @property
    def engine_name(self) -> str:
        """What runs the encoder: an engine's name, else ``torch``."""
        return self.engine.name if self.engine is not None else "torch"

    def features(self, samples: np.ndarray, rate: int, name: str = "audio") -> torch.Tensor:
        """(T_in, F) fbank of mono float samples at ``rate`` Hz (resampled to the model's);
        with ``simulate_streaming`` the streaming recogniser's features, bit for bit."""
        from wenet_lite.features.fbank import compute_fbank
        from wenet_lite.features.stream_fbank import offline_fbank

        if rate != self.sample_rate:
            samples = resample(samples, rate, self.sample_rate)
            if samples.size == 0:
                raise AudioError(
                    name, "empty", f"audio shorter than one sample at {self.sample_rate} Hz"
                )
        if self.options.simulate_streaming:
            return offline_fbank(samples, self.cfg.features)
        return compute_fbank(samples, self.sample_rate, self.cfg.features)

    def recognize(self, samples: np.ndarray, rate: int, name: str = "audio") -> List[Hypothesis]:
        """The n best hypotheses (best first; one for greedy) of one utterance's samples; one
        longer than ``max_window_seconds`` in bounded memory."""
        feats = self.features(samples, rate, name)
        if self.needs_windows(feats):
            return self.recognize_long(feats, name)
        return self.recognize_batch([feats])[0]

    def needs_windows(self, feats: torch.Tensor) -> bool:
        """Whether an utterance of these (T_in, F) features is decoded in windows
        (:meth:`recognize_long`): longer than ``max_window_seconds`` (full context)."""
        seconds = feats.size(0) * self.frame_shift_s
        return self.engine is None and seconds > self.options.max_window_seconds

    def recognize_many(
        self, feats: Iterable[torch.Tensor], batch: int, name: str = "audio"
    ) -> List[List[Hypothesis]]:
        """The n best of each utterance's features, in order: short ones decoded together in
        padded batches of up to ``batch``, long ones alone in windows; the features are taken
        as they come, so only one batch of them is held at a time."""
        found: List[List[Hypothesis]] = []
        waiting: List[Tuple[int, torch.Tensor]] = []

        def flush() -> None:
            for (k, _), hyps in zip(waiting, self.recognize_batch([f for _, f in waiting])):
                found[k] = hyps
            waiting.clear()

        for f in feats:
            found.append([])
            if self.needs_windows(f):
                found[-1] = self.recognize_long(f, name)
                continue
            waiting.append((len(found) - 1, f))
            if len(waiting) == batch:
                flush()
        if waiting:
            flush()
        return found

    def recognize_batch(self, feats: Sequence[torch.Tensor]) -> List[List[Hypothesis]]:
        """The n best of each utterance of features (T_in, F), decoded together in one padded
        batch (on the engine, if any)."""
        with self._eval(), torch.inference_mode():
            return decode_batch(self.model, list(feats), self.options, self.models, self.engine)

    def recognize_long(self, feats: torch.Tensor, name: str = "audio") -> List[Hypothesis]:
        """One utterance's features in overlapping windows (full context) or chunk by chunk
        (chunked modes), in bounded memory (``long_audio.py``)."""
        feats = feats.to(self.model.encoder.cmvn.mean.device)
        with self._eval(), torch.inference_mode():
            return decode_long(self.model, feats, self.options, self.models, self.cfg, name)

    def speech_spans(self, samples: np.ndarray, rate: int) -> List[Tuple[int, int]]:
        """What of a whole file to decode, as (start, end) samples at ``rate``: its speech
        regions by the VAD, or all of it (no VAD, or all of it is speech)."""
        whole = [(0, int(samples.size))]
        if self.vad is None or not samples.size:
            return whole
        at_16k = samples if rate == VAD_RATE else resample(samples, rate, VAD_RATE)
        regions = self.vad.regions(at_16k, self.vad_options)
        if regions == [(0, at_16k.size)]:
            return whole
        scale = rate / VAD_RATE
        return [(round(a * scale), round(b * scale)) for a, b in regions]

    def span_results(
        self, spans: Sequence[Tuple[int, int]], found: Iterable[List[Hypothesis]], rate: int,
        pause: Optional[float] = None,
    ) -> List[Result]:  # fmt: skip
        """Each span's best hypothesis (``found``: each span's n best) as a final result in
        file time; spans where nothing was recognised are left out."""
        results = []
        for (start, _), hyps in zip(spans, found):
            if hyps and hyps[0].tokens:
                result = self.result(hyps[0], pause)
                results.append(shifted(result, start / rate) if start else result)
        return results

    def file_results(
        self, samples: np.ndarray, rate: int, name: str = "audio",
        pause: Optional[float] = None, progress: bool = False,
    ) -> List[Result]:  # fmt: skip
        """A whole file decoded by its speech spans (short ones in padded batches, long ones
        in windows), each span's result in file time: what `transcribe` computes in full
        context. ``progress``: a bar over the spans when there are many."""
        from tqdm import tqdm

        spans = self.speech_spans(samples, rate)
        shown = tqdm(spans, desc=name, unit="region", leave=False,
                     disable=not progress or len(spans) < 20)  # fmt: skip
        feats = (self.features(samples[a:b], rate, name) for a, b in shown)
        return self.span_results(spans, self.recognize_many(feats, SPAN_BATCH, name), rate, pause)

    def result(self, hyp: Hypothesis, pause: Optional[float] = None) -> Result:
        """The hypothesis as a final :class:`Result` with word times (a new word where
        ``pause`` seconds pass between tokens) and hotword marks."""
        result = make_result(
            hyp, self.tokenizer, 0, 0, self.subsampling_rate, self.frame_shift_s, True,
            self.models.context, pause=pause,
        )  # fmt: skip
        return normalized(punctuated(result, self.punctuator), self.itn)

    @contextmanager
    def _eval(self) -> Iterator[None]:
        """The model in eval mode, its mode restored after (a trainer may decode mid-training)."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)
