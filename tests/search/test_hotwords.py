"""Hotwords in the searches: a hand-made posteriorgram flips, an unrelated list changes nothing,
streamed == simulated streaming with hotwords, matched words are marked, and misuse is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
import torch

from wenet_lite.cli import main
from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.search.context import ContextGraph, Phrase
from wenet_lite.search.ctc_search import ctc_prefix_beam_search
from wenet_lite.search.options import SearchOptions


def _posteriorgram() -> torch.Tensor:
    """Four frames over blank + tokens 1..6: "1 2" is likelier than "3 4" (p 0.5 vs 0.4 per
    token frame); token 5 is possible (0.05-0.1) but never the best, token 6 impossible."""
    rows = [[0.05, 0.5, 0.0, 0.4, 0.0, 0.05], [0.9, 0.0, 0.0, 0.0, 0.0, 0.1],
            [0.05, 0.0, 0.5, 0.0, 0.4, 0.05], [0.9, 0.0, 0.0, 0.0, 0.0, 0.1]]  # fmt: skip
    p = torch.tensor(rows) + 1e-6
    p = torch.cat([p / p.sum(1, keepdim=True), torch.zeros(4, 1)], 1)  # token 6: never said
    return p.log()


def _graph(*phrases) -> ContextGraph:
    return ContextGraph([Phrase(str(t), tuple(t), s) for t, s in phrases])


def test_a_hotword_flips_the_output_and_a_foreign_list_changes_nothing() -> None:
    lp = _posteriorgram()
    # A beam wide enough to keep every alignment: scores are exact sums, comparable across runs.
    plain = {tuple(h.tokens): h.score for h in ctc_prefix_beam_search(lp, 16, nbest=16)}
    best = max(plain, key=plain.get)
    assert best == (1, 2)
    biased = ctc_prefix_beam_search(lp, 16, 16, context=_graph(([3, 4], 1.0)))
    assert biased[0].tokens == [3, 4]
    # The bonus is added to the CTC score, never assigned over it: 2 tokens x 1.0.
    assert biased[0].score == pytest.approx(plain[3, 4] + 2.0)
    # A list whose phrases the frames never offer: same hypotheses, same scores.
    foreign = ctc_prefix_beam_search(lp, 16, 16, context=_graph(([6, 1], 3.0), ([6], 1.0)))
    assert {tuple(h.tokens): h.score for h in foreign} == plain
    # A partial match is taken back at the end: "3 4" of phrase "3 4 4" earns nothing, and the
    # n-best is sorted after the take-back.
    partial = ctc_prefix_beam_search(lp, 16, 16, context=_graph(([3, 4, 4], 1.0)))
    assert partial[0].tokens == [1, 2]
    scores = {tuple(h.tokens): h.score for h in partial}
    assert (3, 4) in scores and all(
        v == pytest.approx(plain[k]) for k, v in scores.items() if k in plain
    )


def _hotwords_file(tmp_path: Path, corpus: Path) -> Path:
    """Words of the test transcripts, and one the tokenizer cannot spell."""
    words = sorted({w for c in load_cuts(corpus / "test-clean") for w in cut_text(c).split()})
    lines = [w.lower() for w in words[::3]] + ["ÆØÅ", f"{words[1]} {words[2]} :4"]
    path = tmp_path / "hotwords.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_streamed_with_hotwords_equals_simulated_streaming(
    corpus: Path, test_audio, tiny, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hotwords = _hotwords_file(tmp_path, corpus)
    cuts = list(load_cuts(corpus / "test-clean"))
    search = SearchOptions(mode="prefix_beam", beam_size=4, hotwords=str(hotwords),
                           hotwords_score=3.0)  # fmt: skip
    opts = DecodeOptions(search, Chunking(4, -1), simulate_streaming=True)
    report = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts)
    assert "ÆØÅ" in caplog.text and "skipped" in caplog.text  # reported, not fatal
    simulated = {r.utt_id: r for r in report.results}
    plain = decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts,
                         DecodeOptions(SearchOptions(mode="prefix_beam", beam_size=4),
                                       Chunking(4, -1), simulate_streaming=True))  # fmt: skip
    changed = sum(a.hyp.tokens != b.hyp.tokens for a, b in zip(report.results, plain.results))
    assert changed > 0, "score 3 per token should change some transcripts of the rigged model"
    rec = open_recognizer(
        (tiny.model, tiny.tokenizer, tiny.cfg), Chunking(4, -1), search,
        endpoint=EndpointConfig(enabled=False),
    )  # fmt: skip
    marked = 0
    for cut, audio in zip(cuts, test_audio):
        s = rec.create_stream()
        for start in range(0, len(audio), 3000):
            s.accept_waveform(16000, audio[start : start + 3000])
            rec.decode_until_done([s])
        s.input_finished()
        rec.decode_until_done([s])
        result = s.result()
        assert result.token_ids == simulated[cut.id].hyp.tokens
        hot = [w.text for w in result.words if w.hotword]
        assert hot == simulated[cut.id].hotwords
        marked += len(hot)
    assert marked > 0


def test_cli_hotwords_details_json_and_misuse(
    corpus: Path, test_audio, tiny, tmp_path: Path, capsys
) -> None:
    hotwords = _hotwords_file(tmp_path, corpus)
    model, data = ["--model", str(tiny.path)], ["--data", str(corpus / "test-clean")]
    hot = ["--mode", "prefix_beam", "--beam", "4", "--hotwords", str(hotwords)]
    out = tmp_path / "dec"
    assert main(["decode", *model, *data, *hot, "--hotwords-score", "3", "--out", str(out)]) == 0
    details = (out / "details.txt").read_text()
    assert details.count(" hotwords:") == len(load_cuts(corpus / "test-clean"))  # one line each
    search = json.loads((out / "summary.json").read_text())["settings"]["search"]
    assert (search["hotwords"], search["hotwords_score"]) == (str(hotwords), 3.0)
    wav = tmp_path / "a.wav"
    sf.write(wav, test_audio[0], 16000)
    capsys.readouterr()
    stream = ["stream", *model, "--chunk-size", "4", "--json", "--no-endpoint", str(wav)]
    assert main([*stream, *hot, "--hotwords-score", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    words = [w for line in lines if line["type"] == "final" for w in line["words"]]
    assert all(w.get("hotword", False) in (True, False) for w in words)
    for args, code, words in [
        ([*stream, "--hotwords", str(hotwords)], 2,
         "need a beam: the prefix beam (--mode prefix_beam or"),
        ([*stream, *hot[:4], "--hotwords", str(tmp_path / "no.txt")], 1,
         f"hotwords file not found: {tmp_path / 'no.txt'}"),
        ([*stream, *hot[:4], "--hotwords", str(tmp_path)], 1, "is a directory"),
    ]:  # fmt: skip
        capsys.readouterr()
        assert main(args) == code
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
