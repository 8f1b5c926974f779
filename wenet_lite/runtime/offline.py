"""The offline recogniser: whole utterances in, hypotheses and results out.

It is the streaming recogniser's sibling for audio that is all there at once (`decode`,
`transcribe` in full context). One of three encoder modes runs, as its ``DecodeOptions`` say:
full context (chunk size 0); chunk-masked (the whole utterance in one forward with the
streaming attention mask); ``simulate_streaming`` (chunk by chunk with caches, on an engine
when one is given: what a streaming recogniser computes, over the streams' own features). An
utterance longer than ``max_window_seconds`` runs in bounded memory (``long_audio.py``).

Open one with :func:`wenet_lite.recognizer.open_recognizer` and full-context chunking (or a
``DecodeOptions``); the rules of engine and mode are checked there.
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
from wenet_lite.runtime.result import Result, make_result, punctuated
from wenet_lite.runtime.utterance import DecodeOptions, decode_batch, decode_long
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.rescore import check_decoder
from wenet_lite.search.transducer_search import check_transducer

__all__ = ["OfflineRecognizer"]


class OfflineRecognizer:
    """Recognition of whole utterances with one model, its search loaded once.

    Args:
        model, tokenizer, cfg: the model in memory (``load_model``'s triple).
        options: the encoder mode, search and batching (``DecodeOptions``); its search is
            resolved against the model's ``decode`` section here.
        engine: runs ``simulate_streaming`` chunk by chunk (``runtime/engines.py``); None: the
            model in eager PyTorch.
        source: what the model came from, for messages and summaries.
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
        self.punctuator: Optional[Punctuator] = None
        """cases and punctuates results (``open_recognizer(punct=)``)"""
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

    def result(self, hyp: Hypothesis, pause: Optional[float] = None) -> Result:
        """The hypothesis as a final :class:`Result` with word times (a new word where
        ``pause`` seconds pass between tokens) and hotword marks."""
        result = make_result(
            hyp, self.tokenizer, 0, 0, self.subsampling_rate, self.frame_shift_s, True,
            self.models.context, pause=pause,
        )  # fmt: skip
        return punctuated(result, self.punctuator)

    @contextmanager
    def _eval(self) -> Iterator[None]:
        """The model in eval mode, its mode restored after (a trainer may decode mid-training)."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)
