"""Fine-tuning without forgetting: a model that knows one voice family (espeak-ng), tuned on
the other (flite), keeps its WER on the first far better when the first is mixed back in by
weight (``--train-part new=0.5,old=0.5``) than when tuned on the new voices alone."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch
from lhotse import CutSet

from wenet_lite import load_model
from wenet_lite.data.dataset import ASRDataset
from wenet_lite.data.manifest import load_cuts, save_cuts
from wenet_lite.data.shar_writer import write_shards
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.evaluation.wer import sum_counts, word_errors
from wenet_lite.search.ctc_search import ctc_greedy_search
from wenet_lite.train.trainer import TrainOptions, train

TINY = Path("conf/tiny_test.yaml")
FLITE_SPEAKERS = 180  # make_synthetic_librispeech.py: speakers 100-179 espeak-ng, 180- flite
COMMON = ("data.num_buckets=1", "train.warmup_steps=5", "train.keep_checkpoints=1")

pytestmark = pytest.mark.slow


def _wer(model_file: Path, cuts: CutSet) -> float:
    model, tokenizer, cfg = load_model(model_file)
    layers = model.encoder.subsampling.layers
    batch = ASRDataset(cfg.features, cfg.data, tokenizer, layers, 0, train=False)[(1, cuts)]
    with torch.no_grad():
        log_probs, lens = model.ctc_log_probs(batch.feats, batch.feats_lens)
    hyps = [tokenizer.decode(h.tokens) for h in ctc_greedy_search(log_probs, lens)]
    return sum_counts(word_errors(normalize_text(r), h) for r, h in zip(batch.texts, hyps)).rate


def _newest(exp: Path) -> Path:
    return max(exp.glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def test_mixing_the_old_data_back_in_keeps_its_wer(synthetic_corpus, tmp_path) -> None:
    cuts = sorted(load_cuts(synthetic_corpus.data / "train-clean-100"), key=lambda c: c.duration)
    old = [c for c in cuts if int(c.id.split("-")[0]) < FLITE_SPEAKERS][:6]
    new = [c for c in cuts if int(c.id.split("-")[0]) >= FLITE_SPEAKERS][:6]
    data = tmp_path / "data"
    write_shards(old, data / "old", 3, progress=False)  # the old domain as shards,
    save_cuts(CutSet.from_cuts(new), data / "new" / "cuts.jsonl.gz")  # the new one local
    (data / "cmvn.json").write_bytes((synthetic_corpus.data / "cmvn.json").read_bytes())

    def run(exp: Path, parts: tuple, *sets: str, **kwargs) -> Path:
        tok = synthetic_corpus.tokenizer
        train(TrainOptions(TINY, data, exp, (*COMMON, *sets), parts, (), progress_bar=False,
                           device="cpu", tokenizer=tok, **kwargs))  # fmt: skip
        return _newest(exp)

    base = run(tmp_path / "base", ("old",), "train.max_epochs=100", "train.lr=0.005")
    tune = ("train.max_epochs=40", "train.lr=0.003")
    alone = run(tmp_path / "alone", ("new",), *tune, init=base)
    mixed = run(tmp_path / "mixed", ("new", "old"), *tune, init=base, train_weights=(0.5, 0.5))
    old_set, new_set = CutSet.from_cuts(old), CutSet.from_cuts(new)
    wer: List[float] = [_wer(m, old_set) for m in (base, alone, mixed)]
    new_wer = (_wer(alone, new_set), _wer(mixed, new_set))
    print(f"old-voice WER: base {wer[0]:.2f}, tuned alone {wer[1]:.2f}, mixed {wer[2]:.2f}; "
          f"new-voice WER: alone {new_wer[0]:.2f}, mixed {new_wer[1]:.2f}")  # fmt: skip
    assert wer[0] <= 0.25  # the base model knows the old voices
    assert wer[1] >= wer[0] + 0.2  # tuned on the new voices alone, it forgets them
    assert abs(wer[2] - wer[0]) < abs(wer[1] - wer[0])  # mixed, it stays closer to the base
