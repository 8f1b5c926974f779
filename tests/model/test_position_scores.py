"""The position term via one matmul + shift equals the naive double loop over (i, j)."""

import math

import pytest
import torch

from wenet_lite.model.attention import RelPositionAttention, position_scores
from wenet_lite.model.posenc import ShawRelPosition, XLRelPosition, rel_sinusoid, window_distances

D, H = 16, 2
_SCRIPTED = torch.jit.script(position_scores)


def _pos_module(kind: str, z: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "xl":
        return XLRelPosition(D, H, z)
    return ShawRelPosition(D, H, z)


def _p_of(module: torch.nn.Module, r: int) -> torch.Tensor:
    return module(torch.tensor([r]))[:, 0]  # (H, d_k)


@pytest.mark.parametrize(
    "kind,z", [("xl", 0), ("xl", 3), ("xl", 100), ("shaw", 2), ("shaw", 5), ("shaw", 50)]
)
@pytest.mark.parametrize("m,c", [(0, 1), (0, 5), (3, 1), (4, 4), (10, 3), (7, 6)])
def test_shift_equals_double_loop(kind: str, z: int, m: int, c: int) -> None:
    module = _pos_module(kind, z)
    q_v = torch.randn(2, H, c, D // H)
    num_keys = m + c
    pos = module(window_distances(c, num_keys, torch.device("cpu")))  # (H, W, d_k)
    fast = position_scores(q_v, pos, num_keys)

    slow = torch.empty(2, H, c, num_keys)
    for i in range(c):
        for j in range(num_keys):
            p = _p_of(module, (m + i) - j)  # query i sits at stream position m + i
            slow[:, :, i, j] = (q_v[:, :, i] * p).sum(-1)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    # Scripted (as exported) the shift takes its pad-and-reshape path instead of a view.
    exported = _SCRIPTED(q_v, pos, num_keys)
    torch.testing.assert_close(exported, slow, atol=1e-5, rtol=1e-5)


def test_clipping_shares_embeddings_beyond_radius() -> None:
    module = _pos_module("xl", 3)
    p = module(torch.tensor([3, 4, 50, -3, -9]))
    torch.testing.assert_close(p[:, 0], p[:, 1])
    torch.testing.assert_close(p[:, 0], p[:, 2])
    torch.testing.assert_close(p[:, 3], p[:, 4])
    assert not torch.allclose(p[:, 0], p[:, 3])


def test_sinusoid_formula() -> None:
    r = torch.tensor([-2, 0, 5])
    out = rel_sinusoid(r, 8)
    for row, dist in enumerate(r.tolist()):
        for m in range(4):
            angle = dist / 10000 ** (2 * m / 8)
            assert out[row, 2 * m].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert out[row, 2 * m + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_attention_matches_naive_scores() -> None:
    """The whole layer: [(q+u).k + (q+v).p(i-j)] / sqrt(d_k), masked softmax, weighted values."""
    torch.manual_seed(1)
    attn = RelPositionAttention(D, H).eval()
    rel = XLRelPosition(D, H, 0)
    m, c, d_k = 5, 3, D // H
    x = torch.randn(1, c, D)
    cache = torch.randn(1, H, m, 2 * d_k)
    mask = torch.rand(1, c, m + c) > 0.3
    mask[:, :, m:] |= torch.eye(c, dtype=torch.bool)
    pos = rel(window_distances(c, m + c, torch.device("cpu")))
    out, kv = attn(x, pos, mask, cache)

    q, k, v = attn.qkv(x).view(c, 3, H, d_k).unbind(1)  # each (C, H, d_k)
    keys = torch.cat([cache[0, :, :, :d_k].transpose(0, 1), k])  # (L, H, d_k)
    values = torch.cat([cache[0, :, :, d_k:].transpose(0, 1), v])
    heads = torch.empty(c, H, d_k)
    for h in range(H):
        for i in range(c):
            scores = torch.full((m + c,), float("-inf"))
            for j in range(m + c):
                if mask[0, i, j]:
                    p = rel(torch.tensor([m + i - j]))[h, 0]
                    content = (q[i, h] + attn.pos_bias_u[h]) @ keys[j, h]
                    position = (q[i, h] + attn.pos_bias_v[h]) @ p
                    scores[j] = (content + position) / math.sqrt(d_k)
            heads[i, h] = torch.softmax(scores, 0) @ values[:, h]
    expected = attn.out(heads.reshape(1, c, D))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kv[:, :, :m], cache)
