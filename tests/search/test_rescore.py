"""Attention rescoring: a hand-made flip, streamed == simulated streaming (alone, batched, with
endpoints), the LM and hotwords kept in the score, and the errors of misuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tests.runtime.test_streaming import _feed, _stream
from wenet_lite.data.manifest import load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.features.audio import load_audio
from wenet_lite.features.stream_fbank import offline_fbank
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.decoder import AttentionDecoder
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.search.ctc_search import Hypothesis, ctc_prefix_beam_search
from wenet_lite.search.options import SearchOptions
from wenet_lite.search.rescore import Segment, rescore

RESCORE = dict(mode="attention_rescoring", beam_size=4)


NO_ENDPOINT = EndpointConfig(enabled=False)


def _recognizer(model, chunk=4, left=-1, endpoint=NO_ENDPOINT, **search):
    return open_recognizer(
        (model.model, model.tokenizer, model.cfg), Chunking(chunk, left),
        SearchOptions(**{**RESCORE, **search}), endpoint=endpoint,
    )  # fmt: skip


def test_rescoring_picks_the_second_ctc_hypothesis() -> None:
    """CTC prefers token 3 to token 4 by a little; the decoder prefers 4 by a lot."""
    probs = torch.full((3, 6), 1e-3)
    probs[:, 0] = 0.9  # blank, blank, blank -- with a token in the middle frame
    probs[1] = torch.tensor([0.05, 1e-3, 1e-3, 0.5, 0.45, 1e-3])
    log_probs = (probs / probs.sum(1, keepdim=True)).log()
    nbest = ctc_prefix_beam_search(log_probs, beam_size=4, nbest=4)
    assert nbest[0].tokens == [3] and nbest[1].tokens == [4]
    torch.manual_seed(0)
    decoder = AttentionDecoder(6, 8, 2, 16, 1, 1, 0.0, 0.0).eval()
    with torch.no_grad():
        for net in (decoder.l2r, *decoder.r2l):
            net.out.bias.zero_()
            net.out.weight.zero_()
            net.out.bias[4] = 8.0
            net.out.bias[decoder.sos_eos] = 8.0  # p(4) and p(eos) near 1/2; p(3) near e^-8/2
    memory = torch.randn(3, 8)
    found = rescore(decoder, [Segment(nbest, memory)], ctc_weight=0.5, reverse_weight=0.3)[0]
    assert found[0].tokens == [4]
    assert found[0].timestamps == nbest[1].timestamps
    assert found[0].confidence == nbest[1].confidence
    # The score is the decoder's plus ctc_weight times the search's.
    att = decoder.score(
        memory[None], torch.tensor([3]), torch.tensor([[4]]), torch.tensor([1]), 0.3
    )
    assert found[0].score == pytest.approx(float(att.detach()) + 0.5 * nbest[1].score, abs=1e-5)
    # With the decoder's weight small, CTC's order comes back.
    assert rescore(decoder, [Segment(nbest, memory)], 100.0, 0.3)[0][0].tokens == [3]


def test_empty_nbest_and_silence_give_empty_results(tiny_u2) -> None:
    torch.manual_seed(0)
    decoder = tiny_u2.model.decoder
    silent = ctc_prefix_beam_search(torch.zeros(5, 40).log_softmax(-1) * 0, 4, 4)  # uniform
    assert rescore(decoder, [], 0.5, 0.3) == []
    assert rescore(decoder, [Segment([], torch.zeros(0, 32))], 0.5, 0.3) == [[]]
    blank = torch.full((6, 40), -30.0)
    blank[:, 0] = 0.0
    only_empty = ctc_prefix_beam_search(blank, 4, 4)
    found = rescore(decoder, [Segment(only_empty, torch.randn(6, 32))], 0.5, 0.3)[0]
    assert [h.tokens for h in found] == [[]]  # the best is silence: no other candidate
    assert silent[0].num_tokens  # a uniform posteriorgram: the empty hypothesis is no candidate
    found = rescore(decoder, [Segment(silent, torch.randn(5, 32))], 0.5, 0.3)[0]
    assert all(h.num_tokens for h in found)
    rec = _recognizer(tiny_u2)
    s = rec.create_stream()
    s.accept_waveform(16000, np.zeros(16000, np.float32))
    s.input_finished()
    rec.decode_until_done([s])
    assert s.done and s.result().text == "" and s.final_results == []


@pytest.mark.parametrize("chunk,left", [(4, -1), (8, 1)])
def test_streamed_rescoring_equals_simulated_streaming(
    corpus: Path, test_audio, tiny_u2, chunk: int, left: int
) -> None:
    cuts = list(load_cuts(corpus / "test-clean"))
    opts = DecodeOptions(SearchOptions(**RESCORE), Chunking(chunk, left), simulate_streaming=True)
    report = decode_model(tiny_u2.model, tiny_u2.tokenizer, tiny_u2.cfg, cuts, opts)
    decoded = {r.utt_id: r for r in report.results}
    ctc_opts = DecodeOptions(
        SearchOptions(mode="prefix_beam", beam_size=4), Chunking(chunk, left), True
    )
    ctc = {
        r.utt_id: r
        for r in decode_model(tiny_u2.model, tiny_u2.tokenizer, tiny_u2.cfg, cuts, ctc_opts).results
    }
    rec = _recognizer(tiny_u2, chunk, left)
    changed = 0
    for i, (cut, audio) in enumerate(zip(cuts, test_audio)):
        streamed = _stream(rec, audio, seed=i)
        assert streamed.token_ids == decoded[cut.id].hyp.tokens
        assert streamed.timestamps == decoded[cut.id].token_times
        changed += decoded[cut.id].hyp.tokens != ctc[cut.id].hyp.tokens
    assert changed >= 2, "the random decoder should overturn some CTC choices"


def test_batched_rescoring_equals_alone(test_audio, tiny_u2, monkeypatch) -> None:
    rec = _recognizer(tiny_u2, 4, 2, endpoint=EndpointConfig(rule3_max_length=0.8))
    audios = test_audio[:5]
    alone = []
    for k, a in enumerate(audios):
        s = rec.create_stream()
        for _ in _feed(s, a, np.random.default_rng(k)):
            rec.decode_until_done([s])
        s.input_finished()
        rec.decode_until_done([s])
        alone.append(s.final_results)
    streams = [rec.create_stream() for _ in audios]
    feeders = [
        _feed(s, a, np.random.default_rng(k)) for k, (s, a) in enumerate(zip(streams, audios))
    ]
    calls = []
    import wenet_lite.runtime.streaming as streaming

    original = streaming.rescore

    def counted(decoder, segments, *args):
        calls.append(len(segments))  # segments rescored in one decoder call
        return original(decoder, segments, *args)

    monkeypatch.setattr(streaming, "rescore", counted)
    while not all(s.done for s in streams):
        for s, feeder in zip(streams, feeders):
            if not s.fbank.finished and next(feeder, "end") == "end":
                s.input_finished()
        rec.decode_streams(streams)
    assert max(calls) >= 2, "segments of several streams were never rescored together"
    assert sum(len(s.final_results) >= 2 for s in streams) >= 3  # rule 3 cut them
    for s, one in zip(streams, alone):
        finals = s.final_results
        assert [r.token_ids for r in finals] == [r.token_ids for r in one]
        assert [r.timestamps for r in finals] == [r.timestamps for r in one]


def test_endpointed_segments_are_rescored_over_their_own_encoder_output(
    test_audio, tiny_u2
) -> None:
    a, b = test_audio[0], test_audio[1]
    gap = np.random.default_rng(0).normal(0, 10 ** (-70 / 20), 3 * 16000).astype(np.float32)
    audio = np.concatenate([a, gap, b])
    rec = _recognizer(tiny_u2, 4, -1, endpoint=EndpointConfig())
    s = rec.create_stream()
    s.accept_waveform(16000, audio)
    s.input_finished()
    rec.decode_until_done([s])
    segments = s.final_results
    assert len(segments) == 2
    feats = offline_fbank(audio, tiny_u2.cfg.features)
    model = tiny_u2.model
    for seg in segments:
        start = round(seg.start / 0.01)
        with torch.no_grad():
            out = model.encoder.forward_chunk_by_chunk(feats[None, start:], 4, -1)
            out = out[0, : round((seg.end - seg.start) / 0.04)]
        nbest = ctc_prefix_beam_search(model.ctc(out), 4, 4)
        found = rescore(model.decoder, [Segment(nbest, out)], 0.5, 0.3)[0]
        assert found[0].tokens == seg.token_ids


def _total(model, out, h) -> float:
    """Decoder score + 0.5 * search score of ``h`` over ``out`` (T, D), by hand."""
    with torch.no_grad():
        att = model.decoder.score(
            out[None], torch.tensor([out.size(0)]), torch.tensor([h.tokens]),
            torch.tensor([h.num_tokens]), 0.3,
        )  # fmt: skip
    return float(att) + 0.5 * h.score


def test_lm_and_hotword_scores_stay_in_the_rescored_score(corpus: Path, tiny_u2, tmp_path) -> None:
    """decode's rescored best is the argmax of decoder score + ctc_weight * search score, the
    search score with the LM's or the hotwords' parts (recomputed here from the fused prefix
    beam); and those parts change the outcome against rescoring without them."""
    from wenet_lite.data.manifest import cut_text
    from wenet_lite.data.tokenizer import normalize_text
    from wenet_lite.search.lm import WordLM

    model = tiny_u2.model
    cuts = list(load_cuts(corpus / "test-clean"))
    lm = WordLM.train(normalize_text(cut_text(c)) for c in load_cuts(corpus / "train-clean-100"))
    lm.save(tmp_path / "lm.json")
    words = normalize_text(cut_text(cuts[0])).split()
    (tmp_path / "hot.txt").write_text(f"{words[0]}\n{words[-1]} :4\n")
    fused = {
        "lm": {"lm": str(tmp_path / "lm.json"), "lm_weight": 1.0},
        "hotwords": {"hotwords": str(tmp_path / "hot.txt"), "hotwords_score": 3.0},
    }
    chunking = Chunking(4, -1)
    plain = DecodeOptions(SearchOptions(**RESCORE), chunking, simulate_streaming=True)
    alone = decode_model(model, tiny_u2.tokenizer, tiny_u2.cfg, cuts, plain).results
    for extra in fused.values():
        search = SearchOptions(**RESCORE, **extra)
        opts = DecodeOptions(search, chunking, simulate_streaming=True)
        results = decode_model(model, tiny_u2.tokenizer, tiny_u2.cfg, cuts, opts).results
        models = search.load(tiny_u2.tokenizer)
        by_id = {r.utt_id: r for r in results}
        for cut in cuts:
            feats = offline_fbank(
                load_audio(cut.recording.sources[0].source, 16000), tiny_u2.cfg.features
            )
            with torch.no_grad():
                out = model.encoder.forward_chunk_by_chunk(feats[None], 4, -1)[0]  # (T, D)
                nbest = ctc_prefix_beam_search(
                    model.ctc(out), 4, 4, scorer=models.scorer, context=models.context
                )
                spoken = [h for h in nbest if h.num_tokens]

                best = max(spoken, key=lambda h: _total(model, out, h))
            assert by_id[cut.id].hyp.tokens == best.tokens
            assert by_id[cut.id].hyp.score == pytest.approx(_total(model, out, best), abs=1e-3)
        assert any(a.hyp.tokens != b.hyp.tokens for a, b in zip(alone, results))


def test_misuse_fails_naming_the_model(tiny, tiny_u2, corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f'{tiny.path}.*no attention decoder.*mode="prefix_beam"'):
        open_recognizer(tiny.path, Chunking(4, -1), SearchOptions(**RESCORE))
    with pytest.raises(ValueError, match=f"{tiny.path}.*no attention decoder"):
        open_recognizer(
            tiny.path, offline=DecodeOptions(SearchOptions(**RESCORE), Chunking(4, -1), True)
        )
    with pytest.raises(ValueError, match="search mode must be one of"):
        SearchOptions(mode="rescoring")
    with pytest.raises(ValueError, match="reverse weight"):
        SearchOptions(**RESCORE, reverse_weight=1.5)
    # A decoder-less model still decodes with every other mode, exactly as before.
    open_recognizer(tiny.path, Chunking(4, -1), SearchOptions(mode="prefix_beam"))
    # Hypothesis.rescored keeps everything but the score.
    h = Hypothesis([3, 4], -1.0, [0, 2], 0.5)
    assert h.rescored(-7.0) == Hypothesis([3, 4], -7.0, [0, 2], 0.5)


def test_cli_rescoring_and_its_misuse(tiny, tiny_u2, corpus: Path, tmp_path: Path, capsys) -> None:
    from wenet_lite.cli import main

    data = str(corpus / "test-clean")
    rescore = ["--mode", "attention_rescoring", "--beam", "4"]
    out = tmp_path / "resc"
    args = ["decode", "--model", str(tiny_u2.path), "--data", data, *rescore]
    assert main([*args, "--chunk-size", "4", "--simulate-streaming", "--out", str(out)]) == 0
    record = json.loads((out / "summary.json").read_text())
    assert record["settings"]["search"]["mode"] == "attention_rescoring"
    assert (
        "attention rescoring (4-best, ctc weight 0.5, reverse weight 0.3)"
        in (out / "summary.txt").read_text()
    )
    wav = tmp_path / "a.wav"
    first = next(iter(load_cuts(corpus / "test-clean"))).recording.sources[0].source
    sf.write(wav, load_audio(first, 16000), 16000)
    capsys.readouterr()
    stream = ["stream", "--model", str(tiny_u2.path), "--chunk-size", "4", "--json", str(wav)]
    assert main([*stream, *rescore]) == 0
    finals = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert any(x["type"] == "final" and x["text"] for x in finals)
    # Every engine keeps the encoder output: onnxruntime rescores as torch does.
    texts = {}
    for engine in ("torch", "onnxruntime"):
        fixed = [*stream, *rescore, "--left-chunks", "2", "--engine", engine]
        assert main(fixed) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        texts[engine] = [x["text"] for x in lines if x["type"] == "final"]
    assert texts["torch"] == texts["onnxruntime"] and any(texts["torch"])
    for argv, code, message in [
        (["decode", "--model", str(tiny.path), "--data", data, *rescore], 1,
         f"{tiny.path} has no attention decoder"),
        (["stream", "--model", str(tiny.path), str(wav), *rescore], 1,
         f"{tiny.path} has no attention decoder"),
        ([*args, "--reverse-weight", "2"], 2, "reverse weight must be in [0, 1]"),
    ]:  # fmt: skip
        capsys.readouterr()
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        if code == 1:  # the library names the field, the CLI the flag
            assert "use --mode prefix_beam" in err and 'mode="' not in err


def test_tune_rescoring_reproduces_decode(tiny_u2, corpus: Path, capsys) -> None:
    """recipes/common/tune_rescoring.py's WER of a pair is what decode gives with those weights."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tune", Path("recipes/common/tune_rescoring.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    data = corpus / "test-clean"
    found = tool.main([
        "--model", str(tiny_u2.path), "--data", str(data), "--beam", "4",
        "--ctc-weights", "0.2", "1.0", "--reverse-weights", "0.0", "0.6",
    ])  # fmt: skip
    assert "best: ctc weight / reverse weight" in capsys.readouterr().out
    cuts = list(load_cuts(data))
    transcripts = set()
    for key, value in found.items():
        if key == "prefix beam":
            search = SearchOptions(mode="prefix_beam", beam_size=4, token_min_logp=-5.0)
        else:
            ctc, reverse = map(float, key.split("/"))
            search = SearchOptions(
                **RESCORE, token_min_logp=-5.0, ctc_weight=ctc, reverse_weight=reverse
            )
        report = decode_model(
            tiny_u2.model, tiny_u2.tokenizer, tiny_u2.cfg, cuts, DecodeOptions(search)
        )
        assert report.summary_record()["wer"]["percent"] == pytest.approx(value, abs=0.01), key
        transcripts.add(tuple(r.text for r in report.results))
    # the weights matter: they pick other transcripts (their WERs can still tie, as on a CPU
    # where the tiny model trained to make only errors)
    assert len(transcripts) > 1
