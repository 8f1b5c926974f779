"""Silero VAD (the ``silero-vad`` package's bundled ONNX model, MIT) on onnxruntime: a speech
probability for each 32 ms window of 16 kHz audio, for many streams in one call, each stream
carrying its recurrent state and the last 64 samples it saw; and the speech regions of a
file from those probabilities.

The regions follow silero-vad's own rules (``get_speech_timestamps``; tested equal to it on the
same audio): speech starts at a window of probability >= ``threshold`` and ends where the
probability has stayed below ``threshold - 0.15`` for ``min_silence_ms``; a region shorter
than ``min_speech_ms`` is dropped; each region is widened by ``pad_ms`` on both sides, two
regions closer than twice that meeting halfway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["RATE", "WINDOW", "VadChoice", "VadError", "VadOptions", "SileroVad", "choose_vad",
           "speech_regions", "vad_available", "vad_model_path"]  # fmt: skip

_log = logging.getLogger(__name__)

RATE = 16000
WINDOW = 512
"""samples per probability at 16 kHz (32 ms)"""
CONTEXT = 64
"""samples of the previous window the model reads before each window"""


class VadError(ValueError):
    """The VAD cannot run: its package or model file is missing (names it)."""


@dataclass(frozen=True)
class VadOptions:
    """Defaults of faster-whisper's ``vad_filter`` (whisper's VAD in front of decoding), with
    silero-vad's shortest speech."""

    threshold: float = 0.5
    min_speech_ms: int = 250
    min_silence_ms: int = 2000
    pad_ms: int = 400

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"vad threshold {self.threshold}: give a probability in (0, 1)")
        for name in ("min_speech_ms", "min_silence_ms", "pad_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"vad {name} {getattr(self, name)}: give 0 or more ms")

    @property
    def end_threshold(self) -> float:
        """below this, speech is over (silero-vad's ``neg_threshold`` default)"""
        return max(self.threshold - 0.15, 0.01)


def vad_available() -> bool:
    """Whether silero-vad and onnxruntime are installed (what ``vad=None`` turns on)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("silero_vad", "onnxruntime"))


_EXTRA = "pip install 'wenet_lite[vad]'"


def vad_model_path() -> Path:
    """The ONNX model the ``silero-vad`` package ships; VadError naming what is missing or
    broken (an install that fails to import is as good as none)."""
    try:
        from importlib import resources

        path = Path(str(resources.files("silero_vad.data") / "silero_vad.onnx"))
    except ModuleNotFoundError:
        raise VadError(f"the VAD needs silero-vad, which is not installed: {_EXTRA}") from None
    except Exception as e:  # noqa: BLE001 - any failure of its import: a broken install
        raise VadError(f"silero-vad is installed but cannot be imported ({e}): {_EXTRA}") from None
    if not path.is_file():
        raise VadError(f"{path}: the VAD model file is missing from the silero-vad install")
    return path


class SileroVad:
    """Speech probabilities of 16 kHz audio, one per :data:`WINDOW` samples, for a batch of
    streams at once (batched equals alone)."""

    def __init__(self, path: Optional[Path] = None, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
        except ModuleNotFoundError:
            raise VadError(f"the VAD needs onnxruntime, which is not installed: {_EXTRA}") from None
        except Exception as e:  # noqa: BLE001 - any failure of its import: a broken install
            raise VadError(f"onnxruntime is installed but cannot be imported ({e})") from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.path = path or vad_model_path()
        try:
            self.session = ort.InferenceSession(
                str(self.path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # a damaged file: name it
            raise VadError(f"{self.path}: not a VAD model onnxruntime can load ({e})") from e
        self._rate = np.array(RATE, dtype=np.int64)

    @staticmethod
    def initial_state(batch: int = 1) -> Tuple[np.ndarray, np.ndarray]:
        """(recurrent state (2, B, 128), context (B, 64)) of streams that saw nothing yet."""
        return np.zeros((2, batch, 128), np.float32), np.zeros((batch, CONTEXT), np.float32)

    def step(
        self, windows: np.ndarray, state: np.ndarray, context: np.ndarray
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(B, 512) windows -> (B,) probabilities, the new state and context."""
        x = np.concatenate([context, windows.astype(np.float32, copy=False)], axis=1)
        prob, new_state = self.session.run(None, {"input": x, "state": state, "sr": self._rate})
        return prob[:, 0], new_state, x[:, -CONTEXT:].copy()

    def regions(
        self, samples: np.ndarray, options: Optional[VadOptions] = None
    ) -> List[Tuple[int, int]]:
        """The speech regions (start, end samples) of a whole 16 kHz signal."""
        return speech_regions(self.probabilities(samples), samples.size, options or VadOptions())

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """One probability per window of a whole 16 kHz signal (its last window zero-padded;
        no copy of the signal is made, so hours of audio cost only the probabilities)."""
        n = max(1, -(-samples.size // WINDOW))
        state, context = self.initial_state(1)
        out = np.empty(n, np.float32)
        for i in range(n):
            window = samples[i * WINDOW : (i + 1) * WINDOW]
            if window.size < WINDOW:
                window = np.pad(window, (0, WINDOW - window.size))
            p, state, context = self.step(window[None], state, context)
            out[i] = p[0]
        return out


VadChoice = Union[bool, str, None, SileroVad]
"""whether a VAD runs: "on" (or True), "off" (False), "auto" (None), or a VAD loaded already"""


def choose_vad(choice: VadChoice, sample_rate: int) -> Optional[SileroVad]:
    """The one decision whether the VAD runs, for `transcribe`, `serve`, the endpoint rule and
    the Python API, for a model whose features are at ``sample_rate`` Hz.

    "on": a loaded VAD, or VadError in one line (the extra to install, a broken install, a
    model not at 16 kHz); "off": None; "auto": a VAD where silero-vad is installed and the
    model hears 16 kHz audio, else None (a broken install with a warning that says why).
    """
    if isinstance(choice, SileroVad):
        return choice
    mode = {True: "on", False: "off", None: "auto"}.get(choice, choice)  # type: ignore[arg-type]
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"vad {choice!r}: give 'auto', 'on' or 'off'")
    if mode == "off" or (mode == "auto" and not vad_available()):
        return None
    if sample_rate != RATE:
        if mode == "on":
            raise VadError(f"the VAD runs on {RATE} Hz audio; this model's features are at "
                           f"{sample_rate} Hz")  # fmt: skip
        return None
    try:
        return SileroVad()
    except VadError as e:
        if mode == "on":
            raise
        _log.warning("the VAD is off: %s", e)
        return None


def speech_regions(
    probs: Sequence[float], num_samples: int, options: Optional[VadOptions] = None
) -> List[Tuple[int, int]]:
    """(start, end) sample ranges of speech in a signal of ``num_samples`` samples at 16 kHz,
    from its window probabilities (module doc)."""
    options = options or VadOptions()
    ms = RATE // 1000
    min_speech, min_silence = options.min_speech_ms * ms, options.min_silence_ms * ms
    pad = options.pad_ms * ms
    regions: List[List[int]] = []
    start: Optional[int] = None  # of the open region
    quiet_from: Optional[int] = None  # where the open region's probabilities fell low
    for i, p in enumerate(probs):
        at = i * WINDOW
        if p >= options.threshold:
            quiet_from = None
            if start is None:
                start = at
                continue
        if start is not None and p < options.end_threshold:
            if quiet_from is None:
                quiet_from = at
            if at - quiet_from >= min_silence:
                if quiet_from - start > min_speech:
                    regions.append([start, quiet_from])
                start, quiet_from = None, None
    if start is not None and num_samples - start > min_speech:
        regions.append([start, num_samples])
    for k, region in enumerate(regions):  # widen: by pad, or halfway to a close neighbour
        if k == 0:
            region[0] = max(0, region[0] - pad)
        if k + 1 < len(regions):
            nxt = regions[k + 1]
            gap = nxt[0] - region[1]
            share = gap // 2 if gap < 2 * pad else pad
            region[1] += share
            nxt[0] = max(0, nxt[0] - share)
        else:
            region[1] = min(num_samples, region[1] + pad)
    return [(a, b) for a, b in regions]
