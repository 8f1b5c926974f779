"""Audio in, text out, in one call: :func:`transcribe` (``wenet_lite.transcribe``) and
`wenet-lite transcribe`.

Example::

    from wenet_lite import transcribe

    t = transcribe("exp/u2/avg_5.pt", "meeting.wav")
    print(t.text)
    for seg in t.segments:
        print(seg.start, seg.end, seg.text, [(w.text, w.start) for w in seg.words])

A model file decodes in full context by default (what `decode` computes: a file longer than
``max_window_seconds`` in overlapping windows of bounded memory) and is cut into segments at
pauses between words; with ``chunk_size`` > 0 it streams at the model's own latency and the
segments are the endpoints'. An export directory or an opened
:class:`~wenet_lite.runtime.streaming.StreamingRecognizer` always streams. Both open through
the front door, :func:`wenet_lite.recognizer.open_recognizer`; the transcript and its file
formats (subtitles included) are ``wenet_lite.transcript``'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence, Tuple, Union, overload

import numpy as np
import torch

from wenet_lite.features.audio import (
    AudioError,
    check_rate,
    decode_audio_bytes,
    read_audio_blocks,
)
from wenet_lite.files.export_dir import ExportDir, is_export_dir
from wenet_lite.model.chunking import Chunking
from wenet_lite.punct.punctuator import PunctSource
from wenet_lite.recognizer import (
    EngineSpec,
    Recognizer,
    Source,
    as_offline,
    as_streaming,
    open_offline,
    open_streaming,
)
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.offline import OfflineRecognizer
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.runtime.utterance import DecodeOptions
from wenet_lite.search.options import SearchOptions
from wenet_lite.transcript import (  # the transcript and its formats, importable from here too
    DEFAULT_PAUSE_S,
    FORMATS,
    Cue,
    Segment,
    Transcript,
    format_transcript,
    pauses_transcript,
    split_at_pauses,
    subtitle_cues,
)
from wenet_lite.vad.silero import VadOptions

if TYPE_CHECKING:
    from wenet_lite.speakers.diarize import Diarizer, SpeakerOptions

__all__ = ["FORMATS", "Cue", "Segment", "Transcriber", "Transcript", "format_transcript",
           "split_at_pauses", "subtitle_cues", "transcribe", "DEFAULT_PAUSE_S"]  # fmt: skip

_log = logging.getLogger(__name__)
PathLike = Union[str, Path]


class Transcriber:
    """A model opened once for many inputs (what :func:`transcribe` and the CLI use).

    Example::

        from wenet_lite import Transcriber

        tr = Transcriber("exp/u2/avg_5.pt", beam=10)  # load once
        for path in ["a.wav", "b.flac"]:
            print(tr.file(path).text)

    Args:
        model: a model file, an export directory, a ``(model, tokenizer, config)`` triple in
            memory, or an opened recogniser (``open_recognizer``: streaming or offline; it
            keeps its own engine, punctuator and VAD, so ``engine``, ``punct``, ``vad`` and
            ``vad_options`` are refused beside it).
        chunk_size: 0 (default) full context; C > 0 streams in chunks of C encoder frames.
        left_chunks: chunks of history while streaming (4: constant memory; -1 all).
        search: the search (greedy by default; prefix beam, LM, hotwords, rescoring). Its
            fields may be given as keywords instead, by their CLI names: ``mode``, ``beam``,
            ``lm``, ``lm_weight``, ``hotwords``, ... (``beam`` alone selects the prefix beam).
        endpoint: endpointing while streaming (segments); default ``EndpointConfig()``.
        device: where a model file runs (default cpu).
        pause: seconds between words that start a new segment in full context.
        engine: an ``EngineSpec`` (``recognizer.py``; default the source's). Full context runs
            the eager model in fp32: another engine or precision there is a ``RuleError``.
        progress: a bar on stderr over a long file's windows (full context).
        threads: torch's intra-op threads (1, as the CLI: more threads on a busy machine run
            many times slower). Set for the whole process, as ``torch.set_num_threads``.
        upsample: audio below the model's rate is upsampled with a warning (True) or
            refused with an ``AudioError`` (False).
        punct: a punctuation model (`wenet-lite train-punct`: its directory or a loaded
            ``Punctuator``): the text and words cased and punctuated (full context: the whole
            file, or each speech region with the VAD; streaming: each segment).
        vad: full context: find the speech regions first (Silero VAD) and decode only them,
            in batches, word times in file time; None: on where silero-vad is installed
            (``pip install 'wenet_lite[vad]'``), True: required, False: off (the whole file).
            Streaming ends segments by endpointing instead.
        vad_options: the VAD's threshold, shortest speech and silence, and padding
            (``VadOptions``; faster-whisper's defaults).
        itn: numbers, money, dates and times written as digits (the ``itn`` extra), each
            written word with the times and confidence of the spoken words it came from.
        speakers: full context: label every segment and word with its speaker (``S1``,
            ``S2``, ...; the ``speakers`` extra): ``"auto"`` estimates how many there are,
            an int gives the number, or ``SpeakerOptions``; segments split where the
            speaker changes.
    """

    def __init__(
        self,
        model: Union[Source, Recognizer],
        chunk_size: int = 0,
        left_chunks: int = 4,
        search: Optional[SearchOptions] = None,
        endpoint: Optional[EndpointConfig] = None,
        device: Optional[str] = None,
        pause: float = DEFAULT_PAUSE_S,
        max_window_seconds: float = 30.0,
        engine: Optional[EngineSpec] = None,
        progress: bool = True,
        threads: int = 1,
        upsample: bool = True,
        punct: Optional[PunctSource] = None,
        vad: Optional[bool] = None,
        vad_options: Optional[VadOptions] = None,
        itn: bool = False,
        speakers: Union[None, int, str, SpeakerOptions] = None,
        **search_options: Any,
    ) -> None:
        _check_options(model, chunk_size, pause, threads)
        self.diarizer = _diarizer(speakers, chunk_size)
        if engine is not None and (device is not None or threads != 1):
            raise ValueError(
                "engine= carries the device and threads: give them as EngineSpec(device=..., "
                "threads=...), not beside it (they would be ignored)"
            )
        opened = as_streaming(model) or as_offline(model)
        if opened is not None:
            _refuse_beside(engine=engine, device=device, threads=threads if threads != 1 else None,
                           punct=punct, vad=vad, vad_options=vad_options,
                           itn=itn or None)  # fmt: skip
        self.pause = pause
        self.upsample = upsample
        self.progress = progress
        self.search = _search_from(search, search_options)
        spec = engine or EngineSpec(threads=threads, device=device or "cpu")
        if vad and chunk_size > 0:
            raise ValueError(
                "vad=True works in full context (chunk_size=0); streaming ends segments by "
                "endpointing"
            )
        self.recognizer: Recognizer
        if opened is not None:
            self.recognizer = opened
        elif chunk_size == 0 and not is_export_dir(model):  # an export directory only streams
            options = DecodeOptions(self.search, max_window_seconds=max_window_seconds,
                                    window_progress=progress)  # fmt: skip
            self.recognizer = open_offline(model, options, self.search, spec, punct, vad,
                                           vad_options, itn)  # fmt: skip
        else:
            chunking = Chunking(chunk_size, left_chunks) if chunk_size > 0 else None
            self.recognizer = open_streaming(
                model, chunking, self.search, endpoint, spec, punct=punct, itn=itn
            )
        self._streaming = as_streaming(self.recognizer)
        self._offline = as_offline(self.recognizer)
        self.sample_rate: int = self.recognizer.cfg.features.sample_rate

    @property
    def streaming(self) -> bool:
        """Whether inputs stream (chunked) or are decoded whole (full context)."""
        return self._streaming is not None

    def file(self, path: PathLike) -> Transcript:
        """Transcribe one audio file (AudioError names a bad one); ``-`` reads stdin.

        Streaming reads the file in blocks (constant memory for any length); full context
        reads it whole (long files are then decoded in windows)."""
        if str(path) == "-":
            import sys

            return self.audio_bytes(sys.stdin.buffer.read(), "-")
        blocks = read_audio_blocks(path, _BLOCK_SECONDS if self.streaming else None)
        return self._blocks(blocks, str(path))

    def audio_bytes(self, data: bytes, name: str = "-") -> Transcript:
        """Transcribe the bytes of an audio file (any format libsndfile reads)."""
        samples, rate = decode_audio_bytes(data, name)
        return self._blocks(iter([(samples, rate)]), name)

    def array(self, samples: np.ndarray, sample_rate: int, name: str = "<array>") -> Transcript:
        """Transcribe samples (float, mono, in [-1, 1]) at ``sample_rate`` Hz."""
        x = np.asarray(samples)
        if x.dtype.kind != "f":
            raise ValueError(
                f"{name}: expected float samples in [-1, 1], got {x.dtype}"
                + (": divide 16-bit PCM by 32768" if x.dtype.kind in "iu" else "")
            )
        if x.ndim != 1:
            raise ValueError(f"{name}: expected mono samples (N,), got shape {x.shape}")
        if (isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer))
                or sample_rate <= 0):  # fmt: skip
            raise ValueError(
                f"{name}: sample_rate must be a positive int (Hz), got {sample_rate!r}"
            )
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise AudioError(name, "non_finite", "samples hold NaN or infinity")
        step = max(1, int(_BLOCK_SECONDS * sample_rate) if self.streaming else x.size)
        pieces = ((x[i : i + step], int(sample_rate)) for i in range(0, max(x.size, 1), step))
        return self._blocks(pieces, name)

    def _blocks(self, blocks: Iterator[Tuple[np.ndarray, int]], name: str) -> Transcript:
        """The transcript of (samples, rate) blocks, all of one rate (checked on the first)."""
        first = next(blocks)
        rate = first[1]
        check_rate(name, rate, self.sample_rate, self.upsample)
        if self.streaming:
            return self._streamed(itertools.chain([first], blocks), name)
        rest = [b for b, _ in blocks]  # one block (the file, the bytes, the array): no copy
        samples = np.concatenate([first[0], *rest]) if rest else first[0]
        return self._full_context(samples, rate, name, samples.size / rate)

    def _streamed(self, blocks: Iterator[Tuple[np.ndarray, int]], name: str) -> Transcript:
        """Fed and decoded block by block: memory of one block and the stream's caches."""
        rec = self._streaming
        assert rec is not None, "a streaming recogniser decodes in blocks"
        stream = rec.create_stream()
        samples, rate = 0, 1
        for block, rate in blocks:
            stream.accept_waveform(rate, block)
            samples += block.size
            while rec.decode_streams([stream]):
                pass
        stream.input_finished()
        rec.decode_until_done([stream])
        segments = [Segment(r.start, r.end, r.text, tuple(r.words)) for r in stream.final_results]
        segments = [s for s in segments if s.text]
        return Transcript(name, " ".join(s.text for s in segments), segments, samples / rate)

    def _full_context(
        self, samples: np.ndarray, rate: int, name: str, duration: float
    ) -> Transcript:
        """Decoded by its speech spans (the recogniser's VAD), split at pauses."""
        rec = self._offline
        assert rec is not None, "an offline recogniser decodes whole files"
        results = rec.file_results(samples, rate, name, self.pause, self.progress)
        transcript = pauses_transcript(name, results, duration, self.pause)
        if self.diarizer is not None:
            transcript = self.diarizer.label(transcript, samples, rate)
        return transcript


def _diarizer(speakers: Any, chunk_size: int) -> Optional[Diarizer]:
    """The speaker labeller ``speakers`` asks for (None: none); bad values name themselves."""
    if speakers is None:
        return None
    from wenet_lite.speakers.diarize import Diarizer, SpeakerOptions

    if isinstance(speakers, SpeakerOptions):
        options = speakers
    elif speakers == "auto":
        options = SpeakerOptions()
    elif isinstance(speakers, (int, np.integer)) and not isinstance(speakers, bool):
        options = SpeakerOptions(num_speakers=int(speakers))
    else:
        raise ValueError(f"speakers={speakers!r}: give 'auto', a number of speakers or "
                         "SpeakerOptions")  # fmt: skip
    if chunk_size > 0:
        raise ValueError(
            "speaker labels are given in full context (chunk_size=0): a stream's clustering "
            "would change labels it had already given"
        )
    return Diarizer(options)


def _refuse_beside(**given: Any) -> None:
    """ValueError naming the options given beside an opened recogniser (they would change it
    for every other holder, or be ignored)."""
    named = [name for name, value in given.items() if value is not None]
    if named:
        raise ValueError(
            f"an opened recogniser keeps its own engine, device, threads, punctuator, VAD and "
            "ITN: "
            f"{', '.join(f'{n}=' for n in named)} would change it or be ignored; give them to "
            "open_recognizer"
        )


_BLOCK_SECONDS = 10.0
"""streaming: seconds of audio read and decoded at a time"""


def _check_options(model: Any, chunk_size: Any, pause: Any, threads: Any) -> None:
    """ValueError naming the argument, before anything is loaded."""
    triple = isinstance(model, (tuple, list)) and len(model) == 3
    if triple and not hasattr(model[0], "encoder"):
        triple = False  # (1, 2, 3) is no (model, tokenizer, config)
    if not triple and not isinstance(
        model, (str, Path, ExportDir, StreamingRecognizer, OfflineRecognizer)
    ):
        raise ValueError(
            "model must be a model file, an export directory, (model, tokenizer, config) or "
            f"an opened recogniser, got {model!r}"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise ValueError(
            f"chunk_size must be 0 (full context) or a positive int, got {chunk_size!r}"
        )
    if isinstance(pause, bool) or not isinstance(pause, (int, float)) or not 0 <= pause < 1e6:
        raise ValueError(f"pause must be seconds >= 0, got {pause!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")


def _search_names() -> dict:
    """Keyword -> SearchOptions field: the CLI's flag names (``--beam`` -> ``beam``) and the
    field names themselves."""
    names = {}
    for f in dataclasses.fields(SearchOptions):
        names[f.name] = f.name
        if "flag" in f.metadata:
            names[f.metadata["flag"].lstrip("-").replace("-", "_")] = f.name
    return names


def _search_from(search: Optional[SearchOptions], given: dict) -> SearchOptions:
    if not given:
        return search or SearchOptions()
    if search is not None:
        raise TypeError("give search=SearchOptions(...) or search keywords, not both")
    names = _search_names()
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(
            f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
        )
    values = {names[k]: v for k, v in given.items()}
    if values.get("beam_size") is not None and "mode" not in values:
        values["mode"] = "prefix_beam"  # beam=5 asks for a beam, as whisper's beam_size does
    return SearchOptions(**values)


@overload
def transcribe(model: Any, audio: PathLike, sample_rate: Optional[int] = None,
               **options: Any) -> Transcript: ...  # fmt: skip
@overload
def transcribe(model: Any, audio: np.ndarray, sample_rate: Optional[int] = None,
               **options: Any) -> Transcript: ...  # fmt: skip
@overload
def transcribe(model: Any, audio: Sequence[PathLike], sample_rate: Optional[int] = None,
               **options: Any) -> List[Transcript]: ...  # fmt: skip
def transcribe(model: Any, audio: Any, sample_rate: Optional[int] = None, **options: Any) -> Any:
    """Transcribe a file, several files, or samples.

    Args:
        model: a model file, an export directory, ``(model, tokenizer, config)`` or an opened
            ``StreamingRecognizer`` (see :class:`Transcriber`).
        audio: a path, a list of paths, or a float array of mono samples (then
            ``sample_rate`` is required).
        options: :class:`Transcriber`'s (``chunk_size``, ``left_chunks``, ``search`` or its
            fields by their CLI names such as ``beam=10``, ``endpoint``, ``device``, ``pause``,
            ``max_window_seconds``, ``threads``, ``upsample``, ``punct``).
    Returns:
        a :class:`Transcript`, or a list of them for a list of paths. A bad file raises
        ``AudioError`` naming it (the CLI skips it and goes on).
    """
    t = Transcriber(model, **options)
    if isinstance(audio, np.ndarray) or torch.is_tensor(audio):
        if sample_rate is None:
            raise ValueError("transcribe: samples need their sample_rate")
        return t.array(np.asarray(audio), sample_rate)
    if isinstance(audio, (str, Path)):
        return t.file(audio)
    paths = list(audio)
    if any(not isinstance(a, (str, Path)) for a in paths):
        raise ValueError(
            "transcribe: audio is a path, a list of paths, or samples as a numpy array (with "
            f"sample_rate); got a {type(audio).__name__} holding {type(paths[0]).__name__}"
        )
    return [t.file(a) for a in paths]
