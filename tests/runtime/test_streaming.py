"""StreamingRecognizer: online features, exactness against offline decoding, batching of many
streams, endpointing and bounded memory on long audio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch

from wenet_lite.data.manifest import load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank, num_frames
from wenet_lite.features.stream_fbank import offline_fbank
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.result import Result
from wenet_lite.runtime.streaming import Stream, StreamingRecognizer
from wenet_lite.search.ctc_search import ctc_greedy_search
from wenet_lite.search.options import SearchOptions

NO_ENDPOINT = EndpointConfig(enabled=False)


def _recognizer(
    tiny, chunk: int = 4, left: int = -1, endpoint: EndpointConfig = NO_ENDPOINT, **search
) -> StreamingRecognizer:
    return open_recognizer(
        (tiny.model, tiny.tokenizer, tiny.cfg), Chunking(chunk, left), SearchOptions(**search),
        endpoint=endpoint,
    )  # fmt: skip


def _feed(stream: Stream, audio: np.ndarray, rng: np.random.Generator, rate: int = 16000):
    """Yield after each random-sized piece (1 sample .. 0.3 s) is accepted."""
    i = 0
    while i < len(audio):
        n = int(rng.integers(1, int(0.3 * rate)))
        stream.accept_waveform(rate, audio[i : i + n])
        i += n
        yield


def _stream(rec: StreamingRecognizer, audio: np.ndarray, seed: int = 0) -> Result:
    s = rec.create_stream()
    for _ in _feed(s, audio, np.random.default_rng(seed)):
        rec.decode_until_done([s])
    s.input_finished()
    rec.decode_until_done([s])
    assert s.done
    return s.result()


def test_online_features_equal_offline(corpus: Path, test_audio, tiny, tmp_path: Path) -> None:
    rec = _recognizer(tiny)
    path = load_cuts(corpus / "test-clean")[0].recording.sources[0].source
    samples = load_audio(path, 16000)
    offline = offline_fbank(samples, tiny.cfg.features)
    s = rec.create_stream()
    for _ in _feed(s, sf.read(path, dtype="float32")[0], np.random.default_rng(1)):
        pass
    s.input_finished()
    streamed = s.fbank.get_frames(0, s.fbank.num_frames_ready)
    assert torch.equal(streamed, offline)  # the stream's features, however the audio was cut
    knf = compute_fbank(samples, 16000, tiny.cfg.features)  # training's and decode's
    assert knf.shape == streamed.shape
    assert float((streamed - knf).abs().max()) < 5e-3  # float32 rounding (test_torch_fbank)

    # 22.05 kHz stereo: soxr's streaming resampler gives the samples of one-shot resampling
    # (bit-exact with soxr 1.x); the tolerance only allows for a different resampler build.
    stereo = np.stack([test_audio[0], 0.5 * test_audio[0]], 1)
    sf.write(tmp_path / "a.flac", soxr.resample(stereo, 16000, 22050), 22050)
    offline = offline_fbank(load_audio(tmp_path / "a.flac", 16000), tiny.cfg.features)
    s = rec.create_stream()
    data = sf.read(tmp_path / "a.flac", dtype="float32")[0].mean(axis=1, dtype=np.float32)
    for _ in _feed(s, data, np.random.default_rng(2), rate=22050):
        pass
    s.input_finished()
    assert s.fbank.num_frames_ready == offline.size(0)
    assert (s.fbank.get_frames(0, offline.size(0)) - offline).abs().max() < 1e-3


@pytest.mark.parametrize("search", ["greedy", "prefix_beam"])
@pytest.mark.parametrize("chunk,left", [(4, -1), (4, 1), (8, -1), (8, 0)])
def test_stream_equals_simulated_streaming_and_chunk_masked_decode(
    corpus: Path, test_audio, tiny, search: str, chunk: int, left: int
) -> None:
    cuts = list(load_cuts(corpus / "test-clean"))
    search_opts = SearchOptions(mode=search, beam_size=4)
    decoded = {}
    for simulate in (True, False):
        opts = DecodeOptions(search_opts, Chunking(chunk, left), simulate_streaming=simulate)
        report = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts)
        decoded[simulate] = {r.utt_id: r for r in report.results}
    rec = _recognizer(tiny, chunk, left, mode=search, beam_size=4)
    for i, (cut, audio) in enumerate(zip(cuts, test_audio)):
        streamed = _stream(rec, audio, seed=i)
        simulated, masked = decoded[True][cut.id], decoded[False][cut.id]
        assert len(streamed.token_ids) >= 3, "the rigged model must emit tokens"
        assert streamed.token_ids == simulated.hyp.tokens == masked.hyp.tokens
        assert streamed.text == simulated.text
        assert streamed.timestamps == simulated.token_times
        frames = tiny.model.encoder.subsampling.output_lengths(
            torch.tensor(num_frames(len(audio), tiny.cfg.features))
        )
        assert streamed.end == pytest.approx(int(frames) * 0.04)  # the last partial chunk too


def test_last_partial_chunk_is_decoded(test_audio, tiny) -> None:
    """Audio cut mid-speech: tokens in the final, partial chunk must come out as offline."""
    chunk = 8
    rec = _recognizer(tiny, chunk, -1)
    seen_tail_tokens = partial_chunks = 0
    for k, cut_at in enumerate(np.linspace(0.3, 0.9, 8)):
        audio = test_audio[4][: int(cut_at * len(test_audio[4]))]
        feats = offline_fbank(audio, tiny.cfg.features)
        with torch.no_grad():
            log_probs, lens = tiny.model.ctc_log_probs(
                feats[None], torch.tensor([len(feats)]), chunk
            )
        hyp = ctc_greedy_search(log_probs, lens)[0]
        assert _stream(rec, audio, seed=k).token_ids == hyp.tokens
        last_chunk_start = (int(lens) - 1) // chunk * chunk
        seen_tail_tokens += sum(t >= last_chunk_start for t in hyp.timestamps)
        partial_chunks += int(lens) % chunk != 0
    assert seen_tail_tokens >= 3 and partial_chunks >= 4


@pytest.mark.parametrize("left", [-1, 2])
def test_batched_streams_equal_streams_alone(test_audio, tiny, left: int) -> None:
    rec = _recognizer(tiny, 4, left)
    audios = test_audio[:5]
    alone = [_stream(rec, a, seed=10 + k) for k, a in enumerate(audios)]
    streams = [rec.create_stream() for _ in audios]
    # Stream k starts k steps late and gets its own random piece sizes, so batches mix streams
    # of different lengths, cache sizes and positions.
    feeders = [
        _feed(s, a, np.random.default_rng(10 + k)) for k, (s, a) in enumerate(zip(streams, audios))
    ]
    batch_sizes, cache_sizes = [], set()
    step = 0
    while not all(s.done for s in streams):
        for k, (s, feeder) in enumerate(zip(streams, feeders)):
            if step >= k and not s.fbank.finished and next(feeder, "end") == "end":
                s.input_finished()
        ready = [s for s in streams if s.is_ready]
        cache_sizes.add(tuple(s.state.att_cache.size(3) for s in ready))
        batch_sizes.append(len(rec.decode_streams(streams)))
        step += 1
    assert max(batch_sizes) > 1
    if left < 0:
        assert any(len(set(sizes)) > 1 for sizes in cache_sizes), "never batched unequal caches"
    for s, one in zip(streams, alone):
        batched = s.result()
        assert batched.token_ids and batched.token_ids == one.token_ids
        assert batched.words == one.words and batched.timestamps == one.timestamps
        assert batched.confidence == pytest.approx(one.confidence, abs=1e-5)


def test_endpoint_splits_at_silence_and_restarts_exactly(test_audio, tiny) -> None:
    a, b = test_audio[0], test_audio[1]
    gap = np.random.default_rng(0).normal(0, 10 ** (-70 / 20), 3 * 16000).astype(np.float32)
    audio = np.concatenate([a, gap, b])
    rec = _recognizer(tiny, 4, -1, endpoint=EndpointConfig())
    result = _stream(rec, audio)
    s = rec.create_stream()
    s.accept_waveform(16000, audio)
    s.input_finished()
    rec.decode_until_done([s])
    first, second = s.final_results
    assert first.token_ids and second.token_ids
    assert first.end <= len(a) / 16000 + 1.2 + 0.16 + 1e-6  # rule 2 after 1.2 s of silence
    assert second.start >= first.end
    assert second.timestamps[0] >= (len(a) + len(gap)) / 16000 - 0.2  # its speech is b
    assert result.token_ids == first.token_ids + second.token_ids
    # Each segment is decoded as if the audio started at its first chunk.
    feats = offline_fbank(audio, tiny.cfg.features)
    for seg in (first, second):
        start = round(seg.start / 0.01)
        with torch.no_grad():
            out = tiny.model.encoder.forward_chunk_by_chunk(feats[None, start:], 4, -1)
            log_probs = tiny.model.ctc(out)[:, : round((seg.end - seg.start) / 0.04)]
        hyp = ctc_greedy_search(log_probs, torch.tensor([log_probs.size(1)]))[0]
        assert hyp.tokens == seg.token_ids


def test_rule3_caps_segment_length(test_audio, tiny) -> None:
    endpoint = EndpointConfig(rule1_min_silence=99, rule2_min_silence=99, rule3_max_length=1.0)
    rec = _recognizer(tiny, 4, -1, endpoint=endpoint)
    s = rec.create_stream()
    s.accept_waveform(16000, test_audio[2])
    s.input_finished()
    rec.decode_until_done([s])
    segments = s.final_results
    assert len(segments) >= 3
    assert all(r.end - r.start <= 1.0 + 0.16 + 1e-6 for r in segments)
    assert all(r.start >= prev.end for prev, r in zip(segments, segments[1:]))


@pytest.mark.parametrize(
    "left,endpoint", [(2, NO_ENDPOINT), (-1, EndpointConfig(rule3_max_length=3.0))]
)
def test_long_audio_keeps_state_and_buffers_bounded(
    test_audio, tiny, left: int, endpoint: EndpointConfig
) -> None:
    """Two minutes of speech: the caches stop growing and consumed fbank frames are freed."""
    chunk = 8
    rec = _recognizer(tiny, chunk, left, endpoint=endpoint)
    audio = np.concatenate(test_audio * 4)[: 120 * 16000]
    s = rec.create_stream()
    piece = 16000 // 4
    max_cache = max_buffer = chunks = 0
    for i in range(0, len(audio), piece):
        s.accept_waveform(16000, audio[i : i + piece])
        while rec.decode_streams([s]):
            chunks += 1
            max_cache = max(max_cache, s.state.att_cache.size(3))
            max_buffer = max(max_buffer, s.buffered_frames)
    s.input_finished()
    rec.decode_until_done([s])
    assert chunks > 350
    limit = chunk * left if left >= 0 else round(3.0 / 0.04) + chunk
    assert max_cache <= limit
    assert max_buffer <= rec.window_size + piece // 160
    assert s.done and len(s.result().words) > 10


def test_full_context_model_cannot_stream(full_context_model: Path) -> None:
    with pytest.raises(ValueError, match="causal_conv") as info:
        open_recognizer(full_context_model, Chunking(4, -1))
    assert str(full_context_model) in str(info.value)


def test_words_follow_tokens(test_audio, tiny) -> None:
    result = _stream(_recognizer(tiny), test_audio[3])
    assert result.words and " ".join(w.text for w in result.words) == result.text
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and all(w.end > w.start for w in result.words)
    assert set(starts) <= set(result.timestamps) and 0 < result.confidence <= 1
    assert result.is_final and result.end >= result.words[-1].end - 1e-6


@pytest.mark.parametrize("samples", [0, 3, 1000])
def test_short_or_empty_streams_finish_empty(tiny, samples: int) -> None:
    rec = _recognizer(tiny)
    s = rec.create_stream()
    s.accept_waveform(16000, np.zeros(samples, np.float32))
    s.input_finished()
    rec.decode_until_done([s])
    assert s.done and not s.is_ready and s.result().text == ""


def test_bad_stream_input(tiny) -> None:
    rec = _recognizer(tiny)
    s = rec.create_stream()
    with pytest.raises(ValueError, match="NaN"):
        s.accept_waveform(16000, np.array([0.0, np.nan], np.float32))
    s.accept_waveform(8000, np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="cannot change"):
        s.accept_waveform(16000, np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="mono"):
        s.accept_waveform(8000, np.zeros((100, 2), np.float32))
    s.input_finished()
    with pytest.raises(RuntimeError, match="after input_finished"):
        s.accept_waveform(8000, np.zeros(100, np.float32))
    other = rec.create_stream()
    other.accept_waveform(16000, np.zeros(16000, np.float32))
    with pytest.raises(ValueError, match="same stream twice"):
        rec.decode_streams([other, other])


@pytest.mark.parametrize(
    "token_min_logp, oov_penalty, blank_penalty", [(None, 0.0, 0.0), (-5.0, 3.0, 0.5)]
)
def test_stream_with_word_lm_equals_simulated_streaming_with_it(
    corpus: Path, test_audio, tiny, tmp_path: Path, capsys, token_min_logp, oov_penalty,
    blank_penalty,
) -> None:  # fmt: skip
    from wenet_lite.cli import main
    from wenet_lite.data.manifest import cut_text
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.search.lm import WordLM

    cuts = list(load_cuts(corpus / "test-clean"))
    lm = WordLM.train(normalize_text(cut_text(c)) for c in load_cuts(corpus / "train-clean-100"))
    if blank_penalty:  # the second case reads the same LM as an ARPA file
        lm_path = lm.save_arpa(tmp_path / "lm.arpa")
    else:
        lm_path = tmp_path / "lm.json"
        lm.save(lm_path)
    fused = dict(
        lm=str(lm_path), lm_weight=2.0, word_bonus=3.0, oov_penalty=oov_penalty,
        token_min_logp=token_min_logp, blank_penalty=blank_penalty,
    )  # fmt: skip
    search = SearchOptions(mode="prefix_beam", beam_size=4, **fused)
    opts = DecodeOptions(search, Chunking(4, -1), simulate_streaming=True)
    simulated = {
        r.utt_id: r for r in decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts).results
    }
    rec = _recognizer(tiny, 4, -1, mode="prefix_beam", beam_size=4, **fused)
    plain = _recognizer(tiny, 4, -1, mode="prefix_beam", beam_size=4)
    changed = 0
    for i, (cut, audio) in enumerate(zip(cuts, test_audio)):
        streamed = _stream(rec, audio, seed=i)
        assert streamed.token_ids == simulated[cut.id].hyp.tokens
        changed += streamed.token_ids != _stream(plain, audio, seed=i).token_ids
    assert changed > 0, "weight 2 should change some transcripts of the rigged model"

    with pytest.raises(ValueError, match="prefix_beam"):
        _recognizer(tiny, 4, -1, lm=str(lm_path))
    wav = tmp_path / "a.wav"
    sf.write(wav, test_audio[0], 16000)
    args = ["stream", "--model", str(tiny.path), "--chunk-size", "4", str(wav)]
    prune = [] if token_min_logp is None else ["--token-min-logp", str(token_min_logp)]
    prune += ["--oov-penalty", str(oov_penalty), "--blank-penalty", str(blank_penalty)]
    assert main([*args, "--mode", "prefix_beam", "--lm", str(lm_path), *prune]) == 0
    assert capsys.readouterr().out.strip()
    assert main([*args, "--lm", str(lm_path)]) == 2  # greedy cannot use it


@pytest.mark.parametrize("search", ["greedy", "prefix_beam"])
def test_partial_lines_say_only_what_changed_and_add_up(test_audio, tiny, search: str) -> None:
    """`stream --json` partials carry the words kept from the previous partial and the words
    after them; put together they are the open segment's full partial text, at every step."""
    import io
    import json

    from wenet_lite.cli.stream_files import _Active, _Printer, _show

    rec = _recognizer(tiny, 4, -1, mode=search, beam_size=4)
    audio = np.concatenate(test_audio[:4])
    out = io.StringIO()
    printer = _Printer(True, out, io.StringIO())
    stream = rec.create_stream()
    active = _Active("x", iter(()), stream)
    words: list = []
    checked = 0
    for start in range(0, len(audio), 2560):
        stream.accept_waveform(16000, audio[start : start + 2560])
        while rec.decode_streams([stream]):
            _show(active, printer)
            for line in out.getvalue().splitlines():
                obj = json.loads(line)
                words = words[: obj["words_kept"]] + obj["text"].split()
            out.seek(0)
            out.truncate()
            assert words == stream.partial_result().text.split()
            checked += 1
    assert checked > 20 and len(words) > 10
