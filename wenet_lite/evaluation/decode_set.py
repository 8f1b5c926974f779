"""Batch decoding of a cuts manifest with WER/CER scoring: what `wenet-lite decode` runs.

Utterances are sorted by duration and decoded in padded batches (little padding, so batching
costs almost nothing and the encoder runs on large matrices) by an offline recogniser
(``runtime/offline.py``, opened by ``open_recognizer``), in one of
three encoder modes:

- full context (chunk size 0);
- chunk-masked: the whole utterance in one forward with the streaming attention mask;
- ``simulate_streaming``: chunk by chunk with caches (``forward_chunk_by_chunk``), exactly what
  a streaming recogniser computes, over the streams' own features (``offline_fbank``, equal to
  kaldi-native-fbank's within float rounding); it equals the chunk-masked mode up to float
  rounding.

An utterance whose audio cannot be read (missing, not audio, empty, truncated, NaN) is reported
with its file named and left out of the scores; the others are still decoded.

Outputs in ``out_dir``: ``hyp.txt`` (``id text``), ``details.txt`` (per utterance: WER line,
aligned ref/hyp/op rows, confidence, tokens with start times), ``summary.txt`` (settings,
WER, CER with S/D/I, utterance and failure counts, RTF), ``summary.json`` (the same as
numbers, with every setting), ``errors.txt`` for failures and, for prefix beam search with
nbest > 1, ``nbest.txt`` (``id rank log-probability text``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lhotse.cut import Cut

from wenet_lite.config import ExperimentConfig
from wenet_lite.data.manifest import cut_samples, cut_text, load_cuts
from wenet_lite.data.tokenizer import Tokenizer, normalize_text
from wenet_lite.evaluation.score import hyp_lines
from wenet_lite.evaluation.wer import (
    UtteranceScore,
    confidence_auc,
    format_details,
    format_summary,
    score_utterance,
    summary_record,
    words_right,
)
from wenet_lite.features.audio import AudioError
from wenet_lite.fileio import write_files_atomic
from wenet_lite.model import ASRModel
from wenet_lite.runtime.engines import Engine
from wenet_lite.runtime.offline import OfflineRecognizer
from wenet_lite.runtime.result import make_result, spell
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.search.ctc_search import Hypothesis, frames_to_seconds

__all__ = [
    "DecodeOptions",  # defined in utterance.py, re-exported: where decode_cuts takes it
    "DecodeReport",
    "UtteranceResult",
    "decode_cuts",
    "decode_model",
    "decode_set",
    "default_out_dir",
    "write_report",
]

_log = logging.getLogger(__name__)
Pathlike = Union[str, Path]


@dataclass(frozen=True)
class UtteranceResult:
    utt_id: str
    text: str
    hyp: Hypothesis
    pieces: List[str]
    """sentencepiece pieces of ``hyp.tokens``"""
    token_times: List[float]
    """seconds, one per token"""
    score: UtteranceScore
    nbest: List[Tuple[float, str]]
    """prefix_beam: (log-probability, text) of the n best, best first; [] for greedy"""
    hotwords: Optional[List[str]] = None
    """with hotwords: the words of ``hyp`` that matched hotword phrases cover (None without)"""
    word_confidences: Optional[List[float]] = None
    """each hypothesis word's confidence (``Word.confidence``), in order"""


@dataclass
class DecodeReport:
    results: List[UtteranceResult]
    failures: List[Tuple[str, str]]
    """(utterance id, error message naming the file)"""
    audio_seconds: float
    wall_seconds: float
    options: DecodeOptions
    engine: str = "torch"
    """what ran the encoder (runtime/engines.py)"""

    @property
    def rtf(self) -> float:
        """Wall seconds (audio reading and features included) per second of decoded audio."""
        return self.wall_seconds / max(self.audio_seconds, 1e-9)

    def summary_lines(self) -> List[str]:
        return [
            self.options.describe(),
            *format_summary([r.score for r in self.results]),
            self._confidence_line(),
            f"failed {len(self.failures)}",
            f"audio {self.audio_seconds:.2f} s, wall {self.wall_seconds:.2f} s, RTF {self.rtf:.4f}",
        ]

    def confidence_calibration(self) -> Tuple[Optional[float], int, int]:
        """The area under the ROC curve of "this hypothesis word is right" scored by the word's
        confidence, with the counts of right and wrong words it was measured on."""
        confidences: List[float] = []
        right: List[bool] = []
        for r in self.results:
            flags = words_right(r.score.alignment)
            if r.word_confidences is not None and len(r.word_confidences) == len(flags):
                confidences += r.word_confidences
                right += flags
        n_right = sum(right)
        return confidence_auc(confidences, right), n_right, len(right) - n_right

    def _confidence_line(self) -> str:
        auc, n_right, n_wrong = self.confidence_calibration()
        shown = "-" if auc is None else f"{auc:.3f}"
        return f"word confidence AUC {shown} (right {n_right}, wrong {n_wrong} hypothesis words)"

    def summary_record(self) -> Dict[str, Any]:
        """What ``summary.json`` holds besides the model and data: the settings (every
        option, and the line that describes them), the scores and the timing."""
        return {
            "command": "decode",
            "settings": {
                **dataclasses.asdict(self.options),
                "engine": self.engine,
                "describe": self.options.describe(),
            },  # fmt: skip
            **summary_record([r.score for r in self.results]),
            "word_confidence_auc": self.confidence_calibration()[0],
            "failed": len(self.failures),
            "audio_seconds": round(self.audio_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "rtf": round(self.rtf, 5),
        }


def decode_cuts(
    recognizer: OfflineRecognizer,
    data: Pathlike,
    out_dir: Pathlike,
    progress: bool = False,
) -> DecodeReport:
    """Decode the cuts in ``data`` (a dir holding cuts.jsonl.gz, or the file) with an offline
    recogniser (``open_recognizer(..., offline=DecodeOptions(...))``) and write ``hyp.txt``,
    ``details.txt``, ``summary.txt`` (and ``errors.txt``) to ``out_dir``. ``progress``: a bar
    over the audio on stderr."""
    cuts = list(load_cuts(data))
    report = decode_set(recognizer, cuts, progress)
    write_report(report, out_dir, {"model": recognizer.source, "data": str(data)})
    return report


def decode_model(
    model: ASRModel,
    tokenizer: Tokenizer,
    cfg: ExperimentConfig,
    cuts: Sequence[Cut],
    options: DecodeOptions,
    engine: Optional[Engine] = None,
    progress: bool = False,
) -> DecodeReport:
    """:func:`decode_set` with an offline recogniser over a model in memory (a trainer's, a
    test's); ``engine`` runs ``simulate_streaming`` (default the model in eager PyTorch)."""
    recognizer = OfflineRecognizer(model, tokenizer, cfg, options, engine)
    return decode_set(recognizer, cuts, progress)


def decode_set(
    recognizer: OfflineRecognizer, cuts: Sequence[Cut], progress: bool = False
) -> DecodeReport:
    """Decode lhotse cuts (see the module docstring): sorted by duration, in padded batches,
    an utterance longer than the window alone in bounded memory. ``progress``: a bar over the
    audio seconds on stderr."""
    options = recognizer.options
    results: List[UtteranceResult] = []
    failures: List[Tuple[str, str]] = []
    audio_seconds = 0.0
    start = time.perf_counter()
    long = [c for c in cuts if c.duration > options.max_window_seconds]
    short = [c for c in cuts if c.duration <= options.max_window_seconds]
    bar = None
    if progress:
        from tqdm import tqdm

        total = round(sum(c.duration for c in cuts), 1)
        bar = tqdm(total=total, unit="s", desc="decode", leave=False, file=sys.stderr)
    try:
        for batch in [[c] for c in long] + list(_batches(short, options.batch_seconds)):
            if bar is not None:
                bar.update(round(sum(c.duration for c in batch), 1))
            feats, kept = [], []
            for cut in batch:
                try:
                    samples = cut_samples(cut, recognizer.sample_rate)
                    feats.append(recognizer.features(samples, recognizer.sample_rate, cut.id))
                    kept.append(cut)
                except AudioError as e:
                    _log.warning("%s skipped: %s", cut.id, e)
                    failures.append((cut.id, str(e)))
            if not kept:
                continue
            if recognizer.engine is None and batch[0].duration > options.max_window_seconds:
                decoded = [recognizer.recognize_long(feats[0], batch[0].id)]
            else:
                decoded = recognizer.recognize_batch(feats)
            for cut, hyps in zip(kept, decoded):
                results.append(_utterance_result(cut, hyps, recognizer))
                audio_seconds += cut.duration
    finally:
        if bar is not None:
            bar.close()
    results.sort(key=lambda r: r.utt_id)
    wall = time.perf_counter() - start
    return DecodeReport(results, failures, audio_seconds, wall, options, recognizer.engine_name)


def _batches(cuts: Sequence[Cut], batch_seconds: float) -> Iterator[List[Cut]]:
    """Longest first (an out-of-memory batch shows up at once), at most ``batch_seconds`` of
    padded audio each (a longer utterance gets a batch of its own)."""
    batch: List[Cut] = []
    for cut in sorted(cuts, key=lambda c: c.duration, reverse=True):
        if batch and (len(batch) + 1) * batch[0].duration > batch_seconds:
            yield batch
            batch = []
        batch.append(cut)
    if batch:
        yield batch


def _utterance_result(
    cut: Cut, hyps: List[Hypothesis], recognizer: OfflineRecognizer
) -> UtteranceResult:
    tokenizer = recognizer.tokenizer
    hyp = hyps[0] if hyps else Hypothesis([], 0.0, [], 1.0)
    text = spell(tokenizer, hyp.tokens)
    times = frames_to_seconds(hyp.timestamps, recognizer.subsampling_rate, recognizer.frame_shift_s)
    score = score_utterance(cut.id, normalize_text(cut_text(cut)), text)
    pieces = [tokenizer.id_to_piece(i) for i in hyp.tokens]
    nbest = [(h.score, spell(tokenizer, h.tokens)) for h in hyps] if len(hyps) > 1 else []
    times = [round(t, 6) for t in times]
    hotwords = None
    if recognizer.models.context is not None:  # the words a whole hotword phrase covers
        hotwords = [w.text for w in recognizer.result(hyp).words if w.hotword]
    rate, shift = recognizer.subsampling_rate, recognizer.frame_shift_s
    words = make_result(hyp, tokenizer, 0, 0, rate, shift, True).words  # spoken, as scored
    confidences = [round(w.confidence, 4) for w in words]
    return UtteranceResult(cut.id, text, hyp, pieces, times, score, nbest, hotwords, confidences)


def write_report(
    report: DecodeReport, out_dir: Pathlike, inputs: Optional[Dict[str, str]] = None
) -> None:
    """``hyp.txt``, ``details.txt``, ``summary.txt``, ``summary.json`` (and ``nbest.txt``,
    ``errors.txt``) in ``out_dir``; ``inputs`` (e.g. model and data paths) head the summaries."""
    out = Path(out_dir)
    inputs = inputs or {}
    header = [f"{key} {value}" for key, value in inputs.items()]
    files = {
        "hyp.txt": hyp_lines({r.utt_id: r.text for r in report.results}),
        "details.txt": "".join("\n".join(_details(r)) + "\n\n" for r in report.results),
        "summary.txt": "\n".join([*header, *report.summary_lines()]) + "\n",
        "summary.json": json.dumps({**inputs, **report.summary_record()}, indent=1) + "\n",
    }
    if any(r.nbest for r in report.results):
        files["nbest.txt"] = "".join(
            f"{r.utt_id} {rank} {score:.4f} {text}".rstrip() + "\n"
            for r in report.results
            for rank, (score, text) in enumerate(r.nbest, 1)
        )
    if report.failures:
        files["errors.txt"] = "".join(f"{utt} {msg}\n" for utt, msg in report.failures)
    write_files_atomic(out, files)  # all or none: a full disk leaves the previous set
    errors = out / "errors.txt"
    if not report.failures and errors.exists():
        errors.unlink()  # a stale list from an earlier run would mislead


def _details(r: UtteranceResult) -> List[str]:
    tokens = " ".join(f"{t}@{s:.2f}" for t, s in zip(r.pieces, r.token_times))
    lines = [
        *format_details(r.score),
        f"{r.utt_id} confidence: {r.hyp.confidence:.3f}",
        f"{r.utt_id} token@seconds: {tokens}".rstrip(),
    ]
    if r.hotwords is not None:
        lines.append(f"{r.utt_id} hotwords: {' | '.join(r.hotwords)}".rstrip())
    return lines


def default_out_dir(model_path: Pathlike, data: Pathlike, options: DecodeOptions) -> Path:
    """``<model dir>/decode_<data>_<search>[_chunkC_leftN[_sim]]``."""
    search, chunking = options.search, options.chunking
    tag = f"{Path(data).name.replace('.jsonl.gz', '')}_{search.mode}"
    if search.beam:
        tag += f"{search.beam_size}"
    if search.lm is not None:
        tag += "_lm"
    if search.hotwords is not None:
        tag += "_hot"
    if chunking.streaming:
        tag += f"_chunk{chunking.chunk_size}_left{chunking.left_chunks}"
        tag += "_sim" if options.simulate_streaming else ""
    return Path(model_path).parent / f"decode_{tag}"
