#!/usr/bin/env python3
"""Decode audio files with sherpa-onnx from an ONNX export of `wenet-lite export --format onnx`.

Usage:
    python examples/run_sherpa.py --dir exp/synthetic/onnx --chunk-size 16 --left-chunks 4 \
        a.flac [b.wav ...] [--int8]

Prints ``file text`` per input. Chunk size, left chunks and the fbank dimension default to the
values `export` wrote into the model's metadata (the ONNX caches have fixed shapes, and
sherpa-onnx assumes 80 mel bins unless told). Standalone: needs sherpa-onnx, onnxruntime, numpy
and soundfile (plus soxr for inputs that are not at 16 kHz), never wenet_lite.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import soundfile as sf

RATE = 16000
TAIL_S = 0.5  # trailing silence: sherpa-onnx decodes a window only once the next frame exists


def load(path: str) -> np.ndarray:
    data, rate = sf.read(path, dtype="float32", always_2d=True)  # (N, Ch)
    samples = data.mean(axis=1, dtype=np.float32)
    if rate != RATE:
        import soxr

        samples = soxr.resample(samples, rate, RATE, quality="HQ").astype(np.float32)
    return samples


def metadata(model: Path) -> Dict[str, str]:
    """The key/value metadata `wenet-lite export` stored in the ONNX model."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(session.get_modelmeta().custom_metadata_map)


def main(argv: Optional[List[str]] = None) -> None:
    import sherpa_onnx

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dir", type=Path, required=True, help="export dir (model.onnx, tokens.txt)")
    p.add_argument("--chunk-size", type=int, help="default: the model's metadata")
    p.add_argument("--left-chunks", type=int, help="default: the model's metadata")
    p.add_argument("--int8", action="store_true", help="use model.int8.onnx")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("audio", nargs="+")
    args = p.parse_args(argv)
    model = args.dir / ("model.int8.onnx" if args.int8 else "model.onnx")
    meta = metadata(model)
    recognizer = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
        tokens=str(args.dir / "tokens.txt"),
        model=str(model),
        chunk_size=args.chunk_size if args.chunk_size is not None else int(meta["chunk_size"]),
        num_left_chunks=(
            args.left_chunks if args.left_chunks is not None else int(meta["left_chunks"])
        ),
        num_threads=args.threads,
        sample_rate=RATE,
        feature_dim=int(meta.get("num_mel_bins", 80)),
    )
    for path in args.audio:
        samples = np.concatenate([load(path), np.zeros(int(TAIL_S * RATE), np.float32)])
        stream = recognizer.create_stream()
        for begin in range(0, len(samples), 1600):  # 100 ms pieces, as a live stream
            stream.accept_waveform(RATE, samples[begin : begin + 1600])
        stream.input_finished()
        while recognizer.is_ready(stream):
            recognizer.decode_stream(stream)
        print(f"{path} {recognizer.get_result(stream).strip()}", flush=True)


if __name__ == "__main__":
    main()
