"""An imported WeNet model (tests/fixtures/wenet/librispeech, random weights) through everything
downstream: `decode` with every search, `stream` on every engine (fp32 engines agree, int8
engines run), the TorchScript and ExecuTorch exports, and the server over both protocols,
whose transcripts equal `stream`'s."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from tests.serve.conftest import sherpa_finals, sherpa_session, start_server
from wenet_lite.cli import main
from wenet_lite.data.manifest import load_cuts
from wenet_lite.search.lm import WordLM
from wenet_lite.wenet.convert import import_wenet

CASE = Path(__file__).parents[1] / "fixtures" / "wenet" / "librispeech"
CHUNKING = ["--chunk-size", "16", "--left-chunks", "4"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_wenet(CASE, tmp_path_factory.mktemp("wenet") / "m.pt", 1e-12)


@pytest.fixture(scope="module")
def files(synthetic_corpus) -> List[str]:
    cuts = load_cuts(synthetic_corpus.data / "test-clean")
    return [c.recording.sources[0].source for c in cuts][:3]


def _stream(imported: Path, files: List[str], capsys, *extra: str) -> Dict[str, str]:
    capsys.readouterr()
    assert main(["stream", "--model", str(imported), *CHUNKING, "--json", *extra, *files]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    texts: Dict[str, List[str]] = {f: [] for f in files}
    for r in rows:
        if r["type"] == "final" and r["text"]:
            texts[r["file"]].append(r["text"])
    return {f: " ".join(t) for f, t in texts.items()}


def test_decode_with_every_search(imported, synthetic_corpus, tmp_path) -> None:
    data = synthetic_corpus.data / "test-clean"
    args = ["decode", "--model", str(imported), "--data", str(data)]
    hotwords = tmp_path / "hot.txt"
    hotwords.write_text("HELLO WORLD\nSPEECH\n")
    lm = WordLM.train(["HELLO WORLD", "SPEECH RECOGNITION STREAMS AUDIO"])
    lm.save(tmp_path / "lm.json")
    runs = {
        "greedy": [],
        "beam": [
            "--mode",
            "prefix_beam",
            "--beam",
            "4",
            "--hotwords",
            str(hotwords),
            "--lm",
            str(tmp_path / "lm.json"),
        ],  # fmt: skip
        "rescore": ["--mode", "attention_rescoring", "--beam", "4"],
        "simulated": ["--simulate-streaming", *CHUNKING],
    }
    for name, extra in runs.items():
        assert main([*args, *extra, "--out", str(tmp_path / name)]) == 0, name
        assert (tmp_path / name / "summary.txt").is_file()


def test_stream_on_every_engine(imported, files, capsys) -> None:
    """The fp32 engines give the torch engine's transcripts; the int8 ones run."""
    torch_text = _stream(imported, files, capsys)
    assert any(torch_text.values())
    assert _stream(imported, files, capsys, "--engine", "onnxruntime") == torch_text
    assert _stream(imported, files, capsys, "--engine", "executorch") == torch_text
    assert any(_stream(imported, files, capsys, "--int8").values())
    assert any(_stream(imported, files, capsys, "--engine", "executorch", "--int8").values())


def test_torchscript_export_streams_as_wenet(imported, tmp_path) -> None:
    out = tmp_path / "m.ts"
    assert main(["export", "--model", str(imported), "--format", "torchscript", *CHUNKING,
                 "--out", str(out)]) == 0  # fmt: skip
    ts = torch.jit.load(str(out))
    golden = torch.load(CASE / "golden.pt", weights_only=True)
    feats = golden["feats"][:1]
    window, stride = 67, 64  # (16-1)*4 + 7, 16*4
    state = ts.init_state(1)
    outs = []
    with torch.no_grad():
        start = 0
        while start < feats.size(1):
            piece = feats[:, start : start + window]
            if piece.size(1) < 7:
                break
            enc, _, state = ts.encode_chunk(piece, state)
            outs.append(enc)
            start += stride
    got = torch.cat(outs, 1)
    want = golden["stream16_4"]
    assert float((got[:, : want.size(1)] - want).abs().max()) < 1e-4


def test_serve_gives_the_transcripts_of_stream(imported, files, capsys) -> None:
    from wenet_lite.features.audio import load_audio

    want = _stream(imported, files, capsys)
    server = start_server(imported, *CHUNKING)
    try:
        for f in files:
            session = asyncio.run(sherpa_session(server.url, load_audio(f, 16000)))
            assert " ".join(sherpa_finals(session.messages)) == want[f]
    finally:
        assert server.stop() == 0, server.log()
