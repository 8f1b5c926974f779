"""The graph cache (export/cache.py): a model's exported graph is built once and read back at
the next start; anything the graph depends on makes a new entry; ``off``, an unwritable folder
and a damaged file cost only time; the onnxruntime engine of a model file uses it."""

from __future__ import annotations

import logging
import os
import time

import pytest
import torch
from torch import nn

import wenet_lite.export.batched as batched
import wenet_lite.export.cache as cache
from wenet_lite.export.cache import CACHE_ENV, cache_dir, cached_graph, open_cached
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, make_engine


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


class _Builds:
    """A build function that counts its calls."""

    def __init__(self, data: bytes = b"graph") -> None:
        self.calls = 0
        self.data = data

    def __call__(self) -> bytes:
        self.calls += 1
        return self.data


def test_a_graph_is_built_once_and_read_back(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    build, model = _Builds(), _model()
    first = cached_graph("onnx", model, "chunk 16", build)
    second = cached_graph("onnx", model, "chunk 16", build)
    assert build.calls == 1
    assert (first.reused, second.reused) == (False, True)
    assert first.data == second.data == b"graph"
    assert first.path == second.path and first.path.parent == tmp_path / "graphs"
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]  # no parts left


def test_a_killed_writers_temporary_file_is_swept_once_stale(tmp_path, monkeypatch) -> None:
    """Every writer has a temporary name of its own, so one a killed export left is removed by a
    later write once it is a day old; a fresh one (a writer still at work) is left alone."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    stale, fresh = graphs / ".tmp-1-aaaa-old.onnx", graphs / ".tmp-2-bbbb-new.onnx"
    stale.write_bytes(b"half a graph")
    fresh.write_bytes(b"half a graph")
    old = time.time() - 2 * 24 * 3600
    os.utime(stale, (old, old))
    kept = cached_graph("onnx", _model(), "chunk 16", _Builds())
    assert sorted(p.name for p in graphs.iterdir()) == sorted([kept.path.name, fresh.name])


def test_whatever_the_graph_depends_on_makes_a_new_entry(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    build, model = _Builds(), _model()
    cached_graph("onnx", model, "chunk 16", build)
    cached_graph("onnx", _model(), "chunk 16", build)  # the same weights, another object
    assert build.calls == 1
    with torch.no_grad():  # one weight one rounding step away
        w = model[0].weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(1.0))
    cached_graph("onnx", model, "chunk 16", build)
    assert build.calls == 2
    model[1].inplace = True  # a module's setting
    cached_graph("onnx", model, "chunk 16", build)
    assert build.calls == 3
    cached_graph("onnx", model, "chunk 8", build)  # the options
    cached_graph("pte", model, "chunk 8", build)  # the kind of graph
    cached_graph("pte", model, "chunk 8", build, packages=("numpy",))  # its software
    assert build.calls == 6
    cached_graph("pte", model, "chunk 8", build, packages=("numpy",))
    assert build.calls == 6


def test_off_keeps_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() is None
    build = _Builds()
    for _ in range(2):
        assert cached_graph("onnx", _model(), "", build).path is None
    assert build.calls == 2
    assert list(tmp_path.iterdir()) == []


def test_the_default_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "wenet_lite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "wenet_lite"


def test_an_unwritable_folder_costs_only_time(tmp_path, monkeypatch, caplog) -> None:
    in_the_way = tmp_path / "cache"
    in_the_way.write_text("a file where the folder should be")
    monkeypatch.setenv(CACHE_ENV, str(in_the_way))
    build = _Builds()
    with caplog.at_level(logging.WARNING):
        got = cached_graph("onnx", _model(), "", build)
    assert (got.data, got.path, build.calls) == (b"graph", None, 1)
    assert "not kept" in caplog.text and CACHE_ENV in caplog.text


def test_a_damaged_graph_is_exported_again(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    def open_engine(data: bytes) -> str:
        if data != b"graph":
            raise ValueError("not a graph")
        return "engine"

    build, model = _Builds(), _model()
    assert open_cached("onnx", model, "", build, open_engine) == "engine"
    (kept,) = (tmp_path / "graphs").iterdir()
    kept.write_bytes(b"damaged")
    hashed, fingerprint = [], cache.model_fingerprint
    monkeypatch.setattr(cache, "model_fingerprint", lambda m: hashed.append(m) or fingerprint(m))
    with caplog.at_level(logging.WARNING):
        assert open_cached("onnx", model, "", build, open_engine) == "engine"
    assert build.calls == 2 and kept.read_bytes() == b"graph"
    assert len(hashed) == 1  # the retry keeps the entry's name: the weights are hashed once
    assert "does not open" in caplog.text and kept.name in caplog.text
    # a graph just built that does not open is the export's error, raised as it is
    with pytest.raises(ValueError, match="not a graph"):
        open_cached("onnx", model, "other", _Builds(b"bad"), open_engine)


def test_the_onnxruntime_engine_of_a_model_exports_it_once(tiny, tmp_path, monkeypatch) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    real, calls = batched.export_batched_onnx, []

    def counted(model, chunking):  # noqa: ANN001, ANN202
        calls.append(chunking)
        return real(model, chunking)

    monkeypatch.setattr(batched, "export_batched_onnx", counted)
    chunking = Chunking(4, 2)
    spec = EngineSpec(kind="onnxruntime", precision="fp32")
    fresh = make_engine(spec, tiny.model, chunking)
    kept = make_engine(spec, tiny.model, chunking)
    assert len(calls) == 1
    enc = tiny.model.encoder
    window = enc.subsampling.window_size(chunking.chunk_size)
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(3, window, enc.cmvn.mean.numel(), generator=gen)
    lens = torch.full((3,), window, dtype=torch.long)
    a, _ = fresh.run(feats, lens, fresh.init_state(3))
    b, _ = kept.run(feats, lens, kept.init_state(3))
    assert torch.equal(a, b)
    make_engine(spec, tiny.model, Chunking(4, 1))  # another chunking: another graph
    assert len(calls) == 2
