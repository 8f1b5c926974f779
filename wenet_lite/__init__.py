"""wenet_lite: a streaming Conformer CTC speech-recognition toolkit.

Shapes: one legend for the whole package. Docstrings and the shape comments after views,
transposes and concats (``# (B, H, C, M+C)``) use these letters, each in one meaning only:

    B    batch: utterances, or streams decoded together
    N    audio samples; Ch audio channels
    T_in input (fbank) frames; F fbank bins (``features.num_mel_bins``)
    W    input frames of one streaming chunk's window: (C-1) * rate + right context + 1
    T    encoder frames, after subsampling by ``rate``
    C    encoder frames of one chunk (the queries of a streaming step)
    M    cached encoder frames of the left context; a chunk's keys are the M+C frames
    P    distinct relative distances of a window of C queries over M+C keys: M+2C-1
    D    model dim; H attention heads; d_k = D / H, the head dim
    L    layers (Conformer blocks); K the depthwise conv's kernel
    V    vocabulary (id 0 is the CTC blank); U target tokens of an utterance
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["load_model", "transcribe", "Transcriber", "Transcript", "__version__"]

if TYPE_CHECKING:
    from wenet_lite.model_io import load_model
    from wenet_lite.transcription import Transcriber, Transcript, transcribe


def __getattr__(name: str) -> Any:
    # Lazy, so `import wenet_lite.config` does not pull in sentencepiece and lhotse.
    if name == "load_model":
        from wenet_lite.model_io import load_model

        return load_model
    if name in ("transcribe", "Transcriber", "Transcript"):
        from wenet_lite import transcription

        return getattr(transcription, name)
    raise AttributeError(f"module 'wenet_lite' has no attribute {name!r}")
