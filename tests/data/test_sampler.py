"""BucketingSampler: duration budget, per-epoch shuffling, DDP sharding and exact resume."""

import random
from typing import List

import pytest
from lhotse import CutSet
from lhotse.testing.dummies import dummy_cut

from wenet_lite.data.sampler import BucketingSampler

MAX_SECONDS = 20.0


@pytest.fixture(scope="module")
def cuts() -> CutSet:
    rng = random.Random(0)
    return CutSet.from_cuts(dummy_cut(i, duration=rng.uniform(0.5, 8.0)) for i in range(120))


def _ids(sampler: BucketingSampler) -> List[List[str]]:
    return [[c.id for c in batch] for _, batch in sampler]


def _sampler(cuts: CutSet, world: int = 1, rank: int = 0, shuffle: bool = True):
    return BucketingSampler(cuts, MAX_SECONDS, 4, shuffle, seed=11, world_size=world, rank=rank)


def test_each_epoch_covers_every_cut_once_within_the_budget(cuts: CutSet) -> None:
    sampler = _sampler(cuts)
    epochs = []
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        requests = list(sampler)
        assert all(e == epoch for e, _ in requests)
        assert all(sum(c.duration for c in b) <= MAX_SECONDS for _, b in requests)
        ids = [c.id for _, b in requests for c in b]
        assert sorted(ids) == sorted(c.id for c in cuts)
        assert sampler.num_batches() == len(requests)
        epochs.append(ids)
    assert epochs[0] != epochs[1]  # reshuffled
    sampler.set_epoch(1)
    assert [c for b in _ids(sampler) for c in b] == epochs[0]  # and reproducible


def test_batches_group_similar_durations(cuts: CutSet) -> None:
    durations = {c.id: c.duration for c in cuts}
    spreads = [
        max(durations[i] for i in b) - min(durations[i] for i in b) for b in _ids(_sampler(cuts))
    ]
    assert sum(spreads) / len(spreads) < 2.5  # random batches of 0.5..8 s spread ~5 s


def test_ranks_get_disjoint_shards_of_equal_count(cuts: CutSet) -> None:
    shards = [_ids(_sampler(cuts, world=2, rank=r)) for r in range(2)]
    assert len(shards[0]) == len(shards[1])
    flat = [set(c for b in shard for c in b) for shard in shards]
    assert not flat[0] & flat[1]
    assert flat[0] | flat[1] == {c.id for c in cuts}


def test_resume_continues_after_the_batches_done(cuts: CutSet) -> None:
    full = _sampler(cuts)
    full.set_epoch(3)
    expected = _ids(full)
    resumed = _sampler(cuts)
    resumed.load_state_dict(dict(full.state_dict(batches_done=4)))
    assert resumed.epoch == 3
    assert _ids(resumed) == expected[4:]
    assert _ids(resumed) == expected  # the skip applies once


def test_resume_refuses_another_world_size_or_corpus(cuts: CutSet) -> None:
    state = _sampler(cuts, world=2, rank=0).state_dict(1)
    with pytest.raises(ValueError, match="world_size 2"):
        _sampler(cuts).load_state_dict(state)
    with pytest.raises(ValueError, match="num_cuts"):
        _sampler(cuts.subset(first=10), world=2).load_state_dict(state)


def test_sorted_first_epoch_then_shuffled(cuts: CutSet) -> None:
    sampler = BucketingSampler(cuts, MAX_SECONDS, 4, True, seed=11, sort_first_epoch=True)
    durations = {c.id: c.duration for c in cuts}
    first = _ids(sampler)
    flat = [cid for batch in first for cid in batch]
    assert sorted(flat) == sorted(durations)  # every cut once
    assert [durations[c] for c in flat] == sorted(durations.values())  # shortest first
    assert all(sum(durations[c] for c in b) <= MAX_SECONDS for b in first)
    assert sampler.num_batches() == len(first)
    sampler.set_epoch(2)
    second = [cid for batch in _ids(sampler) for cid in batch]
    assert sorted(second) == sorted(flat) and second != flat
    # DDP: equal counts, disjoint, and resuming epoch 1 replays the same sorted batches
    ranks = [
        _ids(BucketingSampler(cuts, MAX_SECONDS, 4, True, 11, 2, r, sort_first_epoch=True))
        for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1]) == len(first) // 2
    assert not {c for b in ranks[0] for c in b} & {c for b in ranks[1] for c in b}
    resumed = BucketingSampler(cuts, MAX_SECONDS, 4, True, seed=11, sort_first_epoch=True)
    resumed.load_state_dict(sampler.state_dict(0) | {"epoch": 1, "batches_done": 3})
    assert _ids(resumed) == first[3:]
