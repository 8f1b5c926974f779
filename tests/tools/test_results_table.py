"""tools/results_table.py: which decode dirs become which rows, in which order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "results_table.py"
LM = "prefix_beam (beam 20, token min log-prob -5.0) + LM /lm/3-gram.arpa.gz (weight 0.5, word bonus 2.5, oov penalty 3.0)"  # noqa: E501


@pytest.fixture(scope="module")
def results_table():
    spec = importlib.util.spec_from_file_location("results_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_table"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["results_table"]


def _summary(root: Path, mode: str, first: str, wer: float, *extra: str) -> None:
    d = root / "test-clean" / mode
    d.mkdir(parents=True)
    lines = [first, f"WER {wer:.2f} % [ S=1, D=0, I=0 / 10 ]", "CER 1.00 % [ x ]", *extra]
    (d / "summary.txt").write_text("\n".join(lines) + "\n")


def test_rows_greedy_then_lm_per_chunk_and_streamed_lm_rows_carry_the_settings(
    tmp_path: Path, results_table
) -> None:
    same = "identical to {}/hyp.txt: 10/10"
    _summary(tmp_path, "stream16_lm", "streamed s.jsonl", 9.5, same.format("chunk16_sim_lm"))
    _summary(tmp_path, "ts16_int8", "streamed t.jsonl", 13.0)
    sim = "left -1, simulated streaming"
    _summary(tmp_path, "chunk16_sim_lm", f"search {LM}, chunk 16, {sim}", 9.5)
    _summary(tmp_path, "stream16", "streamed s.jsonl", 11.0, same.format("chunk16_sim"))
    _summary(tmp_path, "full_lm", f"search {LM}, full context", 8.0)
    _summary(tmp_path, "chunk16", "search greedy, chunk 16, left -1, chunk-masked", 11.0)
    _summary(tmp_path, "full", "search greedy, full context", 10.0)
    _summary(tmp_path, "chunk16_sim", "search greedy, chunk 16, left -1, simulated streaming", 11.0)
    _summary(tmp_path, "chunk4_sim_lm", f"search {LM}, chunk 4, simulated streaming", 12.0)
    _summary(tmp_path, "junk_dir", "search greedy", 50.0)  # not a mode: ignored

    table = results_table.collect(tmp_path, ["test-clean"])
    lines = results_table.results_lines(table, ["test-clean"])
    rows = [line for line in lines[2:] if line.startswith("| ")]
    settings = "3-gram.arpa.gz (`decode --lm`, beam 20, token min log-prob -5.0, LM weight 0.5, "
    lm = f"ctc prefix beam + word LM {settings}word bonus 2.5, oov penalty 3.0)"
    assert rows == [
        "| ctc greedy, full context | full | 10.00 | 1.00 |",
        f"| {lm}, full context | full | 8.00 | 1.00 |",
        "| ctc greedy, chunk-masked forward | 16 | 11.00 | 1.00 |",
        "| ctc greedy, simulated streaming (chunk by chunk, cached) | 16 | 11.00 | 1.00 |",
        "| ctc greedy, streamed (`wenet-lite stream`) | 16 | 11.00 | 1.00 |",
        f"| {lm}, simulated streaming | 16 | 9.50 | 1.00 |",
        f"| {lm}, streamed (`wenet-lite stream --lm`) | 16 | 9.50 | 1.00 |",
        f"| {lm}, simulated streaming | 4 | 12.00 | 1.00 |",
        "| ctc greedy, exported TorchScript (`tools/run_exported.py`), int8 | 16 | 13.00 | 1.00 |",
    ]
    assert lines[-1] == (
        "Streamed transcripts identical to `decode --simulate-streaming`: "
        "16: 10/10 (test-clean); 16 with the LM: 10/10 (test-clean)."
    )
