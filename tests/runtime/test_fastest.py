"""``engine="auto"`` (runtime/fastest.py): the candidates it compares, the fastest one chosen
once, broken candidates left out by name, and a recogniser on the chosen engine that streams as
that engine named explicitly does."""

from __future__ import annotations

import logging
import sys

import pytest

import wenet_lite.runtime.fastest as fastest_module
from tests.runtime.test_streaming import _stream
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, RuleError, check_rules, open_streaming
from wenet_lite.runtime.endpoint import EndpointConfig
from wenet_lite.runtime.fastest import candidate_kinds, fastest

CHUNKING = Chunking(4, 2)


class _Fake:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_fastest_candidate_is_chosen_and_a_broken_one_named(caplog) -> None:
    times = {"a": 0.3, "b": 0.1, "c": 0.2}

    def broken():
        raise ValueError("cannot export this\nsecond line")

    found = [(n, lambda n=n: _Fake(n)) for n in times] + [("d", broken)]
    with caplog.at_level(logging.INFO, logger=fastest_module.__name__):
        chosen = fastest(found, lambda e: times[e.name])
    assert chosen.name == "b"
    assert "d left out: cannot export this" in caplog.text
    said = caplog.text  # each candidate announced before its build, which may take a while
    assert said.index("building and timing a (exported first") < said.index("b runs")
    assert said.index("building and timing d") < said.index("d left out")
    assert "second line" not in caplog.text
    assert "a 300.0 ms, b 100.0 ms, c 200.0 ms: b runs" in caplog.text
    with pytest.raises(RuntimeError, match="no engine could run the model: d"):
        fastest([("d", broken)], lambda e: 0.0)


def test_candidates_follow_precision_cache_and_what_is_installed(monkeypatch) -> None:
    pytest.importorskip("onnxruntime")
    assert candidate_kinds(CHUNKING, "fp32", "cpu") == ["torch", "onnxruntime"]
    assert candidate_kinds(CHUNKING, "int8", "cpu") == ["torch"]
    assert candidate_kinds(CHUNKING, "bf16", "cpu") == ["torch"]
    assert candidate_kinds(Chunking(4, -1), "fp32", "cpu") == ["torch"]  # a growing cache
    assert candidate_kinds(CHUNKING, "fp32", "cuda") == ["torch"]
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed
    assert candidate_kinds(CHUNKING, "fp32", "cpu") == ["torch"]


@pytest.mark.parametrize("winner", ["torch", "onnxruntime"])
def test_auto_streams_as_the_engine_it_chose(tiny, test_audio, monkeypatch, winner) -> None:
    """Whichever engine times faster runs every step, and the streams' tokens and times are
    that engine's when named explicitly (the timing is rigged to choose each in turn)."""
    pytest.importorskip("onnxruntime")
    timed = []

    def rigged(engine, window, feat_dim):
        timed.append(engine.name)
        return 0.1 if engine.name == winner else 0.2

    monkeypatch.setattr(fastest_module, "step_seconds", rigged)
    source = (tiny.model, tiny.tokenizer, tiny.cfg)
    no_end = EndpointConfig(enabled=False)
    auto = open_streaming(source, CHUNKING, endpoint=no_end, engine=EngineSpec("auto", "fp32"))
    assert timed == ["torch", "onnxruntime"] and auto.engine.name == winner
    named = open_streaming(source, CHUNKING, endpoint=no_end, engine=EngineSpec(winner, "fp32"))
    for k, audio in enumerate(test_audio[:2]):
        a, b = _stream(auto, audio, seed=k), _stream(named, audio, seed=k + 7)
        assert a.token_ids and a.token_ids == b.token_ids and a.timestamps == b.timestamps


def test_auto_times_nothing_where_one_engine_can_run(tiny, monkeypatch) -> None:
    monkeypatch.setattr(fastest_module, "step_seconds", lambda *a: pytest.fail("timed"))
    source = (tiny.model, tiny.tokenizer, tiny.cfg)
    rec = open_streaming(source, Chunking(4, -1), engine=EngineSpec("auto", "fp32"))
    assert rec.engine.name == "torch"
    rec = open_streaming(source, CHUNKING, engine=EngineSpec("auto", "int8"))
    assert rec.engine.name == "torch int8"


def test_auto_is_a_known_engine_and_others_are_refused() -> None:
    assert check_rules("model.pt", Chunking(4, -1), EngineSpec("auto")) == Chunking(4, -1)
    with pytest.raises(
        RuleError, match='"fastest" is not one of torch, onnxruntime, executorch, auto'
    ):
        EngineSpec("fastest")
