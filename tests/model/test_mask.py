"""Chunk visibility, padding masks and the per-batch dynamic chunk draw."""

import collections

import torch

from wenet_lite.config import ChunkConfig
from wenet_lite.model.mask import attention_mask, chunk_visibility, sample_chunk


def test_chunk_visibility_by_hand() -> None:
    cpu = torch.device("cpu")
    # 5 frames, chunks of 2: [0 1] [2 3] [4]; one left chunk
    expected = torch.tensor(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 0],
            [0, 0, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(chunk_visibility(5, 2, 1, cpu), expected)
    assert torch.equal(chunk_visibility(5, 2, -1, cpu), torch.ones(5, 5).tril().bool() | expected)
    assert chunk_visibility(5, 0, -1, cpu).all()
    assert torch.equal(chunk_visibility(4, 1, 0, cpu), torch.eye(4, dtype=torch.bool))


def test_padding_keys_hidden_but_rows_never_empty() -> None:
    mask = attention_mask(torch.tensor([3, 1]), 4, 2, 0)
    assert mask[0, 3, 3] and not mask[0, :3, 3].any()  # padded key 3 is seen only by itself
    assert not mask[1, 0, 1:].any()  # utterance of length 1 sees only frame 0
    assert mask.any(dim=-1).all()  # every query row has a visible key: no NaN softmax


def test_static_and_full_modes() -> None:
    gen = torch.Generator().manual_seed(0)
    assert sample_chunk(ChunkConfig(mode="full"), gen) == (0, -1)
    assert sample_chunk(ChunkConfig(mode="static", size=8, left_chunks=3), gen) == (8, 3)


def test_dynamic_chunk_distribution() -> None:
    cfg = ChunkConfig(mode="dynamic", full_prob=0.3, max_size=5, left_chunks=-1)
    gen = torch.Generator().manual_seed(0)
    draws = [sample_chunk(cfg, gen) for _ in range(4000)]
    full = sum(1 for c, _ in draws if c == 0)
    assert abs(full / len(draws) - 0.3) < 0.03
    sizes = collections.Counter(c for c, _ in draws if c > 0)
    assert set(sizes) == {1, 2, 3, 4, 5}
    assert max(sizes.values()) / min(sizes.values()) < 1.3  # uniform
    assert {left for _, left in draws} == {-1}
    gen = torch.Generator().manual_seed(0)
    again = [sample_chunk(cfg, gen) for _ in draws]
    assert again == draws  # the whole sequence is reproducible from the generator state


def test_dynamic_random_left_chunks() -> None:
    cfg = ChunkConfig(mode="dynamic", full_prob=0.0, random_left_chunks=True, max_left_chunks=3)
    gen = torch.Generator().manual_seed(1)
    lefts = collections.Counter(sample_chunk(cfg, gen)[1] for _ in range(2000))
    assert set(lefts) == {0, 1, 2, 3}
