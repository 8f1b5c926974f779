"""The offline recogniser (runtime/offline.py) behind the front door: open_recognizer returns it
for full context or a DecodeOptions, it gives `decode`'s hypotheses for each of decode's
modes, and every rule is checked once, before anything loads."""

from __future__ import annotations

import pytest

from wenet_lite.data.manifest import cut_samples, load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.model.chunking import Chunking
from wenet_lite.recognizer import EngineSpec, RuleError, check_rules, open_recognizer
from wenet_lite.runtime.offline import OfflineRecognizer
from wenet_lite.runtime.streaming import StreamingRecognizer
from wenet_lite.search.options import SearchOptions


def test_full_context_chunking_opens_an_offline_recogniser(tiny) -> None:
    assert isinstance(open_recognizer(tiny.path, Chunking(0)), OfflineRecognizer)
    assert isinstance(open_recognizer(tiny.path, Chunking(4, 2)), StreamingRecognizer)
    opts = DecodeOptions(chunking=Chunking(4, 2), simulate_streaming=True)
    assert isinstance(open_recognizer(tiny.path, offline=opts), OfflineRecognizer)


@pytest.mark.parametrize(
    "options",
    [
        DecodeOptions(),
        DecodeOptions(SearchOptions(mode="prefix_beam", beam_size=4), Chunking(4, -1)),
        DecodeOptions(chunking=Chunking(4, 2), simulate_streaming=True),
    ],
    ids=["full context", "chunk-masked beam", "simulated streaming"],
)
def test_recognize_gives_decodes_hypotheses(tiny, corpus, options) -> None:
    cuts = list(load_cuts(corpus / "test-clean"))[:4]
    want = {r.utt_id: r.hyp.tokens for r in
            decode_model(tiny.model, tiny.tokenizer, tiny.cfg, cuts, options).results}  # fmt: skip
    assert any(want.values())
    rec = open_recognizer(tiny.path, offline=options)
    assert isinstance(rec, OfflineRecognizer)
    got = {c.id: rec.recognize(cut_samples(c, 16000), 16000, c.id)[0].tokens for c in cuts}
    assert got == want
    feats = [rec.features(cut_samples(c, 16000), 16000) for c in cuts]
    batched = [h[0].tokens for h in rec.recognize_batch(feats)]
    assert batched == [want[c.id] for c in cuts]


def test_simulated_streaming_on_an_engine_equals_eager(tiny, corpus) -> None:
    pytest.importorskip("onnxruntime")
    cuts = list(load_cuts(corpus / "test-clean"))[:3]
    opts = DecodeOptions(chunking=Chunking(4, 2), simulate_streaming=True)
    eager = open_recognizer(tiny.path, offline=opts)
    onnx = open_recognizer(tiny.path, offline=opts, engine=EngineSpec("onnxruntime"))
    assert eager.engine is None and onnx.engine_name == "onnxruntime"
    for c in cuts:
        samples = cut_samples(c, 16000)
        assert onnx.recognize(samples, 16000)[0].tokens == eager.recognize(samples, 16000)[0].tokens


@pytest.mark.parametrize(
    "chunking, spec, offline, message",
    [
        (Chunking(0), EngineSpec("executorch"), None, 'engine="executorch" runs chunk by chunk'),
        (Chunking(0), EngineSpec(precision="bf16"), None, 'precision="bf16" runs chunk by chunk'),
        (None, EngineSpec("onnxruntime"), DecodeOptions(chunking=Chunking(4, 2)),
         "give simulate_streaming=True"),
        (None, EngineSpec("onnxruntime"),
         DecodeOptions(chunking=Chunking(4, -1), simulate_streaming=True), "left_chunks >= 0"),
        (Chunking(8, 2), EngineSpec(), DecodeOptions(chunking=Chunking(4, 2)), "differ"),
    ],
)  # fmt: skip
def test_rules_are_checked_before_anything_loads(chunking, spec, offline, message) -> None:
    """The source does not exist: the rule, not the missing file, is what is reported."""
    with pytest.raises(RuleError, match=message):
        check_rules("missing.pt", chunking, spec, offline)
    with pytest.raises(RuleError, match=message):
        open_recognizer("missing.pt", chunking, engine=spec, offline=offline)
    # the negative control: the same source with a runnable combination fails on the file
    with pytest.raises(FileNotFoundError):
        open_recognizer("missing.pt", Chunking(0))


def test_an_export_directory_does_not_decode_offline(tmp_path) -> None:
    from wenet_lite.files.export_dir import RECORD_FILE

    (tmp_path / RECORD_FILE).write_text("{}")
    with pytest.raises(ValueError, match="wenet_lite.json|export"):
        open_recognizer(tmp_path, offline=DecodeOptions())


def test_the_offline_recogniser_leaves_a_training_model_training(tiny, test_audio) -> None:
    model = tiny.model.train()
    rec = OfflineRecognizer(model, tiny.tokenizer, tiny.cfg)
    rec.recognize(test_audio[0], 16000)
    assert model.training
    model.eval()
