"""sherpa-onnx runs the exported transducer head (``transducer/encoder.onnx``, ``decoder.onnx``,
``joiner.onnx``): its greedy search gives the text of our `stream --mode transducer_greedy
--max-symbols 1`, and its modified beam search (4 active paths) one of the 4 hypotheses of
our `--mode transducer_beam --beam 4` (it picks by length-normalised score), over the windows
sherpa decodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.export.sherpa_loop import encoder_over_sherpa_windows
from wenet_lite.data.manifest import load_cuts
from wenet_lite.export.onnx import export_onnx
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.files.model_file import save_model
from wenet_lite.model import build_model
from wenet_lite.search.transducer_search import transducer_beam_search, transducer_greedy_search

sherpa_onnx = pytest.importorskip("sherpa_onnx")

CHUNK, LEFT = 4, 2
TAIL_S = 0.3  # silence after the speech: sherpa-onnx never decodes an incomplete last window


@pytest.fixture(scope="module")
def hybrid_file(tiny, tmp_path_factory):
    """The rigged tiny model with a transducer head on its rigged CTC head (as
    tests/runtime/test_streaming_transducer.py), saved as a model file whose config has it."""
    cfg = tiny.cfg
    d, v = tiny.model.ctc.proj.in_features, tiny.model.ctc.proj.out_features
    cfg = dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, transducer_weight=0.5),
        transducer=dataclasses.replace(cfg.transducer, predictor_dim=16, joiner_dim=d),
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg, v)
    missing, unexpected = model.load_state_dict(tiny.model.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("transducer.") for k in missing)
    head = model.transducer
    with torch.no_grad():
        head.joiner.enc_proj.weight.copy_(0.05 * torch.eye(d))
        head.joiner.enc_proj.bias.zero_()
        head.joiner.pred_proj.weight.mul_(0.02)
        head.joiner.pred_proj.bias.zero_()
        head.joiner.out.weight.copy_(tiny.model.ctc.proj.weight / 0.05)
        head.joiner.out.bias.copy_(tiny.model.ctc.proj.bias)
    path = tmp_path_factory.mktemp("hybrid") / "model.pt"
    save_model(path, model.eval(), cfg, tiny.tokenizer)
    return path, model.eval(), cfg, tiny.tokenizer


def _ours(model, cfg, tokenizer, samples: np.ndarray, beam: int = 0, blank_penalty: float = 0.0):
    """Our streaming recogniser, greedy with one symbol a frame (sherpa's greedy), over the
    audio of the windows sherpa decodes (it never decodes the last incomplete one)."""
    out = encoder_over_sherpa_windows(model, compute_fbank(samples, 16000, cfg.features),
                                      CHUNK, LEFT)  # fmt: skip
    lens = torch.tensor([out.size(1)])
    if beam:  # the n-best of sherpa's modified beam search with max_active_paths = beam
        found = transducer_beam_search(model.transducer, out, lens, beam, nbest=beam)[0]
        return [tokenizer.decode(h.tokens) for h in found]
    hyp = transducer_greedy_search(model.transducer, out, lens, 1, blank_penalty)[0]
    beam_one = transducer_beam_search(model.transducer, out, lens, 1,
                                      blank_penalty=blank_penalty)[0][0]  # fmt: skip
    assert hyp.tokens == beam_one.tokens  # one symbol a frame: the beam of one is the same
    return tokenizer.decode(hyp.tokens)


def _sherpa_text(recognizer, samples: np.ndarray) -> str:
    stream = recognizer.create_stream()
    for begin in range(0, len(samples), 1600):  # 100 ms pieces, as a live stream
        stream.accept_waveform(16000, samples[begin : begin + 1600])
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    return recognizer.get_result(stream).strip()


def test_sherpa_onnx_runs_the_exported_transducer(corpus: Path, hybrid_file, tmp_path) -> None:
    path, model, cfg, tokenizer = hybrid_file
    paths = export_onnx(path, tmp_path, CHUNK, LEFT)
    assert {"transducer_encoder", "transducer_decoder", "transducer_joiner"} <= set(paths)
    recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(paths["transducer_tokens"]), encoder=str(paths["transducer_encoder"]),
        decoder=str(paths["transducer_decoder"]), joiner=str(paths["transducer_joiner"]),
        num_threads=1, sample_rate=16000, feature_dim=cfg.features.num_mel_bins,
        decoding_method="greedy_search", normalize_samples=False, low_freq=20.0,
        high_freq=-400.0, snip_edges=False,
    )  # fmt: skip
    texts = []
    # the control: sherpa's default features (samples scaled to [-1, 1]) are not the model's
    control = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(paths["transducer_tokens"]), encoder=str(paths["transducer_encoder"]),
        decoder=str(paths["transducer_decoder"]), joiner=str(paths["transducer_joiner"]),
        num_threads=1, sample_rate=16000, feature_dim=cfg.features.num_mel_bins,
    )  # fmt: skip
    for k, cut in enumerate(list(load_cuts(corpus / "test-clean"))[:3]):
        audio = load_audio(cut.recording.sources[0].source, 16000)
        samples = np.concatenate([audio, np.zeros(int(TAIL_S * 16000), np.float32)])
        theirs = _sherpa_text(recognizer, samples)
        ours = _ours(model, cfg, tokenizer, samples)
        assert len(ours.replace(" ", "")) >= 3, ours
        assert theirs == ours, cut.id
        if k == 0:
            assert _sherpa_text(control, samples) != ours
        texts.append(ours)
    assert len(set(texts)) == len(texts)
    beam = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(paths["transducer_tokens"]), encoder=str(paths["transducer_encoder"]),
        decoder=str(paths["transducer_decoder"]), joiner=str(paths["transducer_joiner"]),
        num_threads=1, sample_rate=16000, feature_dim=cfg.features.num_mel_bins,
        decoding_method="modified_beam_search", max_active_paths=4, normalize_samples=False,
        low_freq=20.0, high_freq=-400.0, snip_edges=False,
    )  # fmt: skip
    for cut in list(load_cuts(corpus / "test-clean"))[:3]:
        audio = load_audio(cut.recording.sources[0].source, 16000)
        samples = np.concatenate([audio, np.zeros(int(TAIL_S * 16000), np.float32)])
        # the same beam; sherpa picks its result by length-normalised score, we by score
        assert _sherpa_text(beam, samples) in _ours(model, cfg, tokenizer, samples, beam=4)


def test_sherpa_onnx_takes_the_same_blank_penalty(corpus: Path, hybrid_file, tmp_path) -> None:
    """sherpa-onnx's ``blank_penalty`` (a recognizer option: the export is the same model)
    gives our `--mode transducer_greedy --max-symbols 1 --blank-penalty` text; the control:
    the penalty changes the text."""
    path, model, cfg, tokenizer = hybrid_file
    paths = export_onnx(path, tmp_path, CHUNK, LEFT)
    recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(paths["transducer_tokens"]), encoder=str(paths["transducer_encoder"]),
        decoder=str(paths["transducer_decoder"]), joiner=str(paths["transducer_joiner"]),
        num_threads=1, sample_rate=16000, feature_dim=cfg.features.num_mel_bins,
        decoding_method="greedy_search", normalize_samples=False, low_freq=20.0,
        high_freq=-400.0, snip_edges=False, blank_penalty=2.0,
    )  # fmt: skip
    changed = 0
    for cut in list(load_cuts(corpus / "test-clean"))[:3]:
        audio = load_audio(cut.recording.sources[0].source, 16000)
        samples = np.concatenate([audio, np.zeros(int(TAIL_S * 16000), np.float32)])
        ours = _ours(model, cfg, tokenizer, samples, blank_penalty=2.0)
        assert _sherpa_text(recognizer, samples) == ours, cut.id
        changed += ours != _ours(model, cfg, tokenizer, samples)
    assert changed


def test_unexportable_chunkings_are_one_line(hybrid_file, tmp_path) -> None:
    """No left chunk for the transducer, or a chunk or cache past the export's bound: one line
    naming the flag, nothing written; the bound's edge still exports its checks."""
    import subprocess
    import sys

    path = hybrid_file[0]
    cases = ((["--left-chunks", "0"], "--left-chunks >= 1, got 0"),
             (["--chunk-size", "100000"], "at most 1500 encoder frames"),
             (["--chunk-size", "16", "--left-chunks", "100000"], "lower --chunk-size"))  # fmt: skip
    for flags, said in cases:
        out = tmp_path / flags[-1]
        got = subprocess.run([sys.executable, "-m", "wenet_lite", "export", "--model", str(path),
                              "--format", "onnx", "--out", str(out), *flags],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert got.returncode != 0 and said in got.stderr, got.stderr[-1500:]
        assert "Traceback" not in got.stderr and len(got.stderr.strip().splitlines()) == 1
        assert not out.exists() or not any(out.iterdir())
    from wenet_lite.export.common import MAX_EXPORT_FRAMES, check_export_chunking

    check_export_chunking(hybrid_file[2], MAX_EXPORT_FRAMES, 1)  # the edge itself passes
