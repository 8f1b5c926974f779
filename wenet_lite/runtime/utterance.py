"""One utterance's (or a padded batch's) features to hypotheses: the encoder in one of its modes,
then the search and, for attention rescoring, the decoder. What `decode` runs per batch and
`transcribe` per file; no manifests here (``evaluation/decode_set.py`` reads and scores sets).

Encoder modes: full context (chunk size 0); chunk-masked (the whole utterance in one forward
with the streaming attention mask); ``simulate_streaming`` (chunk by chunk with caches, what a
streaming recogniser computes). An utterance longer than ``max_window_seconds`` runs in
bounded memory (``long_audio.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import List, Optional

import torch

from wenet_lite.config import ExperimentConfig
from wenet_lite.config.fields import FieldError, Says, Setting
from wenet_lite.model import ASRModel
from wenet_lite.model.chunking import Chunking
from wenet_lite.runtime.engines import Engine, stream_log_probs
from wenet_lite.runtime.long_audio import long_encoder_output, long_log_probs
from wenet_lite.search.ctc_search import Hypothesis
from wenet_lite.search.options import SearchModels, SearchOptions
from wenet_lite.search.rescore import Segment, rescore
from wenet_lite.search.stream_search import SearchChunk, make_search

__all__ = ["DecodeOptions", "decode_batch", "decode_long", "search_whole"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodeOptions:
    """What `wenet-lite decode` runs: a search over an encoder mode, in batches."""

    search: SearchOptions = SearchOptions()
    chunking: Chunking = Chunking()
    """chunk size 0: full context; else chunk-masked, or cached with ``simulate_streaming``"""
    simulate_streaming: bool = False
    """run the encoder chunk by chunk with caches instead of one chunk-masked forward"""
    batch_seconds: float = 100.0
    """padded audio seconds per batch"""
    max_window_seconds: float = 30.0
    """a longer utterance is decoded in bounded memory (``long_audio.py``): chunked modes chunk
    by chunk with the cache, full context in overlapping windows of this many seconds"""
    window_overlap_seconds: float = 4.0
    """full context: seconds two windows share; each keeps its middle"""
    window_progress: bool = True
    """a bar on stderr over the windows of a long utterance"""

    def __post_init__(self) -> None:
        if self.simulate_streaming and not self.chunking.streaming:
            raise FieldError("{sim} needs {chunk} > 0", sim=Setting("simulate_streaming", True),
                             chunk=Setting("chunk_size"))  # fmt: skip
        if self.batch_seconds <= 0:
            raise ValueError(f"batch seconds must be positive, got {self.batch_seconds}")
        if not 0 <= self.window_overlap_seconds < self.max_window_seconds:
            raise ValueError(
                f"window overlap ({self.window_overlap_seconds} s) must be >= 0 and below the "
                f"window ({self.max_window_seconds} s)"
            )

    def describe(self) -> str:
        text = f"search {self.search.describe()}, {self.chunking.describe()}"
        if self.chunking.streaming:
            text += ", simulated streaming" if self.simulate_streaming else ", chunk-masked"
        return text


def decode_batch(
    model: ASRModel,
    feats: List[torch.Tensor],
    options: DecodeOptions,
    models: SearchModels,
    engine: Optional[Engine] = None,
) -> List[List[Hypothesis]]:
    """The n best hypotheses of each utterance (one for greedy search)."""
    encoder = model.encoder
    device = encoder.cmvn.mean.device
    lens = torch.tensor([f.size(0) for f in feats])
    # Very short utterances give no encoder frame; pad so the conv front-end still runs.
    width = max(int(lens.max()), encoder.subsampling.right_context + 1)
    batch = feats[0].new_zeros(len(feats), width, feats[0].size(1))  # (B, T_in, F)
    for i, f in enumerate(feats):
        batch[i, : f.size(0)] = f
    batch, lens = batch.to(device), lens.to(device)
    c, n = options.chunking.chunk_size, options.chunking.left_chunks
    rescoring, transducer = options.search.rescoring, options.search.transducer
    out: Optional[torch.Tensor] = None  # (B, T, D), for attention rescoring and the transducer
    if engine is not None:  # one utterance of any length streams in bounded memory too
        log_probs, out = stream_log_probs(engine, model, batch, lens, rescoring or transducer)
        out_lens = encoder.subsampling.output_lengths(lens)
    elif options.simulate_streaming:
        out = encoder.forward_chunk_by_chunk(batch, c, n, lens)  # (B, T, D)
        log_probs, out_lens = model.ctc(out), encoder.subsampling.output_lengths(lens)
    else:
        out, out_lens = encoder(batch, lens, c, n)  # (B, T, D)
        log_probs = model.ctc(out)  # (B, T, V)
    found = search_whole(options.search, models, model, log_probs, out, out_lens)
    if not rescoring:
        return found
    assert out is not None and model.decoder is not None, "OfflineRecognizer checks the decoder"
    segments = [Segment(hyps, out[i, :t]) for i, (hyps, t) in enumerate(zip(found, out_lens))]
    search = options.search
    return rescore(model.decoder, segments, search.ctc_weight, search.reverse_weight)


def search_whole(
    options: SearchOptions,
    models: SearchModels,
    model: Optional[ASRModel],
    log_probs: Optional[torch.Tensor],
    out: Optional[torch.Tensor],
    lens: torch.Tensor,
) -> List[List[Hypothesis]]:
    """The n best of each of B whole utterances by the search ``options`` name: one step of
    the streaming search over all their frames. log_probs (B, T, V) (None: a transducer
    search, which reads the encoder's), out (B, T, D), lens (B,)."""
    search = make_search(options, models, model, "the model")
    states = [search.new_state(models.context) for _ in range(lens.size(0))]
    chunk = SearchChunk(log_probs, out if search.needs_encoder else None, lens.tolist())
    return [s.hypotheses(options.nbest or 1) for s in search.step(chunk, states)]


def decode_long(
    model: ASRModel,
    feats: torch.Tensor,
    options: DecodeOptions,
    models: SearchModels,
    cfg: ExperimentConfig,
    name: str,
) -> List[Hypothesis]:
    """One utterance longer than the window, in bounded memory (``long_audio.py``)."""
    frame_s = model.encoder.subsampling.rate * cfg.features.frame_shift_ms / 1000
    window = max(1, int(options.max_window_seconds / frame_s))
    overlap = int(options.window_overlap_seconds / frame_s)
    c, n = options.chunking.chunk_size, options.chunking.left_chunks
    if c > 0 and n < 0:
        _log.warning(
            Says("%s: %.1f min chunk by chunk with all history ({all}): time grows with the "
                 "square of its length and memory with it; {four} keeps both flat",
                 all=Setting("left_chunks", -1), four=Setting("left_chunks", 4)),
            name, feats.size(0) * cfg.features.frame_shift_ms / 60000,
        )  # fmt: skip
    if options.search.rescoring:
        _log.warning(
            Says("%s: longer than {window} (%.0f s): its n-best is not rescored (the decoder "
                 "would attend over all of it); its CTC prefix beam result is kept",
                 window=Setting("max_window_seconds")),
            name, options.max_window_seconds,
        )  # fmt: skip
    label = name if options.window_progress else None
    if options.search.transducer:
        out = long_encoder_output(model, feats, c, n, window, overlap, progress=label)  # (T, D)
        lens = torch.tensor([out.size(0)])
        return search_whole(options.search, models, model, None, out[None], lens)[0]
    log_probs = long_log_probs(model, feats, c, n, window, overlap, progress=label)  # (T, V)
    lens = torch.tensor([log_probs.size(0)])
    return search_whole(options.search, models, model, log_probs[None], None, lens)[0]
