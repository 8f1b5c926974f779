"""`train --init MODEL.pt`: fine-tuning starts from the model's weights, tokenizer and CMVN
with a fresh optimizer; a config that describes another model fails naming the key; a new
tokenizer re-initialises only the output layers; the result streams exactly."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from lhotse import CutSet

from tests.runtime.test_streaming import _stream
from wenet_lite import load_model
from wenet_lite.config import ConfigError
from wenet_lite.data.manifest import load_cuts, save_cuts
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.audio import load_audio
from wenet_lite.train.trainer import TrainOptions, train

TINY = Path("conf/tiny_test.yaml")
FAST = ("train.max_epochs=100", "data.num_buckets=1", "train.lr=0.005", "train.warmup_steps=5")


def _train(data: Path, exp: Path, *overrides: str, **kwargs):
    kwargs.setdefault("device", "cpu")
    return train(TrainOptions(TINY, data, exp, (*FAST, *overrides), train_parts=("few",),
                              dev_parts=(), progress_bar=False, **kwargs))  # fmt: skip


@pytest.fixture(scope="module")
def few_data(synthetic_corpus, tmp_path_factory) -> Path:
    cuts = load_cuts(synthetic_corpus.data / "train-clean-100")
    data = tmp_path_factory.mktemp("few")
    save_cuts(CutSet.from_cuts(sorted(cuts, key=lambda c: c.duration)[:6]),
              data / "few" / "cuts.jsonl.gz")  # fmt: skip
    (data / "cmvn.json").write_bytes((synthetic_corpus.data / "cmvn.json").read_bytes())
    return data


def _first(result) -> float:
    return sum(result.losses[s] for s in sorted(result.losses)[:3]) / 3


def test_fine_tuning_starts_where_the_model_left_off(synthetic_corpus, few_data, tmp_path,
                                                     caplog) -> None:  # fmt: skip
    tok = synthetic_corpus.tokenizer
    base = _train(few_data, tmp_path / "base", "train.max_steps=40", tokenizer=tok)
    start = tmp_path / "base" / "step_40.pt"
    (few_data / "cmvn.json").rename(few_data / "moved.json")  # the model brings its CMVN
    try:
        tuned = _train(few_data, tmp_path / "tuned", "train.max_steps=20", init=start)
    finally:
        (few_data / "moved.json").rename(few_data / "cmvn.json")
    scratch = _train(few_data, tmp_path / "scratch", "train.max_steps=3", tokenizer=tok)
    # A fresh optimizer and schedule, but the weights of step 40: the first losses are the
    # base run's last ones, far below a run from scratch (the negative control).
    assert sorted(tuned.losses)[0] == 1
    last_base = sum(base.losses[s] for s in sorted(base.losses)[-3:]) / 3
    assert _first(tuned) < 0.5 * _first(scratch)
    assert _first(tuned) < 2 * last_base
    assert tuned.losses[max(tuned.losses)] < _first(tuned)
    assert (tmp_path / "tuned" / "tokenizer.model").read_bytes() == Tokenizer.load(tok).to_bytes()
    model, _, _ = load_model(tmp_path / "tuned" / "step_20.pt")
    original, _, _ = load_model(start)
    assert torch.equal(model.encoder.cmvn.mean, original.encoder.cmvn.mean)
    _streams_exactly(load_model(tmp_path / "tuned" / "step_20.pt"), synthetic_corpus)


def test_init_refuses_another_model_and_renews_output_layers_for_a_new_tokenizer(
    synthetic_corpus, few_data, tmp_path, caplog
) -> None:
    tok = synthetic_corpus.tokenizer
    _train(few_data, tmp_path / "base", "train.max_steps=2", tokenizer=tok)
    start = tmp_path / "base" / "step_2.pt"
    with pytest.raises(ConfigError, match=r"encoder.num_blocks: is 3 but .*step_2.pt"):
        _train(few_data, tmp_path / "other", "encoder.num_blocks=3", init=start)
    # A tokenizer of another size: the model's other weights, new output layers, named.
    texts = [c.supervisions[0].text for c in load_cuts(synthetic_corpus.data / "train-clean-100")]
    from wenet_lite.config import TokenizerConfig

    small = Tokenizer.train(texts, TokenizerConfig(vocab_size=30), tmp_path / "small.model")
    with caplog.at_level(logging.WARNING, logger="wenet_lite.train"):
        result = _train(few_data, tmp_path / "new", "train.max_steps=2", init=start,
                        tokenizer=tmp_path / "small.model")  # fmt: skip
    assert "ctc.proj.weight" in caplog.text and "30 pieces" in caplog.text
    model, tokenizer, _ = load_model(tmp_path / "new" / "step_2.pt")
    assert tokenizer.vocab_size == small.vocab_size == model.ctc.proj.out_features
    assert result.step == 2


def _streams_exactly(loaded, synthetic_corpus, blank_penalty: float = 0.0) -> None:
    """The model streams exactly: streamed (random piece sizes) == simulated, and says
    something (a model fine-tuned for a few steps says it only with a blank penalty)."""
    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.search.options import SearchOptions

    model, tokenizer, cfg = loaded
    cuts = list(load_cuts(synthetic_corpus.data / "test-clean"))[:4]
    chunking = Chunking(4, -1)
    search = SearchOptions(blank_penalty=blank_penalty)
    opts = DecodeOptions(search, chunking, simulate_streaming=True, batch_seconds=12)
    simulated = {r.utt_id: r.hyp.tokens
                 for r in decode_model(model, tokenizer, cfg, cuts, opts).results}  # fmt: skip
    rec = open_recognizer((model, tokenizer, cfg), chunking, search,
                          endpoint=EndpointConfig(enabled=False))  # fmt: skip
    for k, cut in enumerate(cuts):
        audio = load_audio(cut.recording.sources[0].source, 16000).astype(np.float32)
        assert _stream(rec, audio, seed=k).token_ids == simulated[cut.id], cut.id
    assert any(simulated.values())


def test_fine_tuning_an_imported_wenet_model(synthetic_corpus, few_data, tmp_path) -> None:
    """The architecture comes from the imported file (a config of training settings only
    suffices); the loss falls; the result streams exactly; a model key the config sets
    against the file is named."""
    import yaml

    from wenet_lite.wenet.convert import import_wenet

    start = import_wenet(Path("tests/fixtures/wenet/librispeech"), tmp_path / "wenet.pt")
    tiny = yaml.safe_load(TINY.read_text())
    training = tmp_path / "training.yaml"
    training.write_text(yaml.safe_dump({"data": tiny["data"], "train": tiny["train"]}))
    steps = (*FAST, "train.max_steps=25")
    result = train(TrainOptions(training, few_data, tmp_path / "tuned", steps, init=start,
                                train_parts=("few",), dev_parts=(), progress_bar=False,
                                device="cpu"))  # fmt: skip
    assert result.losses[max(result.losses)] < 0.8 * _first(result)
    tuned = load_model(tmp_path / "tuned" / "step_25.pt")
    assert tuned[2].encoder.pos_enc == "wenet" and tuned[2].encoder.d_model == 32
    _streams_exactly(tuned, synthetic_corpus, blank_penalty=4.0)
    with pytest.raises(ConfigError, match=r"encoder.d_model: is 256 but .*wenet.pt"):
        train(TrainOptions(TINY, few_data, tmp_path / "bad", ("encoder.d_model=256",),
                           train_parts=("few",), dev_parts=(), progress_bar=False,
                           device="cpu", init=start))  # fmt: skip


def test_frozen_encoder_layers_keep_their_weights(few_data, synthetic_corpus, tmp_path) -> None:
    """train.freeze_encoder_layers=1: the subsampling and block 1 are the initial model's
    after tuning, block 2 and the head are not; without it block 1 moves too (the control)."""
    tok = synthetic_corpus.tokenizer
    _train(few_data, tmp_path / "base", "train.max_steps=2", tokenizer=tok)
    start = tmp_path / "base" / "step_2.pt"
    _train(few_data, tmp_path / "frozen", "train.max_steps=3", "train.freeze_encoder_layers=1",
           init=start)  # fmt: skip
    _train(few_data, tmp_path / "free", "train.max_steps=3", init=start)
    base = load_model(start)[0].encoder
    frozen = load_model(tmp_path / "frozen" / "step_3.pt")[0].encoder
    free = load_model(tmp_path / "free" / "step_3.pt")[0].encoder

    def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                     b.state_dict().values()))  # fmt: skip

    assert same(frozen.subsampling, base.subsampling) and same(frozen.blocks[0], base.blocks[0])
    assert not same(frozen.blocks[1], base.blocks[1])
    assert not same(free.blocks[0], base.blocks[0]) and not same(free.subsampling, base.subsampling)
    log = (tmp_path / "frozen" / "train.log").read_text()
    assert "frozen: the subsampling and encoder blocks 1-1" in log
    with pytest.raises(ValueError, match="freeze_encoder_layers: 3, but the encoder has 2"):
        _train(few_data, tmp_path / "bad", "train.max_steps=1", "train.freeze_encoder_layers=3",
               init=start)  # fmt: skip
