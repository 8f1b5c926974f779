"""open_recognizer (recognizer.py): one function opens a recogniser from a model file, an
export directory or a model in memory, on each engine, with the results of the old paths
(the same transcripts as the torch engine for fp32), and every rule refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.test_streaming import _stream
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, RuleError, open_recognizer
from wenet_lite.runtime.endpoint import EndpointConfig

CHUNKING = Chunking(4, 2)
NO_ENDPOINT = EndpointConfig(enabled=False)


@pytest.fixture(scope="module")
def onnx_dir(tiny, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnxruntime")
    from wenet_lite.export.onnx import export_onnx

    out = tmp_path_factory.mktemp("onnx") / "dir"
    export_onnx(tiny.path, out, chunk_size=4, left_chunks=2)
    return out


def test_every_source_and_engine_gives_the_torch_transcripts(tiny, test_audio, onnx_dir) -> None:
    want = [_stream(open_recognizer(tiny.path, CHUNKING, endpoint=NO_ENDPOINT), a).token_ids
            for a in test_audio[:3]]  # fmt: skip
    assert any(want)
    in_memory = (tiny.model, tiny.tokenizer, tiny.cfg)
    opened = {
        "model in memory": open_recognizer(in_memory, CHUNKING, endpoint=NO_ENDPOINT),
        "onnxruntime from a model": open_recognizer(
            tiny.path, CHUNKING, endpoint=NO_ENDPOINT, engine=EngineSpec("onnxruntime")
        ),
        "export directory": open_recognizer(onnx_dir, endpoint=NO_ENDPOINT),
    }
    assert opened["export directory"].chunking == CHUNKING  # the directory's own
    for name, rec in opened.items():
        got = [_stream(rec, a).token_ids for a in test_audio[:3]]
        assert got == want, name
    int8 = open_recognizer(tiny.path, CHUNKING, engine=EngineSpec(precision="int8"))
    assert int8.engine.name == "torch int8"


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(kind="onnxruntime", precision="int8"), "onnxruntime's int8 is not batch-invariant"),
        (dict(kind="executorch", precision="bf16"),
         'precision="bf16" runs on engine="torch", not engine="executorch"'),
        (dict(precision="fp16"), 'precision="fp16" is not one of auto, fp32, bf16, int8'),
        (dict(kind="executorch", device="cuda"), 'runs on the CPU: drop device="cuda"'),
        (dict(kind="tensorrt"), 'engine="tensorrt" is not one of torch, onnxruntime, executorch'),
        (dict(threads=0), "threads=0: give an int >= 1"),
    ],
)  # fmt: skip
def test_engine_rules_are_one_line(spec: dict, message: str) -> None:
    """A RuleError (a ValueError) naming the fields, in one line."""
    with pytest.raises(RuleError, match=message) as e:
        EngineSpec(**spec)
    assert "\n" not in str(e.value)


def test_source_rules_are_one_line(tiny, onnx_dir) -> None:
    with pytest.raises(ValueError, match="needs a fixed cache: left_chunks >= 0") as e:
        open_recognizer(tiny.path, Chunking(4, -1), engine=EngineSpec("executorch"))
    assert "\n" not in str(e.value)
    with pytest.raises(
        ValueError, match=f'{onnx_dir} is for engine="onnxruntime", not engine="executorch"'
    ):
        open_recognizer(onnx_dir, engine=EngineSpec("executorch"))
    # the engine rules of EngineSpec, once, for the directory's engine
    with pytest.raises(ValueError, match=f'{onnx_dir} is for engine="onnxruntime": precision='
                       '"int8" runs on .*onnxruntime\'s int8 is not batch-invariant'):  # fmt: skip
        open_recognizer(onnx_dir, engine=EngineSpec(precision="int8"))
    with pytest.raises(ValueError, match='is for engine="onnxruntime": precision="bf16" runs on '
                       'engine="torch", not engine="onnxruntime"'):  # fmt: skip
        open_recognizer(onnx_dir, engine=EngineSpec(precision="bf16"))
    with pytest.raises(ValueError, match='is for engine="onnxruntime": engine="onnxruntime" runs '
                       'on the CPU: drop device="cuda"'):  # fmt: skip
        open_recognizer(onnx_dir, engine=EngineSpec(device="cuda"))
    with pytest.raises(ValueError, match="was exported for"):
        open_recognizer(onnx_dir, Chunking(8, 2))


def test_a_cursor_hands_out_each_final_segment_once(tiny, test_audio) -> None:
    """StreamCursor: the server and `stream`'s printer take new segments through it."""
    import numpy as np

    from wenet_lite.runtime.cursor import StreamCursor

    rec = open_recognizer(tiny.path, CHUNKING, endpoint=EndpointConfig(rule2_min_silence=0.5))
    gap = np.zeros(16000, np.float32)
    stream = rec.create_stream()
    stream.accept_waveform(16000, np.concatenate([test_audio[0], gap, test_audio[1], gap]))
    stream.input_finished()
    rec.decode_until_done([stream])
    assert stream.num_final_results >= 2
    cursor = StreamCursor(stream)
    assert cursor.pending
    first = cursor.new_finals(limit=1)
    rest = cursor.new_finals()
    assert [i for i, _ in first + rest] == list(range(stream.num_final_results))
    assert [r.text for _, r in first + rest] == [r.text for r in stream.final_results]
    assert not cursor.pending and cursor.new_finals() == [] and cursor.taken == len(first + rest)


def test_the_typed_doors_give_their_kind_and_refuse_the_other(tiny, test_audio) -> None:
    """open_streaming gives a StreamingRecognizer and refuses full context; open_offline an
    OfflineRecognizer (full context by default, what `transcribe` runs); as_streaming and
    as_offline tell the kind of either."""
    from wenet_lite.recognizer import as_offline, as_streaming, open_offline, open_streaming
    from wenet_lite.runtime.offline import OfflineRecognizer
    from wenet_lite.runtime.streaming import StreamingRecognizer
    from wenet_lite.transcription import transcribe

    triple = (tiny.model, tiny.tokenizer, tiny.cfg)
    streaming = open_streaming(triple, Chunking(4, -1))
    assert isinstance(streaming, StreamingRecognizer) and streaming.pool is None
    slotted = open_streaming(triple, Chunking(4, 2), slots=True)  # slots through the door
    assert slotted.pool is not None and open_streaming(triple, Chunking(4, 2)).pool is None
    assert as_streaming(streaming) is streaming and as_offline(streaming) is None
    with pytest.raises(RuleError, match="full context, which does not stream: open it with "
                                        "open_offline"):  # fmt: skip
        open_streaming(triple, Chunking(0))
    offline = open_offline(triple)
    assert isinstance(offline, OfflineRecognizer) and not offline.chunking.streaming
    assert as_offline(offline) is offline and as_streaming(offline) is None
    hyp = offline.recognize(test_audio[0], 16000)[0]
    assert offline.result(hyp).text == transcribe(tiny.path, test_audio[0], 16000).text
