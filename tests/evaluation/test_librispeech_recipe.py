"""recipes/librispeech/run.sh's word LM, offline: stage 0 fetches the ARPA file once (from a
local HTTP server standing in for openslr.org/11) and skips the audio it already has; stage 5
picks the LM weight and bonus on dev-clean and decodes the test set with them, also in
simulated streaming; stage 6 streams with them and gets the same transcripts. Uses the tiny
rigged model (conftest.py) on the synthetic LibriSpeech-layout corpus."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from wenet_lite.data.manifest import cut_text, load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.search.lm import WordLM

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "librispeech" / "run.sh"
LM_NAME = "3-gram.pruned.1e-7.arpa.gz"

pytestmark = pytest.mark.skipif(shutil.which("wget") is None, reason="needs wget")


@pytest.fixture()
def lm_server(corpus: Path, tmp_path: Path) -> Iterator[str]:
    """An HTTP server with an ARPA LM of the training transcripts under openslr's name."""
    served = tmp_path / "served"
    texts = (normalize_text(cut_text(c)) for c in load_cuts(corpus / "train-clean-100"))
    WordLM.train(texts, order=3).save_arpa(served / LM_NAME)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _recipe(stage: int, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    cmd = ["bash", str(RECIPE), "--stage", str(stage), "--stop-stage", str(stage), *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    return proc


def test_stage0_fetches_the_lm_once_and_stage5_decodes_with_it(
    synthetic_corpus, corpus: Path, tiny_u2, lm_server: str, tmp_path: Path
) -> None:
    dl_dir, exp = tmp_path / "download", tmp_path / "exp"
    dl_dir.mkdir()
    (dl_dir / "LibriSpeech").symlink_to(synthetic_corpus.root / "LibriSpeech")
    exp.mkdir()
    shutil.copy(tiny_u2.path, exp / "avg_5.pt")  # with an attention decoder: rescoring rows
    parts = ["--train-set", "train-clean-100", "--dev-set", "dev-clean"]
    common = [*parts, "--test-sets", "test-clean", "--dl-dir", str(dl_dir), "--exp", str(exp)]

    # Stage 5 before the LM is there says how to get it, before decoding anything.
    err = _recipe(5, *common, "--data", str(corpus), rc=1).stderr
    assert f"word LM {dl_dir / LM_NAME} not found: run stage 0" in err
    assert not (exp / "decode").exists()

    out = _recipe(0, *common, "--lm-mirror", lm_server).stdout
    assert out.count("exists, not downloading") == 3  # the audio is never fetched again
    assert f"download the word LM {lm_server}/{LM_NAME}" in out
    lm_file = dl_dir / LM_NAME
    assert lm_file.read_bytes() == (tmp_path / "served" / LM_NAME).read_bytes()
    assert not list(dl_dir.glob("*.part"))
    # Once there, it is not fetched again (this mirror does not exist).
    again = _recipe(0, *common, "--lm-mirror", "http://127.0.0.1:9/none").stdout
    assert "download the word LM" not in again

    # The better pair comes second (CER 116 vs 119 % on the rigged model), so keeping the
    # first pair would fail.
    grid = {("2.0", "4.0"): None, ("0.2", "0.5"): None}
    lm_grid = " ".join(f"{w}:{b}" for w, b in grid)
    decoding = [*common, "--data", str(corpus), "--chunks", "", "--lm-chunk", "4"]
    decoding += ["--rescore-chunk", "4", "--rescore-beam", "4"]
    out = _recipe(5, *decoding, "--lm-grid", lm_grid).stdout
    for w, b in grid:  # each pair decoded dev-clean
        record = _summary(exp / "decode" / "dev-clean" / f"lm_w{w}_b{b}")
        search = record["settings"]["search"]
        assert (search["lm_weight"], search["word_bonus"]) == (float(w), float(b))
        grid[w, b] = (record["wer"]["percent"], record["cer"]["percent"])
    assert len(set(grid.values())) == 2, grid  # so picking the best is tested
    w, b = min(grid, key=lambda pair: grid[pair])  # lowest WER, then lowest CER
    wer, cer = grid[w, b]
    assert f"best on dev-clean: weight {w}, bonus {b} (WER {wer:.2f} %, CER {cer:.2f} %)" in out
    decode = exp / "decode" / "test-clean"
    lm_search = {
        "mode": "prefix_beam", "beam_size": 20, "token_min_logp": -5.0, "lm": str(lm_file),
        "lm_weight": float(w), "word_bonus": float(b), "oov_penalty": 3.0,
    }  # fmt: skip
    full_lm = _summary(decode / "full_lm")
    assert lm_search.items() <= full_lm["settings"]["search"].items()
    assert full_lm["settings"]["chunking"] == {"chunk_size": 0, "left_chunks": -1}
    assert _summary(decode / "full")["settings"]["search"]["mode"] == "greedy"
    hyps = (decode / "full_lm" / "hyp.txt").read_text().splitlines()
    assert len(hyps) == len(load_cuts(corpus / "test-clean")) == full_lm["utterances"]
    simulated = _summary(decode / "chunk4_sim_lm")["settings"]
    assert lm_search.items() <= simulated["search"].items()
    assert simulated["chunking"] == {"chunk_size": 4, "left_chunks": 4}
    assert simulated["simulate_streaming"]

    # Attention rescoring: prefix beam 4 and its rescored n-best, plain and with the LM.
    for mode in ("full_beam", "full_rescore", "full_lm_rescore", "chunk4_sim_beam",
                 "chunk4_sim_rescore", "chunk4_sim_lm_rescore"):  # fmt: skip
        search = _summary(decode / mode)["settings"]["search"]
        assert search["mode"] == ("prefix_beam" if "beam" in mode else "attention_rescoring")
        assert search["beam_size"] == (20 if "_lm" in mode else 4)
        assert (search["lm"] == str(lm_file)) == ("_lm" in mode)

    # Stage 6 streams with the LM and the pair stage 5 chose, and matches simulated streaming.
    _recipe(6, *decoding, "--stream-chunks", "", "--lm-weight", "9")
    n = len(hyps)
    streamed = _summary(decode / "stream4_lm")
    assert streamed["identical"]["same"] == streamed["identical"]["compared"] == n
    assert streamed["identical"]["to"] == str(decode / "chunk4_sim_lm" / "hyp.txt")
    assert lm_search.items() <= streamed["settings"]["search"].items()
    assert streamed["settings"]["chunking"] == {"chunk_size": 4, "left_chunks": 4}
    texts = [line.partition(" ")[2] for line in (decode / "stream4_lm" / "hyp.txt").open()]
    assert len(texts) == n and sum(bool(t.strip()) for t in texts) > n // 2
    assert not (decode / "stream16").exists()
    for mode in ("stream4_rescore", "stream4_lm_rescore"):  # rescored streams, identical too
        streamed = _summary(decode / mode)
        assert streamed["identical"]["same"] == streamed["identical"]["compared"] == n, mode

    # --lm "": no LM decode.
    shutil.rmtree(decode)
    out = _recipe(
        5, *common, "--data", str(corpus), "--chunks", "", "--lm", "", "--rescore-chunk", ""
    ).stdout
    assert "tune the word LM" not in out
    assert (decode / "full").is_dir() and not (decode / "full_lm").exists()
    assert (decode / "full_rescore").is_dir() and not (decode / "full_lm_rescore").exists()
