"""Streaming fbank for many streams at once: each stream only keeps its samples, and one call
computes the ready frames of every stream in one batched torch computation.

A server with hundreds of streams spent most of its decoding thread in the per-stream online
fbank (kaldi-native-fbank's ``accept_waveform`` holds the GIL, once per stream and piece). Here
:meth:`FbankStream.accept_waveform` only appends samples; :func:`compute_ready` cuts the ready
frames of all the streams it is given into one (R, K) tensor and runs
``TorchFbank.log_mel`` on it once (one FFT and one mel product for every stream).

The numbers:

- Frames are Kaldi's, with the options of ``features/fbank.py`` (snip_edges false: the first
  frame reflects the start of the signal and, once the input is finished, the last ones its
  end); the frame count of a growing stream is Kaldi's online one (a frame is ready when all
  its samples are there).
- Each frame's values depend on its samples alone: not on how the audio was cut into pieces
  nor on which streams share a call. ``offline_fbank`` is one stream fed everything, so
  streaming over these features is exact against a simulation over ``offline_fbank`` (tested
  bit for bit).
- They equal kaldi-native-fbank's (``fbank.compute_fbank``, what training and ``decode`` use)
  within float32 rounding: the tolerance of the trainer's device fbank (``torch_fbank.py``).

Shapes: the legend in ``wenet_lite`` (K samples per frame, F mel bins, R frames in a call).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import torch

from wenet_lite.config import FeatureConfig
from wenet_lite.features.fbank import num_frames, scaled_samples, window_samples
from wenet_lite.features.torch_fbank import TorchFbank, reflect_index

__all__ = ["FbankStream", "compute_ready", "offline_fbank"]


_EXTRACTORS: Dict[Tuple, TorchFbank] = {}


def _extractor(cfg: FeatureConfig, device: torch.device) -> TorchFbank:
    """The window and mel banks, shared by every stream of these settings on ``device``."""
    key = (cfg.sample_rate, cfg.frame_length_ms, cfg.frame_shift_ms, cfg.snip_edges)
    key += (cfg.num_mel_bins, cfg.high_freq, str(device))
    if key not in _EXTRACTORS:
        _EXTRACTORS[key] = TorchFbank(cfg).to(device)
    return _EXTRACTORS[key]


class FbankStream:
    """One stream's samples and computed frames; the interface of ``fbank.OnlineFbank``
    (frame indices absolute from the start of the stream)."""

    def __init__(self, cfg: FeatureConfig, device: Union[str, torch.device] = "cpu") -> None:
        self.cfg = cfg
        self.extractor = _extractor(cfg, torch.device(device))
        self._shift = window_samples(cfg.sample_rate, cfg.frame_shift_ms)
        self._length = window_samples(cfg.sample_rate, cfg.frame_length_ms)
        # frame t covers samples [t * shift + offset, ... + length) (Kaldi's FirstSampleOfFrame)
        self._offset = 0 if cfg.snip_edges else self._shift // 2 - self._length // 2
        self._samples = np.zeros(0, np.float32)  # int16-scaled, from absolute index _start
        self._start = 0
        self._received = 0
        self._finished = False
        self._computed = 0  # frames computed so far
        self._first_kept = 0  # frames before this were discarded
        self._frames = torch.zeros(0, cfg.num_mel_bins, device=device)  # (computed - kept, F)

    @property
    def dim(self) -> int:
        """F, the number of mel bins."""
        return self.cfg.num_mel_bins

    @property
    def finished(self) -> bool:
        """True once :meth:`input_finished` was called."""
        return self._finished

    @property
    def num_frames_ready(self) -> int:
        """Frames that can be read (computed on demand): Kaldi's online count."""
        n = self._received
        if self._finished:
            return num_frames(n, self.cfg)
        return max(0, (n - self._offset - self._length) // self._shift + 1)

    @property
    def num_pending(self) -> int:
        """Ready frames not computed yet (:func:`compute_ready` computes them)."""
        return self.num_frames_ready - self._computed

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Append (N,) float samples in [-1, 1]; N may be 0 or anything larger."""
        x = scaled_samples(self.cfg, self._finished, sample_rate, samples)
        if x.size:
            self._samples = np.concatenate([self._samples, x])
            self._received += x.size

    def input_finished(self) -> None:
        """No more samples: the last frames (reflecting the end) become ready."""
        self._finished = True

    def get_frames(self, start: int, count: int) -> torch.Tensor:
        """Frames ``start .. start+count-1`` as a (count, F) float32 tensor (computing this
        stream's pending frames first if the batch has not)."""
        end = start + count
        if count < 0 or start < self._first_kept or end > self.num_frames_ready:
            raise ValueError(
                f"frames [{start}, {end}) are not available: frames "
                f"[{self._first_kept}, {self.num_frames_ready}) are"
            )
        if end > self._computed:
            compute_ready([self])
        return self._frames[start - self._first_kept : end - self._first_kept]

    def discard_before(self, frame: int) -> None:
        """Free frames before index ``frame`` (they can no longer be read)."""
        if frame > self.num_frames_ready:
            raise ValueError(f"cannot discard up to frame {frame}: {self.num_frames_ready} ready")
        if frame > self._first_kept:
            if frame > self._computed:
                compute_ready([self])
            self._frames = self._frames[frame - self._first_kept :]  # copied by the next _take
            self._first_kept = frame

    def _pending_rows(self, flat: List[np.ndarray], size: int) -> Tuple[List[int], int]:
        """Lay out the samples of the pending frames at the end of ``flat`` (holding ``size``
        samples, a multiple of the shift) so that frame j is row ``rows[j]`` of the shift-
        strided frames of the whole buffer; returns the rows and the new size. Frames with
        every sample inside [0, received) are read where they lie in this stream's samples;
        the first frame (before 0) and the flushed last ones (past the end) are gathered
        (edges reflected as Kaldi does), each in a place of its own."""
        first, end = self._computed, self.num_frames_ready
        shift, length, offset = self._shift, self._length, self._offset
        lo = max(first, -(offset // shift) if offset < 0 else 0)  # first with start >= 0
        hi = min(end, max(lo, (self._received - offset - length) // shift + 1))
        rows: List[int] = []

        def put(samples: np.ndarray, frames: int, stride: int) -> None:
            nonlocal size
            rows.extend(range(size // shift, size // shift + frames * stride, stride))
            padded = -(-samples.size // shift) * shift
            flat.append(samples)
            if padded > samples.size:
                flat.append(np.zeros(padded - samples.size, np.float32))
            size += padded

        place = -(-length // shift)  # rows a gathered frame takes
        if first < lo:
            put(self._gathered(first, min(lo, end)).reshape(-1), min(lo, end) - first, place)
        if lo < hi:
            a = lo * shift + offset - self._start
            put(self._samples[a : a + (hi - lo - 1) * shift + length], hi - lo, 1)
        if max(hi, first) < end:
            put(self._gathered(max(hi, first), end).reshape(-1), end - max(hi, first), place)
        return rows, size

    def _gathered(self, first: int, end: int) -> np.ndarray:
        """(m, K') samples of frames ``first .. end-1`` gathered one by one, each padded to
        K' (K rounded up to the shift)."""
        t = np.arange(first, end)[:, None]
        index = t * self._shift + self._offset + np.arange(self._length)  # (m, K)
        index = reflect_index(torch.from_numpy(index), self._received).numpy()
        frames = self._samples[index - self._start]
        padded = -(-self._length // self._shift) * self._shift
        return np.pad(frames, ((0, 0), (0, padded - self._length)))

    def _take(self, frames: torch.Tensor) -> None:
        """Append newly computed (m, F) frames; drop the samples no later frame needs."""
        self._frames = torch.cat([self._frames, frames]) if self._frames.numel() else frames
        self._computed += frames.size(0)
        keep = max(0, self._computed * self._shift + self._offset)
        if keep > self._start:
            self._samples = self._samples[keep - self._start :].copy()
            self._start = keep


def compute_ready(streams: Sequence[FbankStream]) -> None:
    """Compute every pending frame of ``streams`` in one batched call on their device (all
    must share one feature config and device): their samples go there in one copy, the
    frames are cut there, and the features stay there."""
    todo = [s for s in streams if s.num_pending > 0]
    if not todo:
        return
    extractor = todo[0].extractor
    if any(s.extractor is not extractor for s in todo):
        raise ValueError("compute_ready: the streams have different feature settings or devices")
    flat: List[np.ndarray] = []
    rows: List[int] = []
    counts: List[int] = []
    size = 0
    for s in todo:
        own, size = s._pending_rows(flat, size)
        rows.extend(own)
        counts.append(len(own))
    flat.append(np.zeros(extractor.length, np.float32))  # the last row's samples past the end
    device = extractor.window.device
    samples = torch.from_numpy(np.concatenate(flat)).to(device)
    index = torch.tensor(rows).to(device)
    frames = samples.unfold(0, extractor.length, extractor.shift).index_select(0, index)
    feats = extractor.log_mel(frames, row_invariant=True)  # (R, F)
    for s, own in zip(todo, feats.split(counts)):
        s._take(own)


def offline_fbank(samples: np.ndarray, cfg: FeatureConfig) -> torch.Tensor:
    """(T_in, F) features of a whole utterance (samples at ``cfg.sample_rate``): what a stream
    of :class:`FbankStream` computes from the same samples, frame for frame."""
    stream = FbankStream(cfg)
    out = torch.empty(num_frames(len(samples), cfg), cfg.num_mel_bins)  # (T_in, F)
    done = 0
    # In blocks: memory of one block beside. At least one block (an empty input too), and
    # never an empty one after the last: a length of k blocks ends with the k-th.
    for start in range(0, max(len(samples), 1), _BLOCK):
        stream.accept_waveform(cfg.sample_rate, samples[start : start + _BLOCK])
        if start + _BLOCK >= len(samples):
            stream.input_finished()
        ready = stream.num_frames_ready
        out[done:ready] = stream.get_frames(done, ready - done)
        stream.discard_before(ready)
        done = ready
    return out


_BLOCK = 160_000  # samples per block of offline_fbank: 10 s at 16 kHz
