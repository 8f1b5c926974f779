"""Engines (runtime/engines.py): the onnxruntime engine over the batched graph that torch.export
writes (export/batched.py) gives the torch engine's log-probs and transcripts, keeps a batched
stream equal to the stream alone, and is refused where it cannot run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.runtime.test_streaming import _feed, _stream
from wenet_lite.export.batched import export_batched_onnx
from wenet_lite.model.chunking import Chunking
from wenet_lite.model.state import unstack_state
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.engines import OnnxRuntimeEngine, TorchEngine
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.search.options import SearchOptions

CHUNKING = Chunking(4, 2)


@pytest.fixture(scope="module")
def graph(tiny) -> bytes:
    return export_batched_onnx(tiny.model, CHUNKING)


def _recognizer(tiny, engine, **search) -> StreamingRecognizer:
    return StreamingRecognizer(
        engine or TorchEngine(tiny.model, CHUNKING), tiny.cfg, tiny.tokenizer,
        SearchOptions(**search), endpoint=EndpointConfig(enabled=False), model=tiny.model,
    )  # fmt: skip


def random_chunk_call(model, chunking: Chunking, b: int, gen: torch.Generator):
    """Feature windows, their lengths (the first full) and a state of random caches for one
    chunk of ``b`` streams."""
    enc = model.encoder
    window = enc.subsampling.window_size(chunking.chunk_size)
    state = enc.init_state(b, chunking.chunk_size, chunking.left_chunks)
    state = state._replace(
        att_cache=torch.randn(state.att_cache.shape, generator=gen),
        conv_cache=torch.randn(state.conv_cache.shape, generator=gen),
        cache_len=torch.randint(0, chunking.chunk_size * chunking.left_chunks + 1, (b,),
                                generator=gen),
    )  # fmt: skip
    feats = torch.randn(b, window, enc.cmvn.mean.numel(), generator=gen)
    lens = torch.randint(enc.subsampling.right_context + 1, window + 1, (b,), generator=gen)
    lens[0] = window
    return feats, lens, state


def test_one_chunk_equals_torch_for_any_batch(tiny, graph) -> None:
    ort, eager = OnnxRuntimeEngine(graph, CHUNKING), TorchEngine(tiny.model, CHUNKING)
    gen = torch.Generator().manual_seed(0)
    for b in (1, 3, 7):
        feats, lens, state = random_chunk_call(tiny.model, CHUNKING, b, gen)
        got, got_state = ort.run(feats, lens, state)
        want, want_state = eager.run(feats, lens, state)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-4)
        for a, e in zip(got_state, want_state):
            assert a.shape == e.shape and torch.allclose(a.float(), e.float(), atol=1e-4)


@pytest.mark.parametrize("search", [{}, {"mode": "prefix_beam", "beam_size": 4}])
def test_streamed_transcripts_equal_the_torch_engine(test_audio, tiny, graph, search) -> None:
    ort = _recognizer(tiny, OnnxRuntimeEngine(graph, CHUNKING), **search)
    eager = _recognizer(tiny, None, **search)
    for k, audio in enumerate(test_audio):
        a, b = _stream(ort, audio, seed=k), _stream(eager, audio, seed=k + 1)
        assert a.token_ids and a.token_ids == b.token_ids
        assert a.timestamps == b.timestamps


def test_batched_equals_alone_with_onnxruntime(test_audio, tiny, graph) -> None:
    rec = _recognizer(tiny, OnnxRuntimeEngine(graph, CHUNKING))
    audios = test_audio[:5]
    alone = [_stream(rec, a, seed=20 + k) for k, a in enumerate(audios)]
    streams = [rec.create_stream() for _ in audios]
    feeders = [
        _feed(s, a, np.random.default_rng(k)) for k, (s, a) in enumerate(zip(streams, audios))
    ]
    batch_sizes, step = [], 0
    while not all(s.done for s in streams):
        for k, (s, feeder) in enumerate(zip(streams, feeders)):
            if step >= k and not s.fbank.finished and next(feeder, "end") == "end":
                s.input_finished()
        batch_sizes.append(len(rec.decode_streams(streams)))
        step += 1
    assert max(batch_sizes) > 1
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids and one.token_ids


def test_refusals(tiny, graph, monkeypatch) -> None:
    with pytest.raises(ValueError, match="fixed cache"):
        OnnxRuntimeEngine(graph, Chunking(4, -1))
    with pytest.raises(ValueError, match="not a batched wenet_lite graph"):
        from wenet_lite.export.onnx import export_onnx_model

        sherpa = export_onnx_model(tiny.model, tiny.cfg, tiny.path.parent / "s.onnx", 4, 2)
        OnnxRuntimeEngine(sherpa, CHUNKING)
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"pip install 'wenet_lite\[onnx\]'"):
        OnnxRuntimeEngine(graph, CHUNKING)


def test_stream_cli_with_onnxruntime(tiny, corpus, capsys) -> None:
    from wenet_lite.cli import main
    from wenet_lite.data.manifest import load_cuts

    path = str(load_cuts(corpus / "test-clean")[0].recording.sources[0].source)
    finals = {}
    for engine in ("torch", "onnxruntime"):
        capsys.readouterr()
        flags = ["--chunk-size", "4", "--left-chunks", "2", "--engine", engine, "--json"]
        assert main(["stream", "--model", str(tiny.path), *flags, path]) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if '"final"' in line]
        finals[engine] = lines
    assert finals["torch"] and finals["torch"] == finals["onnxruntime"]
    code = main(["stream", "--model", str(tiny.path), "--engine", "onnxruntime", "--left-chunks",
                 "-1", path])  # fmt: skip
    assert code == 2 and "needs a fixed cache: --left-chunks >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_reduced_precision_is_batch_invariant_and_close_to_fp32(
    test_audio, tiny, precision: str
) -> None:
    from wenet_lite.model.bf16 import Bf16Linear
    from wenet_lite.model.int8 import Int8Linear

    layer = Int8Linear if precision == "int8" else Bf16Linear
    engine = TorchEngine(tiny.model, CHUNKING, precision)
    assert engine.name == f"torch {precision}"
    assert sum(isinstance(m, layer) for m in engine.model.modules()) > 10
    assert not any(isinstance(m, layer) for m in tiny.model.modules())  # a copy
    rec = _recognizer(tiny, engine)
    audios = test_audio[:4]
    alone = [_stream(rec, a, seed=30 + k) for k, a in enumerate(audios)]
    streams = [rec.create_stream() for _ in audios]
    for s, a in zip(streams, audios):
        s.accept_waveform(16000, a)
        s.input_finished()
    sizes = []
    while streams and not all(s.done for s in streams):
        sizes.append(len(rec.decode_streams(streams)))
    assert max(sizes) == len(audios)
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids and one.token_ids
        assert s.result().confidence == pytest.approx(one.confidence, abs=1e-5)
    # Close to fp32: one chunk's log-probs, and most transcripts' tokens.
    eager = TorchEngine(tiny.model, CHUNKING)
    enc = tiny.model.encoder
    state = enc.init_state(2, CHUNKING.chunk_size, CHUNKING.left_chunks)
    window = enc.subsampling.window_size(CHUNKING.chunk_size)
    feats = torch.randn(
        2, window, enc.cmvn.mean.numel(), generator=torch.Generator().manual_seed(1)
    )
    lens = torch.full((2,), window)
    q, f = engine.run(feats, lens, state)[0], eager.run(feats, lens, state)[0]
    assert not torch.equal(q, f)  # it is another precision
    assert (q.argmax(-1) == f.argmax(-1)).float().mean() >= 0.8
    assert (q.exp() - f.exp()).abs().max() < 0.2
    # Each row of a batched call equals that row alone, bit for bit (random caches).
    state = enc.init_state(3, CHUNKING.chunk_size, CHUNKING.left_chunks)
    gen = torch.Generator().manual_seed(2)
    state.att_cache.copy_(torch.randn(state.att_cache.shape, generator=gen))
    state.conv_cache.copy_(torch.randn(state.conv_cache.shape, generator=gen))
    state.cache_len.fill_(state.att_cache.size(3))
    feats = torch.randn(3, window, enc.cmvn.mean.numel(), generator=gen)
    lens = torch.tensor([window, window, window - 5])
    batched = engine.run(feats, lens, state)[0]
    for i, own in enumerate(unstack_state(state)):
        alone = engine.run(feats[i : i + 1], lens[i : i + 1], own)[0]
        assert torch.equal(batched[i : i + 1], alone), i


@pytest.fixture(scope="module")
def demo_sized():
    """The demo recipe's encoder shape (``conf/synthetic_small.yaml``: 144 wide, 64 subsampling
    channels) with random weights: at these shapes oneDNN's fp32 convolution kernels change
    with the batch size on some CPUs (an AMD EPYC with AVX2), where the tiny model's do not."""
    from pathlib import Path

    from wenet_lite.config import load_config
    from wenet_lite.model import build_model

    cfg = load_config(Path(__file__).resolve().parents[2] / "conf" / "synthetic_small.yaml")
    torch.manual_seed(0)
    return build_model(cfg, 200).eval()


def _rows_equal_alone(model, chunking: Chunking, b: int) -> bool:
    engine = TorchEngine(model, chunking)
    feats, lens, state = random_chunk_call(model, chunking, b, torch.Generator().manual_seed(3))
    batched = engine.run(feats, lens, state)[0]
    return all(
        torch.equal(batched[i : i + 1], engine.run(feats[i : i + 1], lens[i : i + 1], own)[0])
        for i, own in enumerate(unstack_state(state))
    )


def test_fp32_rows_of_a_batched_call_equal_each_row_alone(tiny, demo_sized) -> None:
    """The fp32 torch engine gives each stream of a batched chunk its numbers alone, bit for
    bit, for the tiny model and the demo's shapes, 16 streams with random caches."""
    assert _rows_equal_alone(tiny.model, CHUNKING, 5)
    assert _rows_equal_alone(demo_sized, Chunking(16, 4), 16)


def test_batched_convolutions_would_break_it_where_onednn_varies(demo_sized, monkeypatch) -> None:
    """The control: the subsampling's convolutions run on the whole batch (as in training)
    make rows differ from alone, on a CPU where oneDNN's kernels vary with the batch."""
    from wenet_lite.model.subsampling import Conv2dSubsampling

    conv = demo_sized.encoder.subsampling.conv
    x = torch.randn(16, 1, 67, 40, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        batched = conv(x)
        varies = any(not torch.equal(conv(x[i : i + 1])[0], batched[i]) for i in range(16))
    if not varies:
        pytest.skip("oneDNN's fp32 convolutions are batch-invariant on this CPU: no control")
    monkeypatch.setattr(Conv2dSubsampling, "_convolve", lambda self, x: self.conv(x))
    assert not _rows_equal_alone(demo_sized, Chunking(16, 4), 16)


def test_int8_engine_is_the_same_on_every_cpu(tiny, monkeypatch) -> None:
    """The int8 engine's kernel follows the CPU (``_int_mm`` with VNNI/AMX, exact fp32 products
    elsewhere); its log-probs are the same bit for bit."""
    from wenet_lite.model.int8 import KERNEL_ENV

    gen = torch.Generator().manual_seed(3)
    feats, lens, state = random_chunk_call(tiny.model, CHUNKING, 3, gen)
    out = {}
    for kernel in ("fp32", "int_mm"):
        monkeypatch.setenv(KERNEL_ENV, kernel)
        engine = TorchEngine(tiny.model, CHUNKING, "int8")
        assert f"{kernel} kernel" in repr(engine.model)
        out[kernel] = engine.run(feats, lens, state)[0]
    (kernel_fp32, kernel_int_mm) = out.values()
    assert torch.equal(kernel_fp32, kernel_int_mm)
    fp32 = TorchEngine(tiny.model, CHUNKING).run(feats, lens, state)[0]
    assert not torch.equal(kernel_fp32, fp32)


def test_precision_flag_of_stream(tiny, corpus, capsys, monkeypatch) -> None:
    from wenet_lite.cli import main
    from wenet_lite.data.manifest import load_cuts
    from wenet_lite.host.cpu import FLAGS_ENV

    path = str(load_cuts(corpus / "test-clean")[0].recording.sources[0].source)
    model = ["stream", "--model", str(tiny.path)]
    for flags, engine in ((["--precision", "int8"], "torch int8"), (["--int8"], "torch int8"),
                          (["--precision", "bf16"], "torch bf16"), ([], "torch")):  # fmt: skip
        assert main([*model, *flags, "--json", path]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == engine
    monkeypatch.setenv(FLAGS_ENV, "avx2 avx512f amx_bf16")  # a CPU with AMX: auto is bf16 for
    assert main([*model, "--json", path]) == 0  # wide encoders only, not this 32-wide one
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == "torch"
    assert main([*model, "--precision", "bf16", "--json", path]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == "torch bf16"
    assert main([*model, "--precision", "fp32", "--json", path]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == "torch"
    code = main([*model, "--precision", "int8", "--engine", "onnxruntime", path])
    err = capsys.readouterr().err
    assert code == 2 and "--precision int8 runs on --engine torch or --engine executorch" in err
    assert main([*model, "--engine", "onnxruntime", "--left-chunks", "1", "--json", path]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == "onnxruntime"
    monkeypatch.setenv("WENET_LITE_INT8_KERNEL", "int4")  # a bad forced kernel: one line
    assert main([*model, "--precision", "int8", path]) != 0
    err = capsys.readouterr().err
    assert "WENET_LITE_INT8_KERNEL must be one of int_mm, fp32, not 'int4'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["torch", "torch int8", "torch bf16", "onnxruntime"])
def test_decode_simulate_streaming_with_an_engine_equals_its_streams(
    corpus, test_audio, tiny, graph, kind
) -> None:
    from wenet_lite.data.manifest import load_cuts
    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model

    engines = {
        "torch": lambda: TorchEngine(tiny.model, CHUNKING),
        "torch int8": lambda: TorchEngine(tiny.model, CHUNKING, "int8"),
        "torch bf16": lambda: TorchEngine(tiny.model, CHUNKING, "bf16"),
        "onnxruntime": lambda: OnnxRuntimeEngine(graph, CHUNKING),
    }
    cuts = list(load_cuts(corpus / "test-clean"))
    opts = DecodeOptions(SearchOptions(), CHUNKING, simulate_streaming=True, batch_seconds=12)
    engine = engines[kind]()
    decoded = {r.utt_id: r.hyp.tokens for r in decode_model(
        tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts, engine).results}  # fmt: skip
    plain = {r.utt_id: r.hyp.tokens for r in decode_model(
        tiny.model, tiny.tokenizer, tiny.cfg, cuts, opts).results}  # fmt: skip
    rec = _recognizer(tiny, engine)
    for k, (cut, audio) in enumerate(zip(cuts, test_audio)):
        assert _stream(rec, audio, seed=k).token_ids == decoded[cut.id], cut.id
    if kind in ("torch", "onnxruntime"):  # fp32 engines: the eager chunk-by-chunk forward's
        assert decoded == plain


def test_decode_engine_flags(tiny, corpus, tmp_path, capsys) -> None:
    from wenet_lite.cli import main

    base = ["decode", "--model", str(tiny.path), "--data", str(corpus / "test-clean"),
            "--chunk-size", "4", "--left-chunks", "2", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main([*base, "--engine", "onnxruntime"]) == 2
    assert "give --simulate-streaming" in capsys.readouterr().err
    assert main([*base, "--simulate-streaming", "--int8"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (
        summary["settings"]["simulate_streaming"] and summary["settings"]["engine"] == "torch int8"
    )
    assert main([*base, "--precision", "bf16"]) == 2  # the utterance path is fp32 only
    assert "--precision bf16 runs chunk by chunk" in capsys.readouterr().err
    assert main([*base, "--simulate-streaming", "--precision", "bf16"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["settings"]["engine"] == "torch bf16"
    assert main([*base, "--simulate-streaming"]) == 0  # auto: fp32 on a CPU without bf16
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["settings"]["engine"] == "torch"


def test_a_wide_bf16_model_gives_each_stream_its_numbers_alone(tiny) -> None:
    """A 256-wide model (the width from which `auto` picks bf16) with a 2048-wide feed-forward:
    each stream of a batched bf16 chunk equals it alone bit for bit. Its activations are what
    made products of 16 and of 32 rows round differently on an AMX Xeon where random rows
    agreed; every product now has the same number of rows."""
    from tests.tiny_models import TINY
    from wenet_lite.config import load_config
    from wenet_lite.model import build_model
    from wenet_lite.model.state import stack_states, unstack_state

    cfg = load_config(TINY, ["encoder.d_model=256", "encoder.ffn_dim=2048",
                             "encoder.num_blocks=2"])  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg, tiny.tokenizer.vocab_size).eval()
    engine = TorchEngine(model, CHUNKING, "bf16")
    gen = torch.Generator().manual_seed(3)
    feats, lens, state = random_chunk_call(model, CHUNKING, 9, gen)
    out, new_state = engine.run(feats, lens, state)
    rows = unstack_state(new_state)
    for i, one in enumerate(unstack_state(state)):
        alone, alone_state = engine.run(feats[i : i + 1], lens[i : i + 1], stack_states([one]))
        n = int(alone.size(1))
        assert torch.equal(alone[0], out[i, :n]), i
        for a, b in zip(alone_state, rows[i]):
            assert torch.equal(a, b), i


_CUDA = ["torch cuda"] if torch.cuda.is_available() else []


@pytest.mark.parametrize("kind", ["torch", "torch int8", "onnxruntime", *_CUDA])
def test_slots_give_streams_joining_and_leaving_their_results_alone(
    test_audio, tiny, graph, kind
) -> None:
    """Stream states in one pool with a slot each (the default on a GPU; on the CPU when
    asked): streams join at different steps, leave when done (their slots taken by later
    streams, the pool growing past its first size), and each gets the tokens and times it
    gets alone without slots (features and greedy search on the engine's device)."""
    import copy
    import gc

    engines = {
        "torch": lambda: TorchEngine(tiny.model, CHUNKING),
        "torch int8": lambda: TorchEngine(tiny.model, CHUNKING, "int8"),
        "onnxruntime": lambda: OnnxRuntimeEngine(graph, CHUNKING),
        "torch cuda": lambda: TorchEngine(copy.deepcopy(tiny.model).cuda(), CHUNKING),
    }
    engine = engines[kind]()
    assert (_recognizer(tiny, engine).pool is None) == (kind != "torch cuda")  # the default
    alone_rec = StreamingRecognizer(engine, tiny.cfg, tiny.tokenizer, SearchOptions(),
                                    endpoint=EndpointConfig(enabled=False), model=tiny.model,
                                    slots=False)  # fmt: skip
    rec = StreamingRecognizer(engine, tiny.cfg, tiny.tokenizer, SearchOptions(),
                              endpoint=EndpointConfig(enabled=False), model=tiny.model,
                              slots=True)  # fmt: skip
    assert rec.pool is not None and rec.pool.capacity == 8
    audios = [test_audio[k % len(test_audio)] for k in range(12)]
    alone = [_stream(alone_rec, a, seed=40 + k) for k, a in enumerate(audios)]
    streams, feeders, used = [], [], []
    step = 0
    while len(streams) < len(audios) or not all(s.done for s in streams):
        if step % 2 == 0 and len(streams) < len(audios):  # a new stream every other step
            k = len(streams)
            streams.append(rec.create_stream())
            feeders.append(_feed(streams[k], audios[k], np.random.default_rng(k)))
        for s, feeder in zip(streams, feeders):
            if not s.fbank.finished and next(feeder, "end") == "end":
                s.input_finished()
        rec.decode_streams(streams)
        used.append(rec.pool.used)
        step += 1
    for s, one in zip(streams, alone):
        assert s.result().token_ids == one.token_ids and one.token_ids
        assert s.result().timestamps == one.timestamps
    assert max(used) > 1 and rec.pool.used == 0  # every slot free again
    # a stream dropped before its end gives its slot back too
    dropped = rec.create_stream()
    assert rec.pool.used == 1 and dropped.slot is not None
    del dropped
    gc.collect()
    assert rec.pool.used == 0
    more = [rec.create_stream() for _ in range(9)]  # more than the slots: the pool doubles
    assert rec.pool.capacity == 16 and len({s.slot for s in more}) == 9
    # negative control: states not written back to their slots give other tokens
    broken = StreamingRecognizer(engine, tiny.cfg, tiny.tokenizer, SearchOptions(),
                                 endpoint=EndpointConfig(enabled=False), model=tiny.model,
                                 slots=True)  # fmt: skip
    broken.pool.scatter = lambda slots, state: None
    assert _stream(broken, audios[0], seed=40).token_ids != alone[0].token_ids
