#!/usr/bin/env python3
"""Stream audio files through a TorchScript model from `wenet-lite export` and print the text.

Usage:
    python tools/run_exported.py model.ts a.wav [b.flac ...] [--piece-ms 100] [--threads 1]

Prints one transcript per file, in order (``--names``: ``PATH TEXT`` lines, as
tools/run_sherpa.py prints them). Audio is fed in pieces of --piece-ms as a live
stream would arrive; the text does not depend on the piece size.

Standalone on purpose: it imports torch, numpy, soundfile and kaldi_native_fbank (and soxr
only for audio at another sample rate than the model's), never wenet_lite, and reads everything
else from the model file (``metadata()``, ``vocabulary()``; see
wenet_lite/export/torchscript.py). Copy it next to a model to deploy. What it repeats of
wenet_lite is deliberate and small: audio loading as ``features/audio.py`` does it (mono mean,
soxr "HQ" resampling, clip to [-1, 1]), the fbank *options* of ``features/fbank.py`` (taken
from the metadata, with samples scaled by ``sample_scale`` before kaldi-native-fbank), greedy
CTC, and sentencepiece's rule for turning pieces into text.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Tuple

import kaldi_native_fbank as knf
import numpy as np
import soundfile as sf
import torch

State = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
WORD_BOUNDARY = "\u2581"  # sentencepiece's '▁'
UNK_PIECE, UNK_SURFACE = "<unk>", " \u2047 "  # sentencepiece decodes <unk> as ' ⁇ '


def load_audio(path: str, rate: int) -> np.ndarray:
    """(N,) float32 mono samples in [-1, 1] at ``rate`` Hz."""
    data, file_rate = sf.read(path, dtype="float32", always_2d=True)  # (N, Ch)
    samples = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if file_rate != rate:
        import soxr  # only needed here: a deployment with matching audio can leave it out

        samples = soxr.resample(samples, file_rate, rate, quality="HQ")
    return np.clip(samples, -1.0, 1.0).astype(np.float32, copy=False)


def fbank_options(meta: Dict[str, str]) -> knf.FbankOptions:
    """kaldi-native-fbank options exactly as the model was trained with (from its metadata)."""
    opts = knf.FbankOptions()
    frame, mel = opts.frame_opts, opts.mel_opts
    frame.samp_freq = float(meta["sample_rate"])
    frame.frame_length_ms = float(meta["frame_length_ms"])
    frame.frame_shift_ms = float(meta["frame_shift_ms"])
    frame.snip_edges = meta["snip_edges"] == "true"
    frame.dither = float(meta["dither"])
    frame.remove_dc_offset = meta["remove_dc_offset"] == "true"
    frame.preemph_coeff = float(meta["preemph_coeff"])
    frame.window_type = meta["window_type"]
    frame.round_to_power_of_two = meta["round_to_power_of_two"] == "true"
    mel.num_bins = int(meta["num_mel_bins"])
    mel.low_freq = float(meta["low_freq"])
    mel.high_freq = float(meta["high_freq"])
    return opts


def pieces_to_text(pieces: List[str]) -> str:
    """sentencepiece's decoding: '▁' is a space, <unk> reads ' ⁇ ', and the first piece's
    leading '▁' is dropped."""
    parts = [UNK_SURFACE if p == UNK_PIECE else p.replace(WORD_BOUNDARY, " ") for p in pieces]
    if pieces and pieces[0].startswith(WORD_BOUNDARY):
        parts[0] = parts[0][1:]
    return "".join(parts)


class Transcriber:
    """One stream: samples in, fbank frames, chunk windows through the model, greedy CTC."""

    def __init__(self, model: torch.jit.ScriptModule) -> None:
        self.model = model
        self.meta: Dict[str, str] = dict(model.metadata())
        self.pieces: List[str] = list(model.vocabulary())
        self.rate = int(self.meta["sample_rate"])
        self.scale = float(self.meta["sample_scale"])
        self.window = int(self.meta["window_size"])
        self.shift = int(self.meta["window_shift"])
        self.right_context = int(self.meta["right_context"])
        self.blank = int(self.meta["blank_id"])
        self.fbank = knf.OnlineFbank(fbank_options(self.meta))
        self.state: State = model.init_state(1)
        self.start = 0  # first fbank frame of the next window
        self.prev = self.blank
        self.tokens: List[int] = []

    def accept(self, samples: np.ndarray) -> None:
        """Append (N,) float samples and decode every window that is complete."""
        self.fbank.accept_waveform(self.rate, samples * np.float32(self.scale))
        self._decode_ready(final=False)

    def finish(self) -> str:
        """Flush the last frames (and a last, shorter window); return the transcript."""
        self.fbank.input_finished()
        self._decode_ready(final=True)
        return pieces_to_text([self.pieces[t] for t in self.tokens])

    def _decode_ready(self, final: bool) -> None:
        ready = self.fbank.num_frames_ready
        # A last window needs right_context + 1 frames to give at least one encoder frame.
        while ready - self.start >= self.window or (
            final and ready - self.start > self.right_context
        ):
            end = min(self.start + self.window, ready)
            frames = [self.fbank.get_frame(i) for i in range(self.start, end)]
            window = torch.from_numpy(np.stack(frames)).unsqueeze(0)  # (1, W_in, F)
            with torch.no_grad():
                log_probs, self.state = self.model.forward_chunk(window, self.state)
            self._greedy(log_probs[0].argmax(dim=-1).tolist())
            if end - self.start == self.window:
                self.fbank.pop(self.shift)  # frames before the next window; indices stay absolute
            self.start += self.shift

    def _greedy(self, best: List[int]) -> None:
        """Merge repeats (also across chunks) and drop blanks."""
        for token in best:
            if token != self.blank and token != self.prev:
                self.tokens.append(token)
            self.prev = token


def transcribe(model: torch.jit.ScriptModule, path: str, piece_ms: float) -> str:
    meta = dict(model.metadata())
    rate = int(meta["sample_rate"])
    samples = load_audio(path, rate)
    if int(meta["chunk_size"]) <= 0:  # a full-context export: one forward over the file
        return _transcribe_full(model, samples, meta)
    stream = Transcriber(model)
    step = max(1, int(rate * piece_ms / 1000))
    for begin in range(0, len(samples), step):
        stream.accept(samples[begin : begin + step])
    return stream.finish()


def _transcribe_full(
    model: torch.jit.ScriptModule, samples: np.ndarray, meta: Dict[str, str]
) -> str:
    fbank = knf.OnlineFbank(fbank_options(meta))
    fbank.accept_waveform(int(meta["sample_rate"]), samples * np.float32(meta["sample_scale"]))
    fbank.input_finished()
    frames = [fbank.get_frame(i) for i in range(fbank.num_frames_ready)]
    feats = torch.from_numpy(np.stack(frames)).unsqueeze(0)  # (1, T_in, F)
    with torch.no_grad():
        log_probs, _ = model(feats, torch.tensor([feats.size(1)]))
    pieces, blank, prev = list(model.vocabulary()), int(meta["blank_id"]), -1
    tokens = []
    for token in log_probs[0].argmax(dim=-1).tolist():
        if token != blank and token != prev:
            tokens.append(token)
        prev = token
    return pieces_to_text([pieces[t] for t in tokens])


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("model", help="TorchScript file written by `wenet-lite export`")
    parser.add_argument("audio", nargs="+", help="audio files (any rate; resampled)")
    parser.add_argument("--piece-ms", type=float, default=100.0, help="stream piece size")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--names", action="store_true", help="print 'PATH TEXT' lines")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model = torch.jit.load(args.model, map_location="cpu")
    except (RuntimeError, ValueError, OSError) as e:
        print(f"run_exported: cannot load {args.model}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    model.eval()
    for path in args.audio:
        try:
            text = transcribe(model, path, args.piece_ms)
            print(f"{path} {text}" if args.names else text, flush=True)
        except (sf.LibsndfileError, OSError, RuntimeError) as e:
            print(f"run_exported: {path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
