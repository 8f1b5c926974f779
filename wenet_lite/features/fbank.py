"""Kaldi-compatible log-mel filterbank, offline and streaming, identical to sherpa-onnx's.

One code path: :func:`compute_fbank` is :class:`OnlineFbank` fed the whole utterance at once, and
both drive ``kaldi_native_fbank.OnlineFbank``, so training, decoding and streaming features are
bit-identical however the audio is cut into pieces.

Options are chosen to equal what sherpa-onnx computes for a model loaded with
``OnlineRecognizer.from_wenet_ctc`` (found in k2-fsa/sherpa-onnx):

- ``sherpa-onnx/csrc/online-recognizer-ctc-impl.h``: for ``wenet_ctc`` models it sets
  ``feat_config.normalize_samples = false`` ("WeNet CTC models assume input samples are in the
  range [-32768, 32767]"); ``sherpa-onnx/csrc/features.cc`` then multiplies each sample by 32768
  before knf. Hence :data:`INT16_SCALE`.
- ``OnlineRecognizer.from_wenet_ctc`` (``sherpa-onnx/python/sherpa_onnx/online_recognizer.py``)
  passes only ``sample_rate`` and ``feature_dim``; every other option keeps its default from
  ``sherpa-onnx/csrc/features.h`` (``FeatureExtractorConfig``): ``low_freq = 20``,
  ``high_freq = -400`` (Nyquist - 400 Hz, i.e. 7600 Hz at 16 kHz; the comment there cites lhotse
  and sherpa-onnx issue #514), ``dither = 0``, ``snip_edges = false``, ``frame_shift_ms = 10``,
  ``frame_length_ms = 25``, ``remove_dc_offset = true``, ``preemph_coeff = 0.97``,
  ``window_type = "povey"``, ``round_to_power_of_two = true``, ``is_librosa = false``.
  ``features.cc`` ``InitFbank`` copies exactly these into ``knf::FbankOptions`` and leaves the
  rest at knf's defaults (``use_energy = false``, ``energy_floor = 0``, ``use_log_fbank = true``,
  ``use_power = true``, ``htk_mode = false``), which we leave untouched too.
- ``online-recognizer-ctc-impl.h`` also hard-codes a 10 ms frame shift and subsampling 4 for
  timestamps and endpointing.

Note the two differences from WeNet's own recipe (torchaudio ``kaldi.fbank``): WeNet uses the
full band (``high_freq = 0``) and ``snip_edges = true``. Since we train our own models and serve
them with sherpa-onnx, we follow sherpa-onnx.

Dither is ours, not knf's: knf draws its noise from a C random state that Python cannot seed, so
training runs would not be reproducible. We add ``dither * N(0, 1)`` to the int16-scaled waveform
from a seedable ``numpy.random.Generator`` and keep knf's dither at 0. Kaldi dithers each frame's
window separately; per frame the noise is the same i.i.d. Gaussian, only overlapping frames now
share it, which does not matter for its purpose (no log(0) on digital silence).

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

from typing import Optional

import kaldi_native_fbank as knf
import numpy as np
import torch

from wenet_lite.config import FeatureConfig

__all__ = [
    "INT16_SCALE",
    "LOW_FREQ_HZ",
    "HIGH_FREQ_HZ",
    "fbank_options",
    "num_frames",
    "compute_fbank",
    "OnlineFbank",
    "window_samples",
]

INT16_SCALE = 32768.0
"""Samples in [-1, 1] are multiplied by this before knf (sherpa-onnx normalize_samples=false)."""
LOW_FREQ_HZ = 20.0
"""Lowest mel filter edge (sherpa-onnx FeatureExtractorConfig default)."""
HIGH_FREQ_HZ = -400.0
"""Highest mel filter edge; negative means offset from Nyquist (sherpa-onnx default, and the
default of ``features.high_freq``)."""


def fbank_options(cfg: FeatureConfig) -> knf.FbankOptions:
    """knf options equal to sherpa-onnx's for wenet CTC models (see the module docstring)."""
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = float(cfg.sample_rate)
    opts.frame_opts.frame_length_ms = cfg.frame_length_ms
    opts.frame_opts.frame_shift_ms = cfg.frame_shift_ms
    opts.frame_opts.snip_edges = cfg.snip_edges
    opts.frame_opts.dither = 0.0  # dither is added by OnlineFbank, from a seedable generator
    opts.frame_opts.remove_dc_offset = True
    opts.frame_opts.preemph_coeff = 0.97
    opts.frame_opts.window_type = "povey"
    opts.frame_opts.round_to_power_of_two = True
    opts.mel_opts.num_bins = cfg.num_mel_bins
    opts.mel_opts.low_freq = LOW_FREQ_HZ
    opts.mel_opts.high_freq = cfg.high_freq
    opts.mel_opts.is_librosa = False
    return opts


def window_samples(rate: int, ms: float) -> int:
    # knf computes int(samp_freq * 0.001f * ms) in float32; do the same so counts agree.
    return int(np.float32(rate) * np.float32(0.001) * np.float32(ms))


def num_frames(num_samples: int, cfg: FeatureConfig) -> int:
    """Number of fbank frames for ``num_samples`` samples (Kaldi's NumFrames, flushed)."""
    shift = window_samples(cfg.sample_rate, cfg.frame_shift_ms)
    length = window_samples(cfg.sample_rate, cfg.frame_length_ms)
    if cfg.snip_edges:
        return 0 if num_samples < length else 1 + (num_samples - length) // shift
    return (num_samples + shift // 2) // shift


def compute_fbank(
    samples: np.ndarray,
    sample_rate: int,
    cfg: FeatureConfig,
    dither: float = 0.0,
    rng: Optional[np.random.Generator] = None,
) -> torch.Tensor:
    """Log-mel fbank of a whole utterance.

    Args:
        samples: (N,) float samples in [-1, 1] at ``sample_rate``, which must equal
            ``cfg.sample_rate`` (resample with ``audio.load_audio`` first).
        sample_rate: Hz.
        cfg: frame and mel settings.
        dither: standard deviation of Gaussian noise on the int16-scaled samples; training only.
        rng: source of dither noise (a fresh unseeded generator if None).

    Returns:
        (T_in, F) float32 features, T_in = ``num_frames(N, cfg)``.
    """
    fbank = OnlineFbank(cfg, dither=dither, rng=rng)
    if sample_rate != cfg.sample_rate:
        fbank.accept_waveform(sample_rate, samples[:0])  # raises, naming both rates
    # In blocks, each block's frames moved out as they are ready: the memory beside the result
    # stays one block's, for an hour of audio as for a second (the frames are the same).
    out = torch.empty(num_frames(len(samples), cfg), cfg.num_mel_bins)  # (T_in, F)
    done = 0
    for start in range(0, len(samples), _FBANK_BLOCK):
        fbank.accept_waveform(sample_rate, samples[start : start + _FBANK_BLOCK])
        done = _move_frames(fbank, out, done)
    fbank.input_finished()
    done = _move_frames(fbank, out, done)
    assert done == out.size(0), (done, out.size(0))
    return out


_FBANK_BLOCK = 160_000  # samples per block of compute_fbank: 10 s at 16 kHz


def _move_frames(fbank: OnlineFbank, out: torch.Tensor, done: int) -> int:
    ready = fbank.num_frames_ready
    if ready > done:
        out[done:ready] = fbank.get_frames(done, ready - done)
        fbank.discard_before(ready)
    return ready


def scaled_samples(
    cfg: FeatureConfig, finished: bool, sample_rate: int, samples: np.ndarray
) -> np.ndarray:
    """(N,) samples for a stream's ``accept_waveform``, checked (not finished, at the features'
    rate, mono, finite) and scaled to the int16 range in a new array."""
    if finished:
        raise RuntimeError("accept_waveform called after input_finished")
    if sample_rate != cfg.sample_rate:
        raise ValueError(
            f"samples are at {sample_rate} Hz but features.sample_rate is "
            f"{cfg.sample_rate} Hz; resample them first"
        )
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono samples of shape (N,), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or inf")
    return x * np.float32(INT16_SCALE)  # the caller's buffer is not touched


class OnlineFbank:
    """Streaming fbank: accept samples in pieces of any size, read frames as they are ready.

    With ``snip_edges`` false the last frames need the end of the signal (Kaldi reflects it), so
    they appear only after :meth:`input_finished`. Frame indices are absolute from the start of
    the stream; :meth:`discard_before` frees memory of frames no longer needed.
    """

    def __init__(
        self,
        cfg: FeatureConfig,
        dither: float = 0.0,
        rng: Optional[np.random.Generator] = None,
    ) -> None:
        if dither < 0:
            raise ValueError(f"dither must be >= 0, got {dither}")
        self.cfg = cfg
        self.dither = dither
        self._rng = rng if rng is not None else np.random.default_rng()
        self._knf = knf.OnlineFbank(fbank_options(cfg))
        self._finished = False
        self._first_kept = 0

    @property
    def dim(self) -> int:
        """F, the number of mel bins."""
        return self.cfg.num_mel_bins

    @property
    def num_frames_ready(self) -> int:
        """Frames computed so far (absolute count, including discarded ones)."""
        return self._knf.num_frames_ready

    @property
    def finished(self) -> bool:
        """True once :meth:`input_finished` was called."""
        return self._finished

    def accept_waveform(self, sample_rate: int, samples: np.ndarray) -> None:
        """Append (N,) float samples in [-1, 1]; N may be 0 or anything larger."""
        x = scaled_samples(self.cfg, self._finished, sample_rate, samples)
        if self.dither > 0:
            x += np.float32(self.dither) * self._rng.standard_normal(x.shape[0], np.float32)
        self._knf.accept_waveform(float(sample_rate), x)

    def input_finished(self) -> None:
        """No more samples: flush the final frames."""
        if not self._finished:
            self._knf.input_finished()
            self._finished = True

    def get_frames(self, start: int, count: int) -> torch.Tensor:
        """Frames ``start .. start+count-1`` as a new (count, F) float32 tensor."""
        end = start + count
        if count < 0 or start < self._first_kept or end > self.num_frames_ready:
            raise ValueError(
                f"frames [{start}, {end}) are not available: frames "
                f"[{self._first_kept}, {self.num_frames_ready}) are"
            )
        if count == 0:
            return torch.zeros(0, self.dim, dtype=torch.float32)
        # np.stack copies: knf owns the buffers that get_frame returns.
        frames = np.stack([self._knf.get_frame(i) for i in range(start, end)])  # (count, F)
        return torch.from_numpy(frames)

    def discard_before(self, frame: int) -> None:
        """Free frames before index ``frame`` (they can no longer be read)."""
        if frame > self.num_frames_ready:
            raise ValueError(f"cannot discard up to frame {frame}: {self.num_frames_ready} ready")
        if frame > self._first_kept:
            self._knf.pop(frame - self._first_kept)
            self._first_kept = frame
