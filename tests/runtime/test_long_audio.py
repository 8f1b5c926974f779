"""Long utterances in bounded memory: chunked modes are exact, full-context windows tile."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wenet_lite.data.manifest import load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.long_audio import full_context_windows, long_log_probs

CASES = [(1, 10, 4), (10, 10, 4), (11, 10, 4), (100, 10, 4), (97, 13, 5), (50, 7, 0)]


@pytest.mark.parametrize("total, window, overlap", CASES)
def test_windows_tile_the_utterance_and_keep_context(total, window, overlap) -> None:
    kept = []
    for start, keep_from, keep_to in full_context_windows(total, window, overlap):
        assert 0 <= keep_from < keep_to <= min(window, total - start)
        kept += range(start + keep_from, start + keep_to)
        if start > 0:  # every kept frame has overlap//2 frames of context before it
            assert keep_from >= overlap // 2
        if start + window < total:
            assert window - keep_to >= overlap - overlap // 2
    assert kept == list(range(total))


def test_long_full_context_is_the_windows_middles(tiny, corpus: Path) -> None:
    feats = torch.cat([_feats(c, tiny) for c in load_cuts(corpus / "test-clean")][:3])
    window, overlap = 40, 10
    got = long_log_probs(tiny.model, feats, 0, -1, window, overlap)
    sub = tiny.model.encoder.subsampling
    for start, keep_from, keep_to in full_context_windows(got.size(0), window, overlap):
        frames = feats[start * sub.rate : start * sub.rate + sub.window_size(window)][None]
        with torch.no_grad():
            want, _ = tiny.model.ctc_log_probs(frames, torch.tensor([frames.size(1)]))
        assert torch.allclose(got[start + keep_from : start + keep_to],
                              want[0, keep_from:keep_to], atol=1e-5)  # fmt: skip
    whole = long_log_probs(tiny.model, feats, 0, -1, 10_000, 0)  # one window: full context
    with torch.no_grad():
        full, _ = tiny.model.ctc_log_probs(feats[None], torch.tensor([feats.size(0)]))
    assert torch.allclose(whole, full[0], atol=1e-5)


@pytest.mark.parametrize("simulate, left", [(False, -1), (True, -1), (False, 2)])
def test_long_chunked_decode_equals_the_usual_one(
    tiny, corpus: Path, simulate: bool, left: int, caplog
) -> None:
    """Chunk-masked and simulated streaming are exact: cached chunk by chunk is the same
    computation, so a 1-second window changes no transcript. With all history each long
    utterance warns that its cost grows with the square of its length."""
    cuts = list(load_cuts(corpus / "test-clean"))
    common = dict(chunking=Chunking(4, left), simulate_streaming=simulate)
    usual = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, DecodeOptions(**common))
    small = DecodeOptions(**common, max_window_seconds=1.0, window_overlap_seconds=0.5)
    caplog.clear()
    windowed = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, small)
    assert all(c.duration > 1.0 for c in cuts)
    assert [r.hyp.tokens for r in windowed.results] == [r.hyp.tokens for r in usual.results]
    assert sum(len(r.hyp.tokens) for r in usual.results) > 20
    warned = [r.getMessage() for r in caplog.records if "--left-chunks 4" in r.getMessage()]
    assert len(warned) == (len(cuts) if left < 0 else 0), warned
    if warned:  # each names its utterance
        assert {w.split(": ")[0] for w in warned} == {c.id for c in cuts}


@pytest.mark.parametrize("left", [-1, 2])
def test_a_stream_with_all_history_warns_once_when_it_grows_long(
    tiny, test_audio, monkeypatch, caplog, left: int
) -> None:
    import numpy as np

    import wenet_lite.runtime.streaming as streaming
    from wenet_lite.runtime.endpoint import EndpointConfig

    monkeypatch.setattr(streaming, "HISTORY_WARNING_SECONDS", 1.0)
    rec = open_recognizer(
        (tiny.model, tiny.tokenizer, tiny.cfg), Chunking(4, left),
        endpoint=EndpointConfig(enabled=False),
    )  # fmt: skip
    audio = np.concatenate(test_audio[:3])
    assert audio.size > 3 * 16000
    stream = rec.create_stream()
    caplog.clear()
    stream.accept_waveform(16000, audio)
    stream.input_finished()
    rec.decode_until_done([stream])
    warned = [r.getMessage() for r in caplog.records if "attention cache" in r.getMessage()]
    assert len(warned) == (1 if left < 0 else 0), warned


def _feats(cut, tiny) -> torch.Tensor:
    from wenet_lite.data.manifest import cut_samples

    return compute_fbank(cut_samples(cut, 16000), 16000, tiny.cfg.features)
