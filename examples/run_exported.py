#!/usr/bin/env python3
"""Stream audio files through a TorchScript model from `wenet-lite export` and print the text.

Usage:
    python examples/run_exported.py model.ts a.wav [b.flac ...] [--piece-ms 100] [--threads 1]
    python examples/run_exported.py model.ts a.wav --rescore [--beam 10] [--ctc-weight W]

Prints one transcript per file, in order (``--names``: ``PATH TEXT`` lines, as
examples/run_sherpa.py prints them). Audio is fed in pieces of --piece-ms as a live
stream would arrive; the text does not depend on the piece size.

Standalone on purpose: it imports torch, numpy, soundfile and kaldi_native_fbank (and soxr
only for audio at another sample rate than the model's), never wenet_lite, and reads everything
else from the model file (``metadata()``, ``vocabulary()``; see
wenet_lite/export/torchscript.py). Copy it next to a model to deploy. What it repeats of
wenet_lite is deliberate and small: audio loading as ``features/audio.py`` does it (mono mean,
soxr "HQ" resampling, clip to [-1, 1]), the fbank *options* of ``features/fbank.py`` (taken
from the metadata, with samples scaled by ``sample_scale`` before kaldi-native-fbank), greedy
CTC, and sentencepiece's rule for turning pieces into text.

``--rescore`` (a model exported with an attention decoder): CTC prefix beam search instead of
greedy, and at the end of each file its n-best re-ranked by the model's
``forward_attention_decoder`` over the file's encoder output, as `wenet-lite stream --mode
attention_rescoring --no-endpoint` does (the beam search here is a plain copy of
``search/ctc_search.py``'s, without LM or hotwords, so that its n-best is the same).
"""

from __future__ import annotations

import argparse
import math
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


def _log_add(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


def _add(
    beam: Dict[Tuple[int, ...], List[float]], prefix: Tuple[int, ...], value: float, blank: bool
) -> None:
    """Add an alignment family's log-probability to ``prefix``'s blank or non-blank part."""
    if value == -math.inf:
        return
    entry = beam.setdefault(prefix, [-math.inf, -math.inf])
    i = 0 if blank else 1
    entry[i] = _log_add(entry[i], value)


class PrefixBeam:
    """CTC prefix beam search over chunks: per frame the beam's top tokens extend each prefix
    (blank, repeat, new token), prefixes ranked by log(P_blank + P_non_blank)."""

    def __init__(self, beam: int, blank: int) -> None:
        self.beam, self.blank = beam, blank
        # prefix -> [log P(ends in blank), log P(ends in its last token)]
        self.prefixes: Dict[Tuple[int, ...], List[float]] = {(): [0.0, -math.inf]}

    def accept(self, log_probs: torch.Tensor) -> None:
        """(C, V) log-probabilities of a chunk's frames."""
        top_lp, top_id = log_probs.topk(min(self.beam, log_probs.size(-1)), dim=-1)
        for tokens, lps in zip(top_id.tolist(), top_lp.tolist()):
            nxt: Dict[Tuple[int, ...], List[float]] = {}
            for prefix, (pb, pnb) in self.prefixes.items():
                total = _log_add(pb, pnb)
                last = prefix[-1] if prefix else None
                for tok, lp in zip(tokens, lps):
                    if tok == self.blank:
                        _add(nxt, prefix, total + lp, True)
                    elif tok != last:
                        _add(nxt, prefix + (tok,), total + lp, False)
                    else:
                        if pnb > -math.inf:
                            _add(nxt, prefix, pnb + lp, False)
                        if pb > -math.inf:
                            _add(nxt, prefix + (tok,), pb + lp, False)
            ranked = sorted(nxt.items(), key=lambda item: _log_add(*item[1]), reverse=True)
            self.prefixes = dict(ranked[: self.beam])

    def nbest(self) -> List[Tuple[List[int], float]]:
        """(tokens, log-probability), best first."""
        scored = [(list(p), _log_add(*v)) for p, v in self.prefixes.items()]
        return sorted(scored, key=lambda item: item[1], reverse=True)


def rescore(
    model: torch.jit.ScriptModule,
    nbest: List[Tuple[List[int], float]],
    encoder_out: torch.Tensor,
    ctc_weight: float,
    reverse_weight: float,
) -> List[int]:
    """The tokens of the best of ``nbest`` by decoder score + ctc_weight * CTC score (silence,
    an empty best, stays silence; otherwise empty hypotheses are no candidates)."""
    if not nbest or not nbest[0][0] or encoder_out.size(1) == 0:
        return nbest[0][0] if nbest else []
    spoken = [(tokens, score) for tokens, score in nbest if tokens]
    width = max(len(tokens) for tokens, _ in spoken)
    hyps = torch.zeros(len(spoken), width, dtype=torch.long)
    for i, (tokens, _) in enumerate(spoken):
        hyps[i, : len(tokens)] = torch.tensor(tokens)
    lens = torch.tensor([len(tokens) for tokens, _ in spoken])
    with torch.no_grad():
        att = model.forward_attention_decoder(hyps, lens, encoder_out, reverse_weight).tolist()
    totals = [a + ctc_weight * score for a, (_, score) in zip(att, spoken)]
    return spoken[max(range(len(spoken)), key=lambda i: totals[i])][0]


class Transcriber:
    """One stream: samples in, fbank frames, chunk windows through the model, greedy CTC (or,
    with ``beam``, prefix beam search that keeps the encoder output for rescoring)."""

    def __init__(self, model: torch.jit.ScriptModule, beam: int = 0) -> None:
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
        self.search = PrefixBeam(beam, self.blank) if beam > 0 else None
        self.encoded: List[torch.Tensor] = []  # (1, C, D) per chunk, for rescoring

    def accept(self, samples: np.ndarray) -> None:
        """Append (N,) float samples and decode every window that is complete."""
        self.fbank.accept_waveform(self.rate, samples * np.float32(self.scale))
        self._decode_ready(final=False)

    def finish(self, ctc_weight: float = 0.5, reverse_weight: float = 0.3) -> str:
        """Flush the last frames (and a last, shorter window); return the transcript (with a
        beam: the n-best rescored with these weights)."""
        self.fbank.input_finished()
        self._decode_ready(final=True)
        if self.search is not None:
            encoder_out = torch.cat(self.encoded, dim=1) if self.encoded else torch.zeros(1, 0, 1)
            nbest = self.search.nbest()
            self.tokens = rescore(self.model, nbest, encoder_out, ctc_weight, reverse_weight)
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
                if self.search is None:
                    log_probs, self.state = self.model.forward_chunk(window, self.state)
                    self._greedy(log_probs[0].argmax(dim=-1).tolist())
                else:
                    out, log_probs, self.state = self.model.encode_chunk(window, self.state)
                    self.encoded.append(out)
                    self.search.accept(log_probs[0])
            if end - self.start == self.window:
                self.fbank.pop(self.shift)  # frames before the next window; indices stay absolute
            self.start += self.shift

    def _greedy(self, best: List[int]) -> None:
        """Merge repeats (also across chunks) and drop blanks."""
        for token in best:
            if token != self.blank and token != self.prev:
                self.tokens.append(token)
            self.prev = token


def transcribe(
    model: torch.jit.ScriptModule, path: str, piece_ms: float, args: argparse.Namespace
) -> str:
    meta = dict(model.metadata())
    rate = int(meta["sample_rate"])
    samples = load_audio(path, rate)
    if int(meta["chunk_size"]) <= 0:  # a full-context export: one forward over the file
        return _transcribe_full(model, samples, meta)
    stream = Transcriber(model, args.beam if args.rescore else 0)
    step = max(1, int(rate * piece_ms / 1000))
    for begin in range(0, len(samples), step):
        stream.accept(samples[begin : begin + step])
    ctc_weight = float(meta["rescore_ctc_weight"]) if args.ctc_weight is None else args.ctc_weight
    reverse = float(meta["rescore_reverse_weight"])
    return stream.finish(
        ctc_weight, reverse if args.reverse_weight is None else args.reverse_weight
    )


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
    parser.add_argument(
        "--rescore", action="store_true", help="prefix beam search + attention rescoring"
    )
    parser.add_argument("--beam", type=int, default=10, help="--rescore: beam size (10)")
    parser.add_argument(
        "--ctc-weight", type=float, help="--rescore: CTC score weight (default: the metadata's)"
    )
    parser.add_argument(
        "--reverse-weight", type=float, help="--rescore: right-to-left share (metadata's)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model = torch.jit.load(args.model, map_location="cpu")
    except (RuntimeError, ValueError, OSError) as e:
        print(f"run_exported: cannot load {args.model}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    model.eval()
    meta = dict(model.metadata())
    if args.rescore and meta.get("decoder", "none") == "none":
        print(
            f"run_exported: {args.model} has no attention decoder: drop --rescore", file=sys.stderr
        )
        return 1
    if args.rescore and int(meta["chunk_size"]) <= 0:
        print(f"run_exported: {args.model} is full-context: --rescore streams", file=sys.stderr)
        return 1
    for path in args.audio:
        try:
            text = transcribe(model, path, args.piece_ms, args)
            print(f"{path} {text}" if args.names else text, flush=True)
        except (sf.LibsndfileError, OSError, RuntimeError) as e:
            print(f"run_exported: {path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
