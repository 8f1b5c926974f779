"""ASRDataset and the cheap filter: every bad kind skipped and counted, augmentation seeded."""

from typing import Dict, List, Tuple

import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import CutSet, MonoCut, Recording, SupervisionSegment

from wenet_lite.config import load_config
from wenet_lite.data.dataset import (
    SKIP_REASONS,
    ASRDataset,
    Batch,
    ctc_min_frames,
    filter_cuts,
    merge_counts,
    spec_augment_batch,
    utterance_seed,
)
from wenet_lite.data.manifest import load_cuts
from wenet_lite.data.tokenizer import Tokenizer
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.model.subsampling import (
    Conv2dSubsampling,
    min_input_frames,
    output_length,
    window_size,
)

CFG = load_config("conf/tiny_test.yaml")
LAYERS = [(3, 2), (3, 2)]  # subsampling by 4


def _dataset(tokenizer: Tokenizer, train: bool, speeds: Tuple[float, ...] = (1.0,)) -> ASRDataset:
    data = CFG.data.__class__(**{**CFG.data.__dict__, "speed_perturb": speeds})
    return ASRDataset(CFG.features, data, tokenizer, LAYERS, seed=3, train=train)


@pytest.fixture(scope="module")
def tokenizer(synthetic_corpus) -> Tokenizer:
    return Tokenizer.load(synthetic_corpus.tokenizer)


@pytest.fixture(scope="module")
def train_cuts(synthetic_corpus) -> CutSet:
    return load_cuts(synthetic_corpus.data / "train-clean-100")


@pytest.mark.parametrize("rate", [4, 6, 8])
def test_frame_rules_match_the_subsampling_module(rate: int) -> None:
    sub = Conv2dSubsampling(80, 8, rate)
    assert min_input_frames(sub.layers) == sub.right_context + 1
    assert output_length(sub.right_context, sub.layers) == 0
    for chunk in (1, 4, 16):
        assert window_size(chunk, sub.layers) == sub.window_size(chunk)
        assert output_length(sub.window_size(chunk), sub.layers) == chunk
    for n in range(0, 60):
        assert output_length(n, sub.layers) == int(sub.output_lengths(torch.tensor([n]))[0])
        if n > sub.right_context:  # what the convolutions really make
            out, _ = sub(torch.zeros(1, n, 80), torch.tensor([n]))
            assert out.size(1) == output_length(n, sub.layers)


def test_ctc_needs_a_blank_between_repeats() -> None:
    assert ctc_min_frames([]) == 0
    assert ctc_min_frames([5, 6, 7]) == 3
    assert ctc_min_frames([5, 5, 6, 6, 6]) == 8


def test_utterance_seed_is_stable_and_distinct() -> None:
    a = utterance_seed(1, 2, "utt", "audio")
    assert a == utterance_seed(1, 2, "utt", "audio") and 0 <= a < 2**63
    variants = [(2, 2, "utt", "audio"), (1, 3, "utt", "audio"), (1, 2, "utu", "audio")]
    others = {utterance_seed(*args) for args in variants + [(1, 2, "utt", "spec")]}
    assert a not in others and len(others) == 4


def _load_all(dataset: ASRDataset, cuts: CutSet, epoch: int = 1) -> Tuple[List[Batch], Dict]:
    batches = [dataset[(epoch, CutSet.from_cuts([c]))] for c in cuts]
    skipped: Dict[str, int] = {}
    for b in batches:
        merge_counts(skipped, b.skipped)
    return batches, skipped


def test_every_bad_kind_is_skipped_and_counted_exactly(salted_cuts, tokenizer, train_cuts) -> None:
    bad, expected = salted_cuts
    mixed = CutSet.from_cuts(list(bad) + list(train_cuts.subset(first=3)))
    kept, cheap = filter_cuts(mixed, tokenizer, CFG.data)
    assert cheap == {"empty_audio": 1, "too_short": 1, "too_long": 1, "empty_text": 2,
                     "no_known_pieces": 1}  # fmt: skip
    batch = _dataset(tokenizer, train=True)[(1, kept)]
    assert merge_counts(dict(cheap), batch.skipped) == expected
    assert set(expected) == set(SKIP_REASONS)
    assert sorted(batch.ids) == sorted(c.id for c in train_cuts.subset(first=3))
    # The dataset also catches the cheap kinds itself (e.g. for a manifest used unfiltered).
    _, unfiltered = _load_all(_dataset(tokenizer, train=False), bad)
    assert unfiltered["empty_text"] == 2 and unfiltered["no_known_pieces"] == 1


def test_batch_is_padded_with_lengths(tokenizer, train_cuts) -> None:
    cuts = train_cuts.subset(first=4)
    batch = _dataset(tokenizer, train=False)[(1, cuts)]
    assert batch.feats.shape == (4, int(batch.feats_lens.max()), 80)
    assert batch.targets.shape == (4, int(batch.target_lens.max()))
    for i, cut in enumerate(cuts):
        assert batch.ids[i] == cut.id
        assert abs(int(batch.feats_lens[i]) - cut.duration * 100) <= 1
        assert batch.targets[i, : batch.target_lens[i]].tolist() == tokenizer.encode(batch.texts[i])
        assert not batch.feats[i, batch.feats_lens[i] :].any()


def test_augmentation_depends_only_on_seed_epoch_and_cut(tokenizer, train_cuts) -> None:
    cuts = list(train_cuts.subset(first=3))
    ds = _dataset(tokenizer, train=True, speeds=(0.9, 1.0, 1.1))
    alone = ds[(1, CutSet.from_cuts([cuts[1]]))]
    together = ds[(1, CutSet.from_cuts(cuts))]
    again = ds[(1, CutSet.from_cuts(cuts))]
    n = int(alone.feats_lens[0])
    assert int(together.feats_lens[1]) == n
    assert torch.equal(together.feats[1, :n], alone.feats[0, :n])  # batch-mates do not matter
    assert torch.equal(together.feats, again.feats)
    later = ds[(2, CutSet.from_cuts(cuts))]
    assert not torch.equal(later.feats, together.feats)  # new epoch, new dither/speed
    clean = _dataset(tokenizer, train=False)[(1, CutSet.from_cuts(cuts))]
    assert torch.equal(
        clean.feats, _dataset(tokenizer, train=False)[(7, CutSet.from_cuts(cuts))].feats
    )


def test_spec_augment_batch_is_per_cut(tokenizer, train_cuts) -> None:
    cuts = list(train_cuts.subset(first=2))
    ds = _dataset(tokenizer, train=False)
    pair = ds[(1, CutSet.from_cuts(cuts))]
    single = ds[(1, CutSet.from_cuts([cuts[1]]))]
    a = spec_augment_batch(pair.feats, pair.feats_lens, pair.ids, CFG.specaug, seed=5, epoch=1)
    b = spec_augment_batch(
        single.feats, single.feats_lens, single.ids, CFG.specaug, seed=5, epoch=1
    )
    n = int(single.feats_lens[0])
    torch.testing.assert_close(a[1, :n], b[0, :n], rtol=0, atol=1e-5)
    assert torch.equal(a[1, :n] != pair.feats[1, :n], b[0, :n] != single.feats[0, :n])
    assert not torch.equal(a, pair.feats)  # something was masked
    longer = int(pair.feats_lens.argmax())
    shorter = 1 - longer
    assert torch.equal(
        a[shorter, pair.feats_lens[shorter] :], pair.feats[shorter, pair.feats_lens[shorter] :]
    )  # padding untouched


def test_any_rate_and_channel_count_and_segments(tokenizer, tmp_path) -> None:
    rng = np.random.default_rng(0)
    stereo = (0.1 * rng.standard_normal((8000 * 3, 2))).astype(np.float32)  # 3 s at 8 kHz
    sf.write(tmp_path / "s.wav", stereo, 8000)
    rec = Recording.from_file(tmp_path / "s.wav")

    def cut(cut_id: str, start: float, duration: float) -> MonoCut:
        sup = SupervisionSegment(cut_id, rec.id, start, duration, text="HELLO THERE")
        return MonoCut(cut_id, start, duration, 0, supervisions=[sup], recording=rec)

    batch = _dataset(tokenizer, train=False)[
        (1, CutSet.from_cuts([cut("w", 0, 3), cut("s", 1, 1)]))
    ]
    assert batch.ids == ["w", "s"] and batch.feats_lens.tolist() == [300, 100]
    # The segment's features are those of its own span of the mixed, resampled signal.
    whole = load_audio(tmp_path / "s.wav", 16000)
    assert whole.shape == (48000,)
    expected = compute_fbank(whole[16000:32000], 16000, CFG.features)
    assert torch.equal(batch.feats[1, :100], expected)
