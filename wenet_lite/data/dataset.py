"""Cuts to training batches: audio, speed perturbation, fbank and targets, bad items counted.

Bad data never stops training. Every utterance that cannot be used is skipped and counted under
one reason of :data:`SKIP_REASONS`:

- before batching (:func:`filter_cuts`, from the manifest alone, once per run): ``too_long``
  (> ``data.max_duration``), ``too_short`` (< ``data.min_duration``), ``empty_audio`` (a
  duration of 0), ``empty_text`` and ``no_known_pieces`` (the transcript encodes to nothing but
  ``<unk>`` and word boundaries);
- while loading (:class:`ASRDataset`): ``missing_audio``, ``unreadable_audio`` (corrupt or
  truncated), ``empty_audio`` (no samples), ``silent_audio`` (every sample exactly 0: no
  information, and log(0) features without dither), ``too_short`` (fewer fbank frames than the
  subsampling front-end needs) and ``too_short_for_text`` (fewer encoder frames than CTC needs
  for the transcript: one per token plus one blank between repeated tokens).

Augmentation randomness is a pure function of ``(seed, epoch, cut id)`` (:func:`utterance_seed`),
never of global RNG state or of which worker or rank loads the cut: a resumed run or another
``num_workers`` sees the same speed factor, dither noise and SpecAugment masks.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from lhotse import CutSet
from lhotse.cut import Cut

from wenet_lite.config import DataConfig, FeatureConfig, SpecAugConfig
from wenet_lite.data.commands import DataCommandRefused
from wenet_lite.data.manifest import cut_array, cut_samples, cut_text
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.audio import AudioError, speed_perturb
from wenet_lite.features.fbank import INT16_SCALE, compute_fbank, num_frames
from wenet_lite.features.specaug import apply_masks, draw_masks
from wenet_lite.model.subsampling import Layers, min_input_frames, output_length

__all__ = [
    "SKIP_REASONS",
    "Batch",
    "SkipUtterance",
    "ASRDataset",
    "FBANK_FIELD",
    "as_is",
    "ctc_min_frames",
    "filter_cuts",
    "load_features",
    "load_samples",
    "load_stored_fbank",
    "manifest_reason",
    "merge_counts",
    "spec_augment_batch",
    "utterance_seed",
]

SKIP_REASONS = (
    "missing_audio",
    "unreadable_audio",
    "empty_audio",
    "silent_audio",
    "too_short",
    "too_short_for_text",
    "too_long",
    "empty_text",
    "no_known_pieces",
)
"""Every reason an utterance is skipped for, in the order logs and ``skipped.json`` list them."""

FBANK_FIELD = "fbank"
"""A cut's custom field holding its stored training fbank (see data/store_fbank.py)."""


class SkipUtterance(Exception):
    """An utterance is unusable; ``reason`` is one of :data:`SKIP_REASONS`."""

    def __init__(self, reason: str) -> None:
        assert reason in SKIP_REASONS, reason
        super().__init__(reason)
        self.reason = reason


class Batch(NamedTuple):
    """Padded features and targets of the usable utterances of one sampled batch.

    B may be 0 when every utterance was skipped; ``skipped`` counts them by reason.
    """

    feats: torch.Tensor  # (B, T_in, F) raw log-mel (CMVN runs inside the model)
    feats_lens: torch.Tensor  # (B,)
    targets: torch.Tensor  # (B, U) token ids, padded with 0
    target_lens: torch.Tensor  # (B,)
    ids: List[str]
    texts: List[str]
    skipped: Dict[str, int]
    samples: Optional[torch.Tensor] = None
    """(B, N) speed-perturbed, dithered samples in [-1, 1], zero-padded, when the fbank is left
    to the training device (``feats`` is then (B, 0, F) and ``feats_lens`` the frames the fbank
    will give)"""
    sample_lens: Optional[torch.Tensor] = None  # (B,)


def merge_counts(total: Dict[str, int], new: Dict[str, int]) -> Dict[str, int]:
    """Add ``new`` into ``total`` (in place) and return it."""
    for reason, n in new.items():
        total[reason] = total.get(reason, 0) + n
    return total


def utterance_seed(seed: int, epoch: int, cut_id: str, purpose: str) -> int:
    """A 63-bit seed that depends only on its arguments (stable across processes and runs;
    Python's ``hash`` of a string is salted per process, so it cannot serve)."""
    key = f"{seed}\x00{epoch}\x00{cut_id}\x00{purpose}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def ctc_min_frames(ids: Sequence[int]) -> int:
    """Fewest frames a CTC alignment of ``ids`` needs: a blank must separate repeated tokens."""
    return len(ids) + sum(1 for a, b in zip(ids, ids[1:]) if a == b)


def manifest_reason(
    duration: float, text: str, tokenizer: Tokenizer, data: DataConfig
) -> Optional[str]:
    """Why an utterance is unusable by its manifest entry alone (None: usable)."""
    if duration <= 0:
        return "empty_audio"
    if duration > data.max_duration:
        return "too_long"
    if duration < data.min_duration:
        return "too_short"
    if not text.strip():
        return "empty_text"
    if not tokenizer.has_known_pieces(tokenizer.encode(text)):
        return "no_known_pieces"
    return None


def filter_cuts(
    cuts: CutSet, tokenizer: Tokenizer, data: DataConfig
) -> Tuple[CutSet, Dict[str, int]]:
    """Drop utterances unusable by their manifest entry alone; returns (kept, counts by reason)."""
    kept, counts = [], Counter()
    for cut in cuts:
        reason = manifest_reason(cut.duration, cut_text(cut), tokenizer, data)
        if reason is None:
            kept.append(cut)
        else:
            counts[reason] += 1
    return CutSet.from_cuts(kept), dict(counts)


_SKIP_REASON = {"missing": "missing_audio", "empty": "empty_audio"}  # the rest: unreadable


def load_features(
    cut: Cut,
    features: FeatureConfig,
    speed_factors: Sequence[float] = (1.0,),
    dither: float = 0.0,
    seed: Optional[int] = None,
) -> torch.Tensor:
    """(T_in, F) fbank of one cut, speed-perturbed and dithered when asked.

    ``seed`` (see :func:`utterance_seed`) drives the speed choice and the dither noise.
    Raises SkipUtterance for unusable audio, or for fewer than 1 frame.
    """
    samples, rng = _perturbed_samples(cut, features, speed_factors, seed)
    feats = compute_fbank(samples, features.sample_rate, features, dither=dither, rng=rng)
    if feats.size(0) == 0:
        raise SkipUtterance("too_short")
    return feats  # (T_in, F)


def load_samples(
    cut: Cut,
    features: FeatureConfig,
    speed_factors: Sequence[float] = (1.0,),
    dither: float = 0.0,
    seed: Optional[int] = None,
) -> np.ndarray:
    """(N,) float32 samples of one cut for a fbank computed elsewhere (the training device):
    the speed factor and the dither noise of :func:`load_features` with the same seed, the
    noise scaled back from the int16 range. Raises SkipUtterance as load_features does."""
    samples, rng = _perturbed_samples(cut, features, speed_factors, seed)
    if num_frames(samples.size, features) == 0:
        raise SkipUtterance("too_short")
    if dither > 0:
        noise = np.float32(dither) * rng.standard_normal(samples.size, np.float32)
        samples = samples + noise / np.float32(INT16_SCALE)
    return samples.astype(np.float32, copy=False)


def _perturbed_samples(
    cut: Cut, features: FeatureConfig, speed_factors: Sequence[float], seed: Optional[int]
) -> Tuple[np.ndarray, np.random.Generator]:
    """(N,) samples at the features' rate, speed-perturbed, and the generator that drew the
    factor (its next draws are the dither noise)."""
    try:
        samples = cut_samples(cut, features.sample_rate)  # (N,)
    except AudioError as e:
        raise SkipUtterance(_SKIP_REASON.get(e.kind, "unreadable_audio")) from None
    if samples.size == 0:
        raise SkipUtterance("empty_audio")
    if not np.any(samples):
        raise SkipUtterance("silent_audio")
    rng = np.random.default_rng(seed)
    factor = _draw_speed(rng, speed_factors)
    if factor != 1.0:
        samples = speed_perturb(samples, features.sample_rate, factor)
    return samples, rng


def _draw_speed(rng: np.random.Generator, speed_factors: Sequence[float]) -> float:
    return float(speed_factors[rng.integers(len(speed_factors))]) if speed_factors else 1.0


def load_stored_fbank(cut: Cut) -> Optional[torch.Tensor]:
    """(T_in, F) float32 stored fbank of ``cut``; None without one, or if it cannot be read."""
    if not cut.has_custom(FBANK_FIELD):
        return None
    try:
        feats = cut_array(cut, FBANK_FIELD)  # (T_in, F) float16
    except DataCommandRefused:
        raise  # a hostile path is an error, never quietly replaced by the audio
    except (OSError, ValueError, EOFError):
        return None  # removed or damaged since it was stored: the caller uses the audio
    return torch.from_numpy(feats.astype(np.float32))


class ASRDataset(torch.utils.data.Dataset):
    """Map-style dataset whose index is a sampler request ``(epoch, CutSet)``; returns a Batch.

    ``train`` enables speed perturbation and dither (decoding and CMVN use neither); SpecAugment
    runs later in the trainer (:func:`spec_augment_batch`) because it starts at an optimizer
    step that a DataLoader worker cannot know. ``stored_fbank`` (training only) loads a cut's
    stored fbank (`wenet-lite compute-fbank`) instead of its audio when the epoch's speed factor
    is 1.0; the caller checks that the arrays were made with ``features``. ``fbank_on_device``
    (training only) returns samples instead of fbank (:attr:`Batch.samples`), for the trainer
    to compute the whole batch's fbank on its device; stored fbank is then not used.
    """

    def __init__(
        self,
        features: FeatureConfig,
        data: DataConfig,
        tokenizer: Tokenizer,
        layers: Layers,
        seed: int,
        train: bool,
        stored_fbank: bool = False,
        fbank_on_device: bool = False,
    ) -> None:
        self.features = features
        self.speed_factors = tuple(data.speed_perturb) if train else (1.0,)
        self.dither = features.dither if train else 0.0
        self.tokenizer = tokenizer
        self.layers = [(int(k), int(s)) for k, s in layers]
        self.min_frames = min_input_frames(self.layers)
        self.seed = seed
        self.on_device = fbank_on_device and train
        self.stored_fbank = stored_fbank and train and not self.on_device

    def __getitem__(self, request: Tuple[int, CutSet]) -> Batch:
        epoch, cuts = request
        items, skipped = [], Counter()
        for cut in cuts:
            try:
                items.append(self._utterance(cut, epoch))
            except SkipUtterance as e:
                skipped[e.reason] += 1
        if self.on_device:
            return _collate_samples(items, self.features, dict(skipped))
        return _collate(items, self.features.num_mel_bins, dict(skipped))

    def _utterance(self, cut: Cut, epoch: int) -> Tuple[str, str, Any, List[int]]:
        """(id, text, (T_in, F) fbank or (N,) samples when on_device, token ids)."""
        text = cut_text(cut)
        if not text.strip():
            raise SkipUtterance("empty_text")
        ids = self.tokenizer.encode(text)
        if not self.tokenizer.has_known_pieces(ids):
            raise SkipUtterance("no_known_pieces")
        seed = utterance_seed(self.seed, epoch, cut.id, "audio")
        if self.on_device:
            samples = load_samples(cut, self.features, self.speed_factors, self.dither, seed)
            self._check_length(num_frames(samples.size, self.features), ids)
            return cut.id, text, samples, ids
        feats = None
        if self.stored_fbank and _draw_speed(np.random.default_rng(seed), self.speed_factors) == 1:
            feats = load_stored_fbank(cut)  # (T_in, F)
        if feats is None:
            feats = load_features(cut, self.features, self.speed_factors, self.dither, seed)
        self._check_length(feats.size(0), ids)
        return cut.id, text, feats, ids

    def _check_length(self, frames: int, ids: List[int]) -> None:
        if frames < self.min_frames:
            raise SkipUtterance("too_short")
        if output_length(frames, self.layers) < ctc_min_frames(ids):
            raise SkipUtterance("too_short_for_text")


def _collate(
    items: List[Tuple[str, str, torch.Tensor, List[int]]], num_bins: int, skipped: Dict[str, int]
) -> Batch:
    b = len(items)
    feats_lens = torch.tensor([f.size(0) for _, _, f, _ in items], dtype=torch.long)  # (B,)
    target_lens = torch.tensor([len(t) for _, _, _, t in items], dtype=torch.long)  # (B,)
    t_max = int(feats_lens.max()) if b else 0
    u_max = int(target_lens.max()) if b else 0
    feats = torch.zeros(b, t_max, num_bins)  # (B, T_in, F)
    targets = torch.zeros(b, u_max, dtype=torch.long)  # (B, U)
    for i, (_, _, f, t) in enumerate(items):
        feats[i, : f.size(0)] = f
        targets[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    ids = [u for u, _, _, _ in items]
    texts = [x for _, x, _, _ in items]
    return Batch(feats, feats_lens, targets, target_lens, ids, texts, skipped)


def _collate_samples(
    items: List[Tuple[str, str, np.ndarray, List[int]]],
    features: FeatureConfig,
    skipped: Dict[str, int],
) -> Batch:
    """A Batch whose ``samples`` the trainer turns into fbank; ``feats_lens`` the frame counts."""
    empty = [(u, x, torch.zeros(0, features.num_mel_bins), t) for u, x, _, t in items]
    batch = _collate(empty, features.num_mel_bins, skipped)
    frames = [num_frames(a.size, features) for _, _, a, _ in items]
    sample_lens = torch.tensor([a.size for _, _, a, _ in items], dtype=torch.long)  # (B,)
    samples = torch.zeros(len(items), int(sample_lens.max()) if items else 0)  # (B, N)
    for i, (_, _, a, _) in enumerate(items):
        samples[i, : a.size] = torch.from_numpy(a)
    return batch._replace(
        feats_lens=torch.tensor(frames, dtype=torch.long), samples=samples, sample_lens=sample_lens
    )


def spec_augment_batch(
    feats: torch.Tensor,
    lens: torch.Tensor,
    ids: Sequence[str],
    cfg: SpecAugConfig,
    seed: int,
    epoch: int,
    view: str = "specaug",
) -> torch.Tensor:
    """SpecAugment each utterance of (B, T_in, F) ``feats`` (any device; (B,) valid ``lens``)
    with masks drawn on the CPU from ``(seed, epoch, cut id, view)``, applied in one operation
    (another ``view``: other masks for the same utterances, as CR-CTC's second view)."""
    masks = []
    for cut_id, n in zip(ids, lens.tolist()):
        gen = torch.Generator().manual_seed(utterance_seed(seed, epoch, cut_id, view))
        masks.append(
            draw_masks(
                torch.tensor([n]),
                feats.size(1),
                feats.size(2),
                gen,
                cfg.num_freq_masks,
                cfg.max_freq_width,
                cfg.num_time_masks,
                cfg.max_time_width,
            )  # fmt: skip
        )
    return apply_masks(feats, torch.cat(masks), lens)  # (B, T_in, F)


def as_is(item: Any) -> Any:
    """A DataLoader's ``collate_fn`` for a dataset whose items are already whole batches (or
    merged slices): no tensor conversion wanted."""
    return item
