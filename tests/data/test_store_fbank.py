"""Stored training fbank (`wenet-lite compute-fbank`): same features, used instead of audio."""

import dataclasses
import logging
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest
import torch
from lhotse import CutSet
from lhotse.audio import AudioSource
from lhotse.utils import fastcopy

from wenet_lite.cli import main
from wenet_lite.config import load_config
from wenet_lite.data import store_fbank as store_module
from wenet_lite.data.dataset import FBANK_FIELD, ASRDataset, utterance_seed
from wenet_lite.data.manifest import load_cuts, save_cuts
from wenet_lite.data.store_fbank import store_fbank, stored_fbank_usable
from wenet_lite.data.tokenizer import Tokenizer

CFG = load_config("conf/tiny_test.yaml")
LAYERS = [(3, 2), (3, 2)]
SEED = 3


def _dataset(tok: Tokenizer, stored: bool, speeds: Tuple[float, ...] = (1.0,)) -> ASRDataset:
    data = dataclasses.replace(CFG.data, speed_perturb=speeds)
    return ASRDataset(CFG.features, data, tok, LAYERS, SEED, train=True, stored_fbank=stored)


def _without_audio(cuts: CutSet) -> CutSet:
    gone = [AudioSource("file", [0], "/nonexistent/audio.flac")]
    return CutSet.from_cuts(
        fastcopy(c, recording=fastcopy(c.recording, sources=gone)) for c in cuts
    )


@pytest.fixture(scope="module")
def tokenizer(synthetic_corpus) -> Tokenizer:
    return Tokenizer.load(synthetic_corpus.tokenizer)


@pytest.fixture
def part(synthetic_corpus, tmp_path: Path) -> Path:
    """Six prepared training utterances in their own part directory."""
    cuts = load_cuts(synthetic_corpus.data / "train-clean-100").subset(first=6)
    save_cuts(cuts, tmp_path / "train" / "cuts.jsonl.gz")
    return tmp_path / "train"


def test_cli_stores_epoch0_features_that_replace_the_audio(part, tokenizer, capsys) -> None:
    before = load_cuts(part)
    assert main(["compute-fbank", "--config", "conf/tiny_test.yaml", "--data", str(part),
                 "--set", f"train.seed={SEED}", "--jobs", "0", "--no-progress"]) == 0  # fmt: skip
    assert "stored fbank of 6 of 6 utterances" in capsys.readouterr().out
    cuts = load_cuts(part)
    assert [c.id for c in cuts] == [c.id for c in before]
    assert all(c.has_custom(FBANK_FIELD) for c in cuts)
    assert stored_fbank_usable(cuts, CFG.features)

    from_audio = _dataset(tokenizer, stored=False)[(0, cuts)]
    stored = _dataset(tokenizer, stored=True)[(0, cuts)]
    assert stored.ids == from_audio.ids and torch.equal(stored.feats_lens, from_audio.feats_lens)
    # the same dither draw as epoch 0 from audio, kept to float16 precision
    assert torch.allclose(stored.feats, from_audio.feats, rtol=1e-3, atol=1e-3)
    assert not torch.equal(stored.feats, from_audio.feats)  # really the float16 copy

    # Without their audio the cuts still train from the stored arrays; from audio they are lost.
    gone = _without_audio(cuts)
    assert torch.equal(_dataset(tokenizer, stored=True)[(0, gone)].feats, stored.feats)
    assert torch.equal(_dataset(tokenizer, stored=True)[(5, gone)].feats, stored.feats)
    lost = _dataset(tokenizer, stored=False)[(0, gone)]
    assert lost.feats.size(0) == 0 and lost.skipped == {"missing_audio": 6}
    # Decoding-style datasets (train=False, no dither) never use them.
    dev = ASRDataset(
        CFG.features, CFG.data, tokenizer, LAYERS, SEED, train=False, stored_fbank=True
    )
    assert dev[(0, gone)].skipped == {"missing_audio": 6}


def test_other_speed_factors_are_computed_from_audio(part, tokenizer) -> None:
    store_fbank(part, CFG.features, SEED, progress=False)
    speeds = (0.9, 1.0, 1.1)
    gone = _without_audio(load_cuts(part))
    for epoch in range(3):
        at_one: List[str] = []
        for cut in gone:
            rng = np.random.default_rng(utterance_seed(SEED, epoch, cut.id, "audio"))
            if speeds[rng.integers(len(speeds))] == 1.0:
                at_one.append(cut.id)
        batch = _dataset(tokenizer, stored=True, speeds=speeds)[(epoch, gone)]
        assert batch.ids == at_one  # only those; the others needed their (missing) audio
        assert batch.skipped.get("missing_audio", 0) == 6 - len(at_one)


def test_unusable_audio_is_counted_and_its_cut_kept(part, salted_cuts) -> None:
    bad, _ = salted_cuts
    cuts = load_cuts(part) + bad.filter(lambda c: c.id in {"bad-missing", "bad-garbage",
                                                           "bad-silent"})  # fmt: skip
    save_cuts(cuts, part / "cuts.jsonl.gz")
    result = store_fbank(part, CFG.features, SEED, progress=False)
    assert result.stored == 6 and result.total == 9
    assert result.skipped == {"missing_audio": 1, "unreadable_audio": 1, "silent_audio": 1}
    kept = load_cuts(part)
    assert sorted(c.id for c in kept) == sorted(c.id for c in cuts)  # no cut dropped
    assert sorted(c.id for c in kept if not c.has_custom(FBANK_FIELD)) == [
        "bad-garbage", "bad-missing", "bad-silent"]  # fmt: skip
    # A cut whose audio became unusable since an earlier run loses its (deleted) array.
    first = next(iter(kept))
    gone = _without_audio(CutSet.from_cuts([first]))
    save_cuts(gone + kept.filter(lambda c: c.id != first.id), part / "cuts.jsonl.gz")
    assert store_fbank(part, CFG.features, SEED, progress=False).stored == 5
    assert not load_cuts(part)[first.id].has_custom(FBANK_FIELD)


def test_arrays_of_other_features_are_not_used(part, caplog) -> None:
    assert not stored_fbank_usable(load_cuts(part), CFG.features)  # nothing stored yet
    store_fbank(part, CFG.features, SEED, progress=False)
    cuts = load_cuts(part)
    other = dataclasses.replace(CFG.features, num_mel_bins=40, dither=0.0)
    with caplog.at_level(logging.WARNING):
        assert not stored_fbank_usable(cuts, other)
    assert "features.dither 1.0 != 0.0" in caplog.text
    assert "features.num_mel_bins 80 != 40" in caplog.text
    (part / "fbank" / "features.json").unlink()
    with caplog.at_level(logging.WARNING):
        assert not stored_fbank_usable(cuts, CFG.features)
    assert "features.json" in caplog.text


def test_a_failed_run_leaves_the_previous_arrays(part, monkeypatch) -> None:
    store_fbank(part, CFG.features, SEED, progress=False)
    manifest = (part / "cuts.jsonl.gz").read_bytes()
    arrays = {p: p.read_bytes() for p in (part / "fbank").rglob("*") if p.is_file()}
    calls = []

    def fail_late(*args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("disk full")
        return real(*args, **kwargs)

    real = store_module.load_features
    monkeypatch.setattr(store_module, "load_features", fail_late)
    with pytest.raises(RuntimeError, match="disk full"):
        store_fbank(part, dataclasses.replace(CFG.features, dither=0.0), SEED, progress=False)
    assert (part / "cuts.jsonl.gz").read_bytes() == manifest
    assert {p: p.read_bytes() for p in (part / "fbank").rglob("*") if p.is_file()} == arrays
    assert sorted(p.name for p in part.iterdir()) == ["cuts.jsonl.gz", "fbank"]


def test_not_a_part_directory(tmp_path: Path, capsys) -> None:
    code = main(["compute-fbank", "--config", "conf/tiny_test.yaml",
                 "--data", str(tmp_path / "nope"), "--no-progress"])  # fmt: skip
    assert code == 1
    assert "nope: not a prepared part directory" in capsys.readouterr().err
