"""recipes/common/results_table.py: which decode dirs become which rows, in which order, with the
numbers and settings their summary.json records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GREEDY = {"mode": "greedy", "beam_size": 10, "token_min_logp": None, "blank_penalty": 0.0,
          "lm": None, "lm_weight": 0.4, "word_bonus": 2.5, "oov_penalty": 3.0}  # fmt: skip
LM = {**GREEDY, "mode": "prefix_beam", "beam_size": 20, "token_min_logp": -5.0,
      "blank_penalty": 0.7, "lm": "/lm/3-gram.arpa.gz", "lm_weight": 0.5}  # fmt: skip


@pytest.fixture(scope="module")
def results_table(load_tool):
    return load_tool("results_table")


def _summary(root: Path, mode: str, wer: float, search=None, same=None) -> None:
    d = root / "test-clean" / mode
    d.mkdir(parents=True)
    rate = {"percent": wer, "substitutions": 1, "deletions": 0, "insertions": 0, "ref_len": 10}
    record = {"wer": rate, "cer": {**rate, "percent": wer / 10}, "utterances": 10, "failed": 0}
    if search is not None:
        record["settings"] = {"search": search}
    if same is not None:
        record["identical"] = {"to": "x/hyp.txt", "same": same, "compared": 10, "differ": []}
    (d / "summary.json").write_text(json.dumps(record))
    (d / "summary.txt").write_text(f"WER {wer + 50:.2f} % (prose: never read)\n")


def test_rows_come_from_summary_json_in_table_order(tmp_path: Path, results_table) -> None:
    _summary(tmp_path, "stream16_lm", 9.5, LM, same=10)
    _summary(tmp_path, "ts16_int8", 13.0)
    _summary(tmp_path, "chunk16_sim_lm", 9.25, LM)
    _summary(tmp_path, "stream16", 11.0, GREEDY, same=9)
    _summary(tmp_path, "full_lm", 8.0, LM)
    _summary(tmp_path, "chunk16", 11.5, GREEDY)
    _summary(tmp_path, "full", 10.0, GREEDY)
    _summary(tmp_path, "chunk16_sim", 11.25, GREEDY)
    _summary(tmp_path, "chunk4_sim_lm", 12.0, LM)
    _summary(tmp_path, "junk_dir", 50.0, GREEDY)  # not a mode: ignored
    hot = {**LM, "hotwords": "/x/unseen.txt", "hotwords_score": 0.75}
    _summary(tmp_path, "full_lm_hot", 7.5, hot)
    _summary(tmp_path, "full_beam", 9.0, {**LM, "lm": None, "blank_penalty": 0.0})
    rescore = {"mode": "attention_rescoring", "nbest": 20, "ctc_weight": 0.5, "reverse_weight": 0.3}
    _summary(tmp_path, "full_rescore", 8.5, {**LM, "lm": None, "blank_penalty": 0.0, **rescore})
    _summary(tmp_path, "full_lm_rescore", 7.0, {**LM, **rescore})
    _summary(tmp_path, "chunk16_sim_rescore", 10.5, {**LM, "lm": None, **rescore})
    _summary(tmp_path, "stream16_rescore", 10.5, {**LM, "lm": None, **rescore}, same=10)
    _summary(tmp_path, "ts16_rescore", 10.75)

    table = results_table.collect(tmp_path, ["test-clean"])
    lines = results_table.results_lines(table, ["test-clean"])
    rows = [line for line in lines[2:] if line.startswith("| ")]
    lm = (
        "ctc prefix beam 20 (token min log-prob -5.0), blank penalty 0.7 + word LM "
        "3-gram.arpa.gz (weight 0.5, word bonus 2.5, oov penalty 3.0)"
    )
    beam = "ctc prefix beam 20 (token min log-prob -5.0), blank penalty 0.7"
    resc = " + attention rescoring of the 20-best (ctc weight 0.5, reverse weight 0.3)"
    assert rows[2] == f"| {beam[:-19]}{resc}, full context | full | 8.50 | 0.85 |"
    del rows[2]
    assert rows == [
        "| ctc greedy, full context | full | 10.00 | 1.00 |",
        "| ctc prefix beam 20 (token min log-prob -5.0), full context | full | 9.00 | 0.90 |",
        f"| {lm}, full context | full | 8.00 | 0.80 |",
        f"| {lm} + hotwords unseen.txt (0.75 per token), full context | full | 7.50 | 0.75 |",
        f"| {lm}{resc}, full context | full | 7.00 | 0.70 |",
        "| ctc greedy, chunk-masked forward | 16 | 11.50 | 1.15 |",
        "| ctc greedy, simulated streaming (chunk by chunk, cached) | 16 | 11.25 | 1.12 |",
        "| ctc greedy, streamed (`wenet-lite stream`) | 16 | 11.00 | 1.10 |",
        f"| {beam}{resc}, simulated streaming (chunk by chunk, cached) | 16 | 10.50 | 1.05 |",
        f"| {beam}{resc}, streamed (`wenet-lite stream`) | 16 | 10.50 | 1.05 |",
        f"| {lm}, simulated streaming (chunk by chunk, cached) | 16 | 9.25 | 0.93 |",
        f"| {lm}, streamed (`wenet-lite stream`) | 16 | 9.50 | 0.95 |",
        f"| {lm}, simulated streaming (chunk by chunk, cached) | 4 | 12.00 | 1.20 |",
        "| ctc greedy, exported TorchScript (`examples/run_exported.py`), int8 "
        "| 16 | 13.00 | 1.30 |",
        "| ctc prefix beam 10 + attention rescoring, exported TorchScript "
        "(`examples/run_exported.py`), fp32 | 16 | 10.75 | 1.07 |",
    ]
    assert lines[-1] == (
        "Streamed transcripts identical to `decode --simulate-streaming`: "
        "16: 9/10 (test-clean); 16 rescored: 10/10 (test-clean); 16 with the LM: 10/10 "
        "(test-clean)."
    )


def test_transducer_rows_follow_the_ctc_ones(tmp_path: Path, results_table) -> None:
    _summary(tmp_path, "full", 10.0, GREEDY)
    _summary(tmp_path, "full_tbeam", 8.0, {**GREEDY, "mode": "transducer_beam", "beam_size": 4})
    _summary(tmp_path, "full_tgreedy", 9.0, {**GREEDY, "mode": "transducer_greedy",
                                             "max_symbols": 4})  # fmt: skip
    _summary(tmp_path, "full_lm", 8.5, LM)
    _summary(tmp_path, "chunk16_sim_tgreedy", 11.0, {**GREEDY, "mode": "transducer_greedy"})
    _summary(tmp_path, "chunk16_sim", 12.0, GREEDY)
    table = results_table.collect(tmp_path, ["test-clean"])
    rows = [line for line in results_table.results_lines(table, ["test-clean"])[2:]
            if line.startswith("| ")]  # fmt: skip
    assert [r.split(" | ")[0] for r in rows] == [
        "| ctc greedy, full context",
        "| transducer greedy (4 symbol(s) a frame), full context",
        "| transducer modified beam 4, full context",
        rows[3].split(" | ")[0],  # the LM row after every search without it
        "| ctc greedy, simulated streaming (chunk by chunk, cached)",
        "| transducer greedy (4 symbol(s) a frame), simulated streaming (chunk by chunk, cached)",
    ]
    assert "word LM" in rows[3]


def test_punctuation_rows_add_texts_of_other_kinds(tmp_path: Path, results_table) -> None:
    def scores(base: float) -> dict:
        return {"f1 .": base, "case accuracy": base + 1, "words": 100}

    metrics = {"training words": 1000, "texts": ["/d/fortunes.txt"], "minutes": 1.5,
               "held-out lines": 10, "model": scores(60), "baseline": scores(50),
               "model, running text": scores(40), "baseline, running text": scores(10)}  # fmt: skip
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    lines = results_table.punct_lines(tmp_path)
    assert sum(line.startswith("| the model") for line in lines) == 2
    other = {"texts": ["/d/legal.txt"], "lines": 5, "model": scores(70), "baseline": scores(55)}
    (tmp_path / "score_legal.json").write_text(json.dumps(other))
    lines = results_table.punct_lines(tmp_path)
    rows = [line for line in lines if "legal.txt (never trained on)" in line]
    assert rows == [
        "| the model, legal.txt (never trained on) lines alone | 70.00 | 71.00 |",
        "| baseline: first word capitalised, a period at the end, legal.txt (never trained on) "
        "lines alone | 55.00 | 56.00 |",
    ]
