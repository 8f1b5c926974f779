"""The executorch engine (runtime/engines.py) over the .pte programs of export/executorch.py, and
export directories (wenet_lite/files/export_dir.py) that a recognizer opens without the model file.

fp32 equals the torch engine; int8 (per-frame activation scales) keeps a batched stream equal
to the stream alone; streamed == `decode --simulate-streaming` on the same engine; an export
directory streams as the model file does on that engine; misuse fails naming the file or both
chunkings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

pytest.importorskip("executorch")

from tests.runtime.test_engines import random_chunk_call  # noqa: E402
from tests.runtime.test_streaming import _stream  # noqa: E402
from wenet_lite.model.chunking import Chunking  # noqa: E402
from wenet_lite.recognizer import EngineSpec, open_recognizer  # noqa: E402
from wenet_lite.runtime.endpoint import EndpointConfig  # noqa: E402
from wenet_lite.runtime.engines import ExecuTorchEngine, TorchEngine  # noqa: E402
from wenet_lite.runtime.streaming import StreamingRecognizer  # noqa: E402
from wenet_lite.search.options import SearchOptions  # noqa: E402

CHUNKING = Chunking(4, 2)


@pytest.fixture(scope="module")
def export_dir(tiny, tmp_path_factory):
    """`wenet-lite export --format executorch --int8` of the tiny model (about 20 s
    a program to lower)."""
    from wenet_lite.cli import main

    out = tmp_path_factory.mktemp("et") / "et"
    flags = ["--chunk-size", "4", "--left-chunks", "2", "--int8"]
    assert main(["export", "--model", str(tiny.path), "--format", "executorch",
                 "--out", str(out), *flags]) == 0  # fmt: skip
    return out


@pytest.fixture(scope="module")
def programs(export_dir) -> dict:
    """The tiny model's programs, fp32 and int8."""
    return {None: (export_dir / "model.pte").read_bytes(),
            "int8": (export_dir / "model.int8.pte").read_bytes()}  # fmt: skip


def _recognizer(tiny, engine, **search) -> StreamingRecognizer:
    return StreamingRecognizer(
        engine or TorchEngine(tiny.model, CHUNKING), tiny.cfg, tiny.tokenizer,
        SearchOptions(**search), endpoint=EndpointConfig(enabled=False), model=tiny.model,
    )  # fmt: skip


def _row(state, i: int):
    return state._replace(
        att_cache=state.att_cache[:, i : i + 1],
        conv_cache=state.conv_cache[:, i : i + 1],
        cache_len=state.cache_len[i : i + 1],
    )


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_one_chunk_matches_torch_and_each_row_equals_it_alone(tiny, programs, quantize) -> None:
    et = ExecuTorchEngine(programs[quantize], CHUNKING)
    eager = TorchEngine(tiny.model, CHUNKING)
    gen = torch.Generator().manual_seed(0)
    for b in (1, 3, 7):
        feats, lens, state = random_chunk_call(tiny.model, CHUNKING, b, gen)
        out, got, got_state = et.run_encoder(feats, lens, state)
        want_out, want, want_state = eager.run_encoder(feats, lens, state)
        assert got.shape == want.shape and out.shape == want_out.shape
        if quantize is None:
            assert (got - want).abs().max() < 1e-4
        else:  # int8: close, not equal
            assert (got.exp() - want.exp()).abs().max() < 0.2
            assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.8
        assert torch.allclose(got.exp().sum(-1), torch.ones(b, CHUNKING.chunk_size), atol=1e-4)
        for a, e in zip(got_state, want_state):
            tol = 1e-4 if quantize is None else 0.1 * float(e.float().abs().max()) + 1e-3
            assert a.shape == e.shape and (a.float() - e.float()).abs().max() <= tol
        for i in range(b):  # the same row alone: the very same numbers, in fp32 and int8
            alone, alone_state = et.run(feats[i : i + 1], lens[i : i + 1], _row(state, i))
            assert torch.equal(alone[0], got[i])
            assert torch.equal(alone_state.att_cache[:, 0], got_state.att_cache[:, i])
    if quantize == "int8":  # the quantized program is the smaller one
        assert len(programs["int8"]) < 0.8 * len(programs[None])
    # One stream runs the fixed-shape method (the rows alone above), and it is the batched
    # method's computation: the same numbers for the same single-stream call.
    assert et._single is not None
    feats, lens, state = random_chunk_call(tiny.model, CHUNKING, 1, gen)
    inputs = [feats.float(), lens, state.att_cache, state.conv_cache, state.cache_len]
    single = [t.clone() for t in et._single.execute(inputs)]
    batched = [t.clone() for t in et._method.execute(inputs)]
    assert all(torch.equal(a, b) for a, b in zip(single, batched))


def test_batches_beyond_the_programs_bound_run_in_pieces(tiny, programs) -> None:
    et = ExecuTorchEngine(programs[None], CHUNKING)
    assert et.max_batch >= 8
    gen = torch.Generator().manual_seed(3)
    feats, lens, state = random_chunk_call(tiny.model, CHUNKING, 7, gen)
    whole = et.run(feats, lens, state)
    et.max_batch = 2  # as if the program were planned for 2 streams
    pieces = et.run(feats, lens, state)
    assert torch.equal(whole[0], pieces[0])
    for a, b in zip(whole[1], pieces[1]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("search", [{}, {"mode": "prefix_beam", "beam_size": 4}])
def test_streamed_transcripts_equal_the_torch_engine(test_audio, tiny, programs, search) -> None:
    et = _recognizer(tiny, ExecuTorchEngine(programs[None], CHUNKING), **search)
    eager = _recognizer(tiny, None, **search)
    for k, audio in enumerate(test_audio):
        a, b = _stream(et, audio, seed=k), _stream(eager, audio, seed=k + 1)
        assert a.token_ids and a.token_ids == b.token_ids
        assert a.timestamps == b.timestamps


def test_int8_streams_batched_equal_alone(test_audio, tiny, programs) -> None:
    engine = ExecuTorchEngine(programs["int8"], CHUNKING)
    rec = _recognizer(tiny, engine, mode="prefix_beam", beam_size=4)
    audios = test_audio[:6]
    alone = [_stream(rec, a, seed=40 + k) for k, a in enumerate(audios)]
    streams = [rec.create_stream() for _ in audios]
    for s, a in zip(streams, audios):
        s.accept_waveform(16000, a)
        s.input_finished()
    sizes = []
    while not all(s.done for s in streams):
        sizes.append(len(rec.decode_streams(streams)))
    assert max(sizes) == len(audios)
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids and one.token_ids
        assert s.result().confidence == pytest.approx(one.confidence, abs=1e-6)


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_decode_simulate_streaming_equals_the_engines_streams(
    corpus, test_audio, tiny, programs, quantize
) -> None:
    from wenet_lite.data.manifest import load_cuts
    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model

    cuts = list(load_cuts(corpus / "test-clean"))
    opts = DecodeOptions(SearchOptions(), CHUNKING, simulate_streaming=True, batch_seconds=12)
    engine = ExecuTorchEngine(programs[quantize], CHUNKING)
    decoded = {r.utt_id: r.hyp.tokens for r in decode_model(
        tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts, engine).results}  # fmt: skip
    rec = _recognizer(tiny, engine)
    for k, (cut, audio) in enumerate(zip(cuts, test_audio)):
        assert _stream(rec, audio, seed=k).token_ids == decoded[cut.id], cut.id
    if quantize is None:  # fp32: the eager chunk-by-chunk forward's tokens
        plain = {r.utt_id: r.hyp.tokens for r in decode_model(
            tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts).results}  # fmt: skip
        assert decoded == plain


def _finals(capsys, argv) -> list:
    from wenet_lite.cli import main

    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return [x for x in lines if x["type"] == "final"], lines[-1]


def test_stream_from_an_export_directory_equals_the_model_file(
    tiny, corpus, export_dir, programs, capsys
) -> None:
    from wenet_lite.cli.stream_files import stream_inputs
    from wenet_lite.data.manifest import load_cuts

    assert sorted(p.name for p in export_dir.iterdir()) == [
        "model.int8.pte", "model.pte", "tokenizer.model", "wenet_lite.json"]  # fmt: skip
    paths = [str(c.recording.sources[0].source) for c in load_cuts(corpus / "test-clean")[:3]]
    chunk = ["--chunk-size", "4", "--left-chunks", "2"]
    texts = {}
    for name, argv in {
        "dir": ["--model", str(export_dir)],
        "file": ["--model", str(tiny.path), *chunk, "--engine", "executorch"],  # lowered now
        "torch": ["--model", str(tiny.path), *chunk],
        "dir int8": ["--model", str(export_dir), "--int8"],
    }.items():
        finals, last = _finals(capsys, ["stream", "--json", *argv, *paths])
        texts[name] = {p: " ".join(f["text"] for f in finals if f["file"] == p) for p in paths}
        engine = {"dir": "executorch", "file": "executorch", "dir int8": "executorch int8"}
        assert last["engine"] == engine.get(name, "torch")
        assert last["chunking"] == {"chunk_size": 4, "left_chunks": 2}
    assert all(texts["dir"].values()) and texts["dir"] == texts["file"] == texts["torch"]
    # int8 from the directory: what the int8 program gives in memory.
    rec = StreamingRecognizer(
        ExecuTorchEngine(programs["int8"], CHUNKING),
        tiny.cfg,
        tiny.tokenizer,
        source=str(tiny.path),
    )
    report = stream_inputs(rec, paths, json_lines=True)
    capsys.readouterr()
    assert texts["dir int8"] == {p: report.texts[p] for p in paths}


def test_recognizer_from_an_export_directory_needs_no_model(tiny, export_dir, test_audio) -> None:
    rec = open_recognizer(export_dir, endpoint=EndpointConfig(enabled=False))
    assert rec.model is None and rec.chunking == CHUNKING
    eager = _recognizer(tiny, None)
    for k, audio in enumerate(test_audio[:4]):
        assert _stream(rec, audio, seed=k).token_ids == _stream(eager, audio, seed=k).token_ids


def test_export_directory_misuse(tiny, export_dir, tmp_path, capsys, monkeypatch) -> None:
    from wenet_lite.cli import main

    with pytest.raises(ValueError, match=r"exported for chunk 4, left 2, not chunk 8, left 2"):
        open_recognizer(export_dir, Chunking(8, 2))
    code = main(["stream", "--model", str(export_dir), "--left-chunks", "3", "x.wav"])
    err = capsys.readouterr().err
    assert (
        code == 2 and f"{export_dir} was exported for chunk 4, left 2, not chunk 4, left 3" in err
    )
    code = main(["stream", "--model", str(export_dir), "--engine", "onnxruntime", "x.wav"])
    assert (
        code == 2
        and "is for --engine executorch, not --engine onnxruntime" in capsys.readouterr().err
    )
    with pytest.raises(ValueError, match="holds the encoder only"):
        open_recognizer(export_dir, search=SearchOptions(mode="attention_rescoring", beam_size=4))

    broken = tmp_path / "broken"
    shutil.copytree(export_dir, broken)
    (broken / "model.int8.pte").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.int8\.pte: missing"):
        open_recognizer(broken)
    (broken / "model.int8.pte").write_bytes(b"not a program")
    with pytest.raises(ValueError, match=r"model\.int8\.pte.* not an ExecuTorch program"):
        open_recognizer(broken, engine=EngineSpec(precision="int8"))
    # Bytes 4-7 not UTF-8: ExecuTorch's own loader logged them through a hook that aborted
    # the process (exit 134); the identifier is checked first. A subprocess, so an abort
    # fails this test instead of ending the run.
    (broken / "model.pte").write_bytes(b"\x10\0\0\0\xff\xfe\xfd\xfc" + bytes(4096))
    proc = subprocess.run([sys.executable, "-m", "wenet_lite", "stream", "--model", str(broken),
                           str(tmp_path / "x.wav")], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "model.pte is not an ExecuTorch program (its identifier is" in proc.stderr
    (broken / "wenet_lite.json").write_text("{")
    with pytest.raises(ValueError, match=r"wenet_lite\.json: not JSON"):
        open_recognizer(broken)
    (broken / "wenet_lite.json").unlink()
    code = main(["stream", "--model", str(broken), "x.wav"])
    assert code == 1 and "is not a wenet_lite export directory" in capsys.readouterr().err

    with pytest.raises(ValueError, match=r"caches 8 frames; .*needs 12"):
        ExecuTorchEngine(export_dir / "model.pte", Chunking(4, 3))
    monkeypatch.setitem(sys.modules, "executorch.runtime", None)
    with pytest.raises(ImportError, match=r"pip install 'wenet_lite\[executorch\]'"):
        ExecuTorchEngine(export_dir / "model.pte", CHUNKING)


def test_onnx_export_directory_runs_on_onnxruntime(tiny, corpus, tmp_path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    from wenet_lite.cli import main
    from wenet_lite.data.manifest import load_cuts

    out = tmp_path / "onnx"
    flags = ["--chunk-size", "4", "--left-chunks", "2"]
    assert main(["export", "--model", str(tiny.path), "--format", "onnx", "--out", str(out),
                 *flags]) == 0  # fmt: skip
    paths = [str(c.recording.sources[0].source) for c in load_cuts(corpus / "test-clean")[:3]]
    from_dir, last = _finals(capsys, ["stream", "--model", str(out), "--json", *paths])
    assert last["engine"] == "onnxruntime"
    from_file, _ = _finals(capsys, ["stream", "--model", str(tiny.path), "--json", *flags, *paths])
    assert from_dir and [f["text"] for f in from_dir] == [f["text"] for f in from_file]
    code = main(["stream", "--model", str(out), "--int8", *paths])
    assert code == 2 and "not batch-invariant" in capsys.readouterr().err
    program = out / json.loads((out / "wenet_lite.json").read_text())["files"]["model"]
    program.write_bytes(bytes(range(256)) * 8)  # not a graph: one line, not a traceback
    assert main(["stream", "--model", str(out), *paths]) == 1
    assert f"{program} is not an ONNX graph onnxruntime loads" in capsys.readouterr().err


def test_engine_flags_for_executorch(tiny, capsys) -> None:
    from wenet_lite.cli import main

    code = main(["stream", "--model", str(tiny.path), "--engine", "executorch", "--left-chunks",
                 "-1", "x.wav"])  # fmt: skip
    assert code == 2 and "needs a fixed cache: --left-chunks >= 0" in capsys.readouterr().err
    code = main(["stream", "--model", str(tiny.path), "--engine", "onnxruntime", "--int8",
                 "--left-chunks", "2", "x.wav"])  # fmt: skip
    assert code == 2 and "not batch-invariant" in capsys.readouterr().err
