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


# ---- parts mixed by weight ----


def _mixed(cuts: CutSet, weights, shuffle: bool = True, world: int = 1, rank: int = 0):
    """The first 100 cuts are part "big", the last 20 part "small"."""
    from wenet_lite.data.sampler import Mix

    part_of = {c.id: ("big" if i < 100 else "small") for i, c in enumerate(cuts)}
    mix = Mix(dict(zip(("big", "small"), weights)), part_of)
    return BucketingSampler(cuts, MAX_SECONDS, 4, shuffle, seed=11, world_size=world, rank=rank,
                            mix=mix)  # fmt: skip


def test_an_epoch_draws_the_parts_by_weight(cuts: CutSet) -> None:
    sampler = _mixed(cuts, (0.5, 0.5))  # 20 of 120 utterances weighted as much as 100
    small = {c.id for i, c in enumerate(cuts) if i >= 100}
    assert sampler.shares == {"big": 60, "small": 60}
    seen_big = set()
    for epoch in (1, 2, 3):
        sampler.set_epoch(epoch)
        ids = [c for b in _ids(sampler) for c in b]
        assert len(ids) == 120 and sum(i in small for i in ids) == 60  # the weights, exactly
        counts = {i: ids.count(i) for i in small}
        assert set(counts.values()) == {3}  # the small part passed through 3 times, whole
        seen_big.update(i for i in ids if i not in small)
        if epoch == 2:  # two epochs of 60 pass through the big part 1.2 times: all seen
            assert len(seen_big) == 100
    # without the mix the same epoch is the concatenation: 20 of 120 from the small part
    plain = [c for b in _ids(_sampler(cuts)) for c in b]
    assert sum(i in small for i in plain) == 20


def test_shares_round_to_the_total_and_keep_every_part() -> None:
    from wenet_lite.data.sampler import Mix

    mix = Mix({"a": 0.7, "b": 0.3, "c": 1e-6}, {})
    shares = mix.shares({"a": 5, "b": 5, "c": 5}, 101)
    assert sum(shares.values()) == 101 and shares["c"] == 1 and shares["a"] == 70
    with pytest.raises(ValueError, match="part\\(s\\) b have no usable utterances"):
        mix.shares({"a": 5, "c": 1}, 10)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="'a': weight must be a number > 0"):
            Mix({"a": bad}, {})
    # weights whose sum overflows, and ones near the smallest float, split as their ratios say
    assert Mix({"a": 1e308, "b": 1e308}, {}).shares({"a": 5, "b": 5}, 10) == {"a": 5, "b": 5}
    assert Mix({"a": 3e-320, "b": 1e-320}, {}).shares({"a": 5, "b": 5}, 8) == {"a": 6, "b": 2}


def test_a_mixed_epoch_is_reproducible_sharded_and_resumable(cuts: CutSet) -> None:
    a, b = _mixed(cuts, (0.7, 0.3)), _mixed(cuts, (0.7, 0.3))
    a.set_epoch(3)
    b.set_epoch(3)
    epoch = _ids(a)
    assert epoch == _ids(b)
    ranks = [_ids(_mixed(cuts, (0.7, 0.3), world=2, rank=r)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    small = {c for i, c in enumerate(cuts.ids) if i >= 100}
    shared = {c for x in ranks[0] for c in x} & {c for x in ranks[1] for c in x}
    assert not shared - small  # only the repeated small part's utterances recur
    state = a.state_dict(batches_done=2)
    assert state["mix"] == {"big": 0.7, "small": 0.3}
    resumed = _mixed(cuts, (0.7, 0.3))
    resumed.load_state_dict(state)
    assert _ids(resumed) == epoch[2:]
    with pytest.raises(ValueError, match="mixed parts"):
        _mixed(cuts, (0.5, 0.5)).load_state_dict(state)
    with pytest.raises(ValueError, match="mixed parts"):
        _sampler(cuts).load_state_dict(state)
