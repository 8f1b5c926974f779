"""The transducer head streams exactly: a stream's tokens equal simulated streaming's (chunk by
chunk with caches) and the chunk-masked forward's, whatever the audio's piece sizes, alone or
batched with other streams, in both searches and on the onnxruntime engine too."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from wenet_lite.data.manifest import load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.transducer import TransducerHead
from wenet_lite.recognizer import EngineSpec, open_streaming
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.search.options import SearchOptions

NO_ENDPOINT = EndpointConfig(enabled=False)


@pytest.fixture(scope="module")
def hybrid(tiny):
    """The rigged tiny model with a transducer head built on its rigged CTC head (tanh kept in
    its linear range, the joiner's output the CTC projection, the predictor's share small and
    random): it emits tokens in speech and blanks in pauses, as a trained head would, and its
    tokens depend on what it emitted before."""
    model = copy.deepcopy(tiny.model)
    torch.manual_seed(0)
    d, v = model.ctc.proj.in_features, model.ctc.proj.out_features
    head = TransducerHead(d, v, 16, d)
    with torch.no_grad():
        head.joiner.enc_proj.weight.copy_(0.05 * torch.eye(d))
        head.joiner.enc_proj.bias.zero_()
        head.joiner.pred_proj.weight.mul_(0.02)
        head.joiner.pred_proj.bias.zero_()
        head.joiner.out.weight.copy_(model.ctc.proj.weight / 0.05)
        head.joiner.out.bias.copy_(model.ctc.proj.bias)
    model.transducer = head.eval()
    return model, tiny.tokenizer, tiny.cfg


def _stream(rec, audio: np.ndarray, seed: int):
    s = rec.create_stream()
    rng = np.random.default_rng(seed)
    i = 0
    while i < len(audio):
        n = int(rng.integers(1, 4800))
        s.accept_waveform(16000, audio[i : i + n])
        i += n
        rec.decode_until_done([s])
    s.input_finished()
    rec.decode_until_done([s])
    return s.result()


def _simulated_and_batched(rec, hybrid, cuts, search, test_audio):
    """Simulated streaming's tokens per utterance (on ``rec``'s engine), and the utterances
    streamed through ``rec`` all in one batch."""
    model, tokenizer, cfg = hybrid
    opts = DecodeOptions(search, Chunking(4, 2), simulate_streaming=True)
    simulated = {
        r.utt_id: r.hyp.tokens
        for r in decode_model(model, tokenizer, cfg, cuts, opts, rec.engine).results
    }
    streams = [rec.create_stream() for _ in cuts]
    for s, audio in zip(streams, test_audio):
        s.accept_waveform(16000, audio)
        s.input_finished()
    rec.decode_until_done(streams)  # batched
    return simulated, streams


@pytest.mark.parametrize("mode", ["transducer_greedy", "transducer_beam"])
def test_streamed_equals_simulated_and_batched(corpus: Path, test_audio, hybrid, mode) -> None:
    model, tokenizer, cfg = hybrid
    cuts = list(load_cuts(corpus / "test-clean"))[:4]
    search = SearchOptions(mode=mode, beam_size=3)
    decoded = {}
    for simulate in (True, False):
        opts = DecodeOptions(search, Chunking(4, 2), simulate_streaming=simulate)
        report = decode_model(model, tokenizer, cfg, cuts, opts)
        decoded[simulate] = {r.utt_id: r.hyp.tokens for r in report.results}
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), search, NO_ENDPOINT)
    alone = []
    for k, (cut, audio) in enumerate(zip(cuts, test_audio)):
        streamed = _stream(rec, audio, seed=k)
        assert len(streamed.token_ids) >= 3, "the head must emit tokens"
        assert streamed.token_ids == decoded[True][cut.id] == decoded[False][cut.id]
        alone.append(streamed)
    streams = [rec.create_stream() for _ in cuts]
    for s, audio in zip(streams, test_audio):
        s.accept_waveform(16000, audio)
        s.input_finished()
    rec.decode_until_done(streams)  # every stream in each batch, of different lengths
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids
        assert s.result().timestamps == one.timestamps
    ctc = open_streaming((model, tokenizer, cfg), Chunking(4, 2), SearchOptions(), NO_ENDPOINT)
    assert _stream(ctc, test_audio[0], 0).token_ids != alone[0].token_ids  # the control


@pytest.mark.parametrize("mode", ["transducer_greedy", "transducer_beam"])
@pytest.mark.parametrize("slots", [False, True], ids=["own states", "slots"])
def test_streams_joining_and_leaving_keep_their_tokens(test_audio, hybrid, mode, slots) -> None:
    """Streams join every other step and leave when done, sharing each step's batch (the
    joiner's too) with whoever is there: each gets the tokens and times it gets alone."""
    search = SearchOptions(mode=mode, beam_size=3)
    rec = open_streaming(hybrid, Chunking(4, 2), search, NO_ENDPOINT, slots=slots)
    audios = [test_audio[k % len(test_audio)] for k in range(7)]
    alone = [_stream(rec, a, seed=k) for k, a in enumerate(audios)]
    streams, fed = [], []
    step = 0
    while len(streams) < len(audios) or not all(s.done for s in streams):
        if step % 2 == 0 and len(streams) < len(audios):
            streams.append(rec.create_stream())
            fed.append(0)
        for k, s in enumerate(streams):
            if fed[k] < len(audios[k]):
                piece = audios[k][fed[k] : fed[k] + 3200 + 800 * k]
                s.accept_waveform(16000, piece)
                fed[k] += piece.size
                if fed[k] >= len(audios[k]):
                    s.input_finished()
        rec.decode_streams([s for s in streams if not s.done])
        step += 1
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids and one.token_ids
        assert s.result().timestamps == one.timestamps


_ON_GPU = [EngineSpec(device="cuda")] if torch.cuda.is_available() else []


@pytest.mark.parametrize("spec", [EngineSpec("onnxruntime"), EngineSpec(precision="int8"),
                                  EngineSpec(precision="bf16"), EngineSpec("executorch"),
                                  *_ON_GPU],
                         ids=["onnxruntime", "torch int8", "torch bf16", "executorch",
                              "torch cuda"][: 4 + len(_ON_GPU)])  # fmt: skip
def test_every_engine_streams_the_transducer_as_it_simulates(
    corpus: Path, test_audio, hybrid, spec
) -> None:
    """On each engine a stream's transducer tokens equal that engine's simulated streaming
    (``decode --simulate-streaming --engine``), alone and batched."""
    if spec.kind == "onnxruntime":
        pytest.importorskip("onnxruntime")
    if spec.kind == "executorch":
        pytest.importorskip("executorch")
    model, tokenizer, cfg = hybrid
    cuts = list(load_cuts(corpus / "test-clean"))[:3]
    search = SearchOptions(mode="transducer_greedy")
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), search, NO_ENDPOINT, spec)
    simulated, streams = _simulated_and_batched(rec, hybrid, cuts, search, test_audio)
    for k, (cut, s) in enumerate(zip(cuts, streams)):
        alone = _stream(rec, test_audio[k], k).token_ids
        assert alone and alone == s.result().token_ids == simulated[cut.id]


def test_a_model_without_the_head_refuses_to_stream_them(tiny) -> None:
    with pytest.raises(ValueError, match='no transducer head.*mode="transducer_beam"'):
        open_streaming((tiny.model, tiny.tokenizer, tiny.cfg), Chunking(4, 2),
                       SearchOptions(mode="transducer_beam"))  # fmt: skip


def test_the_search_state_carried_across_chunks_is_what_makes_it_exact(
    test_audio, hybrid, monkeypatch
) -> None:
    """The control: a stream whose search starts afresh at each chunk no longer gives the
    exact tokens (the test above can tell a state that is not carried)."""
    from wenet_lite.search.stream_search import Transducer

    model, tokenizer, cfg = hybrid
    search = SearchOptions(mode="transducer_greedy")
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), search, NO_ENDPOINT)
    exact = _stream(rec, test_audio[1], 1).token_ids
    step = Transducer.step

    def forgetful(self, chunk, states):  # every chunk from a new state
        return step(self, chunk, [self.new_state() for _ in states])

    monkeypatch.setattr(Transducer, "step", forgetful)
    assert _stream(rec, test_audio[1], 1).token_ids != exact


def test_hotwords_in_the_transducer_beam_stream_as_they_simulate(
    corpus: Path, test_audio, hybrid, tmp_path
) -> None:
    """`transducer_beam` with a hotwords file: a stream's tokens equal simulated streaming's
    with the same file, and the file changes them (the control)."""
    model, tokenizer, cfg = hybrid
    cuts = list(load_cuts(corpus / "test-clean"))[:2]
    plain = SearchOptions(mode="transducer_beam", beam_size=3)
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), plain, NO_ENDPOINT)
    before = [_stream(rec, test_audio[k], k).text for k in range(2)]
    words = sorted({w for t in before for w in t.split()}, key=len)
    (tmp_path / "hot.txt").write_text("\n".join(w.lower() for w in words[-2:]) + "\n")
    hot = SearchOptions(mode="transducer_beam", beam_size=3, hotwords=str(tmp_path / "hot.txt"),
                        hotwords_score=4.0)  # fmt: skip
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), hot, NO_ENDPOINT)
    opts = DecodeOptions(hot, Chunking(4, 2), simulate_streaming=True)
    simulated = {r.utt_id: r.hyp.tokens for r in decode_model(model, tokenizer, cfg, cuts,
                                                              opts).results}  # fmt: skip
    after = []
    for k, cut in enumerate(cuts):
        streamed = _stream(rec, test_audio[k], k)
        assert streamed.token_ids == simulated[cut.id]
        after.append(streamed.text)
    assert after != before


@pytest.mark.parametrize("mode", ["transducer_greedy", "transducer_beam"])
@pytest.mark.parametrize("spec", [EngineSpec(), EngineSpec("onnxruntime")],
                         ids=["torch", "onnxruntime"])  # fmt: skip
def test_a_blank_penalty_streams_as_it_simulates(corpus: Path, test_audio, hybrid, mode, spec):
    """``blank_penalty`` in both transducer searches: a stream's tokens equal simulated
    streaming's with it, alone and batched, on each engine; the control: it changes them (an
    undertrained head's deletions come back as tokens)."""
    if spec.kind == "onnxruntime":
        pytest.importorskip("onnxruntime")
    model, tokenizer, cfg = hybrid
    cuts = list(load_cuts(corpus / "test-clean"))[:3]
    penalized = SearchOptions(mode=mode, beam_size=3, blank_penalty=2.0)
    rec = open_streaming((model, tokenizer, cfg), Chunking(4, 2), penalized, NO_ENDPOINT, spec)
    simulated, streams = _simulated_and_batched(rec, hybrid, cuts, penalized, test_audio)
    plain = open_streaming((model, tokenizer, cfg), Chunking(4, 2),
                           SearchOptions(mode=mode, beam_size=3), NO_ENDPOINT, spec)  # fmt: skip
    changed = 0
    for k, (cut, s) in enumerate(zip(cuts, streams)):
        alone = _stream(rec, test_audio[k], k).token_ids
        assert alone and alone == s.result().token_ids == simulated[cut.id]
        changed += _stream(plain, test_audio[k], k).token_ids != alone
    assert changed  # the control: the penalty is applied
