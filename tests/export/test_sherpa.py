"""sherpa-onnx decodes the ONNX export of generated speech to the text of our streaming path."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

import numpy as np
import pytest
import torch

from tests.export.sherpa_loop import encoder_over_sherpa_windows
from wenet_lite.export.onnx import export_onnx
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.search.ctc_search import ctc_greedy_search

sherpa_onnx = pytest.importorskip("sherpa_onnx")

if TYPE_CHECKING:  # tests are not a package: fixtures come from conftest, types only here
    from tests.export.conftest import ModelFile

CHUNK, LEFT = 4, 2
TAIL_S = 0.3  # silence after the speech: sherpa-onnx never decodes an incomplete last window


def _sherpa_text(recognizer: sherpa_onnx.OnlineRecognizer, samples: np.ndarray, rate: int) -> str:
    stream = recognizer.create_stream()
    for begin in range(0, len(samples), 1600):  # 100 ms pieces, as a live stream
        stream.accept_waveform(rate, samples[begin : begin + 1600])
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    return recognizer.get_result(stream)


def _our_text(model_file: ModelFile, samples: np.ndarray, rate: int) -> str:
    """wenet_lite's streaming path over the windows sherpa-onnx decodes."""
    model, cfg = model_file.model, model_file.cfg
    feats = compute_fbank(samples, rate, cfg.features)  # (T, F)
    out = encoder_over_sherpa_windows(model, feats, CHUNK, LEFT)
    with torch.no_grad():
        log_probs = model.ctc(out)
    hyp = ctc_greedy_search(log_probs, torch.tensor([log_probs.size(1)]))[0]
    return model_file.tokenizer.decode(hyp.tokens)


def test_sherpa_onnx_decodes_like_our_streaming_path(
    speech_model_file: ModelFile, speech_files: List[Path], tmp_path: Path
) -> None:
    paths = export_onnx(speech_model_file.path, tmp_path, CHUNK, LEFT, quantize="int8")
    rate = speech_model_file.cfg.features.sample_rate
    recognizer = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
        tokens=str(paths["tokens"]),
        model=str(paths["model"]),
        chunk_size=CHUNK,
        num_left_chunks=LEFT,
        num_threads=1,
        sample_rate=rate,
    )
    texts = []
    for path in speech_files[:3]:
        samples = np.concatenate([load_audio(path, rate), np.zeros(int(TAIL_S * rate), np.float32)])
        ours = _our_text(speech_model_file, samples, rate)
        theirs = _sherpa_text(recognizer, samples, rate)
        assert len(set(ours.replace(" ", ""))) >= 5, ours  # varied text, not one repeated token
        # sherpa-onnx's text starts with the space of a leading word piece; sentencepiece drops it
        assert theirs.strip() == ours, path.name
        texts.append(ours)
    assert len(set(texts)) == len(texts)  # the text depends on the audio
    int8 = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
        tokens=str(paths["tokens"]), model=str(paths["model_int8"]), chunk_size=CHUNK,
        num_left_chunks=LEFT, num_threads=1, sample_rate=rate,
    )  # fmt: skip
    assert _sherpa_text(int8, samples, rate).strip()  # loads and decodes
