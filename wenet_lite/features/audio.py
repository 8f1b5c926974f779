"""Audio input: decode files, mix to mono, resample, speed-perturb, and read raw PCM streams.

Everything downstream sees float32 mono samples in [-1, 1] at the configured rate; the fbank
front-end scales them to the int16 range itself (see ``fbank.py``). Decoding uses libsndfile
(``soundfile``: WAV, FLAC, OGG, ...) and resampling uses soxr, as DESIGN.md chooses.

Shapes: the legend in ``wenet_lite``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Tuple, Union

import numpy as np
import soundfile as sf
import soxr

from wenet_lite.config.fields import Says, Setting

__all__ = [
    "AUDIO_FORMATS",
    "AudioError",
    "RATE_RANGE",
    "check_rate",
    "require_rate",
    "decode_audio_bytes",
    "load_audio",
    "read_audio_blocks",
    "resample",
    "speed_perturb",
    "pcm16_to_float",
    "read_pcm16",
    "read_upto",
    "quiet_decoder",
]

PathLike = Union[str, Path]

_log = logging.getLogger(__name__)

# soxr's "HQ" preset: 20-bit precision, 95% passband; transparent for 16 kHz speech.
_SOXR_QUALITY = "HQ"


# What libmpg123 (inside libsndfile) writes about damaged MP3 data, straight to fd 2.
_DECODER_NOISE = re.compile(r"^(Note: |Warning: |\[src/libmpg123/)")
_quiet_lock = threading.Lock()


def _is_mp3(path: PathLike) -> bool:
    """An ID3 tag or an MPEG frame sync at the start (the extension may say anything)."""
    try:
        with open(path, "rb") as f:
            head = f.read(3)
    except OSError:
        return False
    return head[:3] == b"ID3" or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0)


@contextmanager
def quiet_decoder(path: PathLike, is_mp3: Optional[bool] = None) -> Iterator[None]:
    """Keep the MP3 decoder's notes about damaged frames off the user's stderr.

    libmpg123 writes them to file descriptor 2 itself, past Python, so while an MP3 file is
    opened or read fd 2 points at a temporary file; afterwards the decoder's lines go to the
    debug log and anything else written meanwhile (another thread's output) to stderr as it
    was. Wrap single calls only, never a ``yield`` to other code. Other formats: no change
    (``is_mp3``: already known, else the file's first bytes are read).
    """
    if not (_is_mp3(path) if is_mp3 is None else is_mp3):
        yield
        return
    with _quiet_lock, tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            other = []
            for line in text.splitlines(keepends=True):
                if _DECODER_NOISE.match(line):
                    _log.debug("%s: decoder: %s", path, line.rstrip())
                else:
                    other.append(line)
            if other:
                sys.stderr.write("".join(other))
                sys.stderr.flush()


AUDIO_FORMATS = "WAV, FLAC, OGG/Vorbis, Opus, MP3 and the other formats of libsndfile"
"""What every reader of audio files accepts (``soundfile.available_formats()`` lists them)."""

AUDIO_ERROR_KINDS = ("missing", "unreadable", "empty", "non_finite", "truncated", "rate")

RATE_RANGE = (4000, 768_000)
"""Sample rates a file may declare, Hz. Outside it the header is damaged or hostile: a
139 KB file claiming 1 Hz would resample to a billion samples."""


class AudioError(ValueError):
    """An audio file is missing, unreadable, empty, truncated, holds non-finite samples or
    has a sample rate that cannot be speech (``rate``).

    The message names the file; ``kind`` is one of :data:`AUDIO_ERROR_KINDS`.
    """

    def __init__(self, path: PathLike, kind: str, problem: str) -> None:
        assert kind in AUDIO_ERROR_KINDS, kind
        super().__init__(f"{path}: {problem}")
        self.kind = kind


def load_audio(path: PathLike, target_rate: int) -> np.ndarray:
    """Read an audio file as float32 mono samples in [-1, 1] at ``target_rate`` Hz.

    Channels are averaged. Float files may hold values beyond full scale; they are clipped to
    [-1, 1] as read (and again after resampling, which can overshoot), as any conversion to
    int16 would do, so the int16 scaling of the fbank stays exact.

    Returns:
        samples: (N,) float32.

    Raises:
        AudioError: naming ``path``, if the file is missing, not decodable audio, truncated,
            empty, or contains NaN/inf samples.
    """
    if target_rate <= 0:
        raise ValueError(f"target_rate must be positive, got {target_rate}")
    ((samples, rate),) = _decode(Path(path), None)  # the whole file: one block
    if rate != target_rate:
        samples = resample(samples, rate, target_rate)
        if samples.size == 0:  # a few samples at a higher rate
            raise AudioError(path, "empty", f"audio shorter than one sample at {target_rate} Hz")
    samples = np.asarray(samples, dtype=np.float32)  # ours alone: clip in place, no copy
    return np.clip(samples, -1.0, 1.0, out=samples)


def read_audio_blocks(
    path: PathLike, block_seconds: Optional[float] = 0.1
) -> Iterator[Tuple[np.ndarray, int]]:
    """Decode an audio file piece by piece: (samples (N,) float32 mono, file rate) per block
    (None: the whole file in one block).

    For streaming long files in constant memory. Blocks hold what :func:`load_audio` reads
    before resampling (clipped to [-1, 1]), and the same problems raise the same AudioError,
    some only when the reader gets there (NaN samples, a truncated file).
    """
    if block_seconds is not None and block_seconds <= 0:
        raise ValueError(f"block_seconds must be positive, got {block_seconds}")
    return _decode(Path(path), block_seconds)


def _decode(path: Path, block_seconds: Optional[float]) -> Iterator[Tuple[np.ndarray, int]]:
    """The one reader: (N,) float32 mono blocks at the file's rate, the whole file when
    ``block_seconds`` is None. Every problem is an AudioError naming the file."""
    if path.is_dir():
        raise AudioError(path, "missing", "is a directory, not an audio file")
    if not path.is_file():
        raise AudioError(path, "missing", "audio file not found")
    mp3 = _is_mp3(path)
    try:
        with quiet_decoder(path, mp3):
            f = sf.SoundFile(str(path))
    except (sf.SoundFileError, RuntimeError) as e:
        raise AudioError(
            path, "unreadable", f"cannot decode audio ({e}); accepted: {AUDIO_FORMATS}"
        ) from None
    with f:
        declared, rate, done = f.frames, int(f.samplerate), 0
        require_rate(path, rate)
        block = -1 if block_seconds is None else max(1, int(block_seconds * rate))
        while True:
            try:
                with quiet_decoder(path, mp3):
                    data = f.read(block, dtype="float32", always_2d=True)  # (N, Ch)
            except (sf.SoundFileError, RuntimeError) as e:
                raise AudioError(path, "unreadable", f"cannot decode audio ({e})") from None
            if data.shape[0] == 0:
                break
            bad = int(np.count_nonzero(~np.isfinite(data)))
            if bad:
                raise AudioError(
                    path, "non_finite", f"audio contains {bad} non-finite samples (NaN or inf)"
                )
            # Beyond full scale is clipped here, before mixing and resampling, as any
            # conversion to int16 would; 1e38-sized floats would otherwise overflow to inf.
            np.clip(data, -1.0, 1.0, out=data)
            done += data.shape[0]
            yield (data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]), rate
            if block < 0:
                break
    if done == 0:
        raise AudioError(path, "empty", "audio file contains no samples")
    header = _wav_declared_frames(path)
    if header is not None and done < header:
        # libsndfile counts a WAV's frames from the file's size, not from its header, so a
        # cut-off WAV reads as a shorter, valid one: say how much of it there was.
        _log.warning(
            "%s: truncated WAV: read %.2f s of the %.2f s its header declares",
            path, done / rate, header / rate,
        )  # fmt: skip
    # A FLAC header states the total length; fewer decoded frames means a cut-off file.
    if done < declared:
        raise AudioError(
            path,
            "truncated",
            f"cannot decode audio: truncated, decoded {done} of {declared} frames declared",
        )


def decode_audio_bytes(data: bytes, name: str) -> Tuple[np.ndarray, int]:
    """The (N,) float32 mono samples and rate of an audio file's bytes (stdin, an upload);
    AudioError naming ``name`` for empty, undecodable or non-finite data or a bad rate."""
    import io

    if not data:
        raise AudioError(name, "empty", "empty input (no audio bytes)")
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)  # (N, Ch)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        why = re.sub(r"Error opening <[^>]*>: ", "", str(e))  # not the buffer's repr
        raise AudioError(name, "unreadable", f"not audio libsndfile reads ({why})") from None
    require_rate(name, rate)
    if samples.shape[0] == 0 or samples.shape[1] == 0:
        raise AudioError(name, "empty", "no samples")
    if not np.isfinite(samples).all():
        raise AudioError(name, "non_finite", "audio contains non-finite samples (NaN or inf)")
    np.clip(samples, -1.0, 1.0, out=samples)
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    return np.ascontiguousarray(mono), int(rate)


def require_rate(name: PathLike, rate: float) -> None:
    """AudioError naming ``name`` for a rate outside :data:`RATE_RANGE`."""
    low, high = RATE_RANGE
    if not low <= rate <= high:
        raise AudioError(
            name, "rate", f"sample rate {rate:g} Hz is outside {low}-{high} Hz (a damaged header?)"
        )


def check_rate(name: PathLike, rate: float, model_rate: int, upsample: bool = True) -> None:
    """Refuse a rate outside :data:`RATE_RANGE` (AudioError naming ``name``); for a rate below
    the model's, warn once in one line, or with ``upsample`` False refuse it: upsampled
    telephone audio has no energy above its Nyquist band, where a 16 kHz model looks for it,
    and decodes worse without any other sign."""
    require_rate(name, rate)
    if rate >= model_rate:
        return
    if not upsample:
        raise AudioError(
            name, "rate", f"{rate:g} Hz audio is below the model's {model_rate} Hz "
            "(upsampling is off)"
        )  # fmt: skip
    _log.warning(
        Says("%s: %g Hz audio upsampled to the model's %d Hz: it has nothing above %g Hz and may "
             "decode worse ({off} refuses it)", off=Setting("upsample", False)),
        name, rate, model_rate, rate / 2,
    )  # fmt: skip


def _wav_declared_frames(path: Path) -> Optional[int]:
    """Frames a RIFF/WAVE header declares in its data chunk (None: not a WAV, or a size left
    open as streaming writers do)."""
    try:
        with open(path, "rb") as f:
            riff = f.read(12)
            if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
                return None
            block_align = 0
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return None
                size = int.from_bytes(head[4:8], "little")
                if head[:4] == b"fmt ":
                    fmt = f.read(size + size % 2)
                    block_align = int.from_bytes(fmt[12:14], "little")
                    continue
                if head[:4] == b"data":
                    if block_align <= 0 or size in (0, 0xFFFFFFFF):
                        return None
                    return size // block_align
                f.seek(size + size % 2, 1)  # chunks are padded to an even size
    except OSError:
        return None


def resample(samples: np.ndarray, orig_rate: float, target_rate: float) -> np.ndarray:
    """Resample (N,) float32 samples with soxr; returns about N * target/orig samples."""
    if orig_rate <= 0 or target_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_rate} -> {target_rate}")
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if orig_rate == target_rate:
        return samples.copy()
    return soxr.resample(samples, orig_rate, target_rate, quality=_SOXR_QUALITY)


def speed_perturb(samples: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """Play ``samples`` ``factor`` times faster, keeping the nominal ``rate`` (Kaldi/WeNet style).

    As sox's ``speed`` effect: treat the signal as if recorded at ``rate * factor`` and resample
    it back to ``rate``, so duration scales by 1/factor and pitch by factor. factor 1.0 returns a
    copy.

    Returns:
        (round(N / factor),) float32 samples, clipped to [-1, 1].
    """
    if factor <= 0:
        raise ValueError(f"speed factor must be positive, got {factor}")
    if factor == 1.0:
        return np.array(samples, dtype=np.float32)
    out = resample(samples, rate * factor, rate)
    # Resampling can overshoot full scale slightly (Gibbs ringing); keep the [-1, 1] contract.
    return np.clip(out, -1.0, 1.0)


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian signed 16-bit PCM bytes -> (N,) float32 in [-1, 1) (divided by 32768)."""
    if len(data) % 2:
        raise ValueError(f"16-bit PCM needs an even number of bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def read_upto(stream: BinaryIO, n: int) -> bytes:
    """``n`` bytes of a byte stream, fewer only at its end (a pipe delivers in pieces, so one
    ``read`` may return less)."""
    out = bytearray()
    while len(out) < n:
        piece = stream.read(n - len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


def read_pcm16(stream: BinaryIO, num_samples: int) -> np.ndarray:
    """Read up to ``num_samples`` mono 16-bit PCM samples from a byte stream (e.g. stdin).

    Blocks until ``num_samples`` are read or the stream ends; a pipe may deliver fewer bytes per
    ``read``, so it loops. An empty result means end of stream.

    Raises:
        AudioError: if the stream ends in the middle of a sample (an odd byte count).
    """
    if num_samples <= 0:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    buf = read_upto(stream, 2 * num_samples)
    if len(buf) % 2:
        name = getattr(stream, "name", "<stream>")
        raise AudioError(name, "truncated", "PCM stream ended in the middle of a 16-bit sample")
    return pcm16_to_float(buf)
