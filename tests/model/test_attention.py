"""What plot_attention draws is what the layer computes: its score terms and weights give the
layer's own output."""

import math

import torch

from wenet_lite.model.attention import RelPositionAttention
from wenet_lite.model.posenc import XLRelPosition, window_distances


def test_score_terms_reproduce_the_forward_output() -> None:
    torch.manual_seed(0)
    d, h, c, m, b = 16, 4, 5, 7, 2
    attn = RelPositionAttention(d, h).eval()
    rel = XLRelPosition(d, h)
    x = torch.randn(b, c, d)
    cache = torch.randn(b, h, m, 2 * (d // h))
    mask = torch.rand(b, c, m + c) > 0.3
    mask |= torch.cat([torch.zeros(c, m, dtype=torch.bool), torch.eye(c, dtype=torch.bool)], 1)
    i, j, head = 3, m + 1, 2  # a visible pair, spelled out below
    mask[0, i, j] = True
    pos = rel(window_distances(c, m + c, x.device))
    with torch.no_grad():
        out, kv = attn(x, pos, mask, cache)
        content, position, weights = attn.score_terms(x, pos, mask, cache)
        v = kv[..., d // h :]  # (B, H, M+C, d_k)
        again = attn.out((weights @ v).transpose(1, 2).reshape(b, c, d))
    assert (again - out).abs().max() < 1e-5
    assert torch.all(weights[~mask.unsqueeze(1).expand_as(weights)] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(b, h, c))
    # The content term, spelled out for one query/key pair: (q_i + u)·k_j / sqrt(d_k).
    q = attn.qkv(x)[..., :d].view(b, c, h, d // h)  # (B, C, H, d_k)
    k = kv[..., : d // h]
    expected = (q[0, i, head] + attn.pos_bias_u[head]) @ k[0, head, j] / math.sqrt(d // h)
    assert torch.allclose(content[0, head, i, j], expected, atol=1e-5)
    assert torch.isinf(position[~mask.unsqueeze(1).expand_as(position)]).all()


def test_plain_softmax_attention_equals_sdpa() -> None:
    """The export path (matrix products + softmax, -1e30 for hidden keys) gives SDPA's output
    and the same next cache, also for a chunk whose only visible key is a query's own frame."""
    torch.manual_seed(1)
    d, h, c, m, b = 16, 4, 5, 7, 3
    attn = RelPositionAttention(d, h).eval()
    pos = XLRelPosition(d, h)(window_distances(c, m + c, torch.device("cpu")))
    x, cache = torch.randn(b, c, d), torch.randn(b, h, m, 2 * (d // h))
    mask = torch.rand(b, c, m + c) > 0.5
    mask |= torch.cat([torch.zeros(c, m, dtype=torch.bool), torch.eye(c, dtype=torch.bool)], 1)
    mask[2] = torch.cat([torch.zeros(c, m, dtype=torch.bool), torch.eye(c, dtype=torch.bool)], 1)
    with torch.no_grad():
        want, want_kv = attn(x, pos, mask, cache)
        attn.plain_softmax = True
        got, got_kv = attn(x, pos, mask, cache)
    assert (got - want).abs().max() < 1e-5 and torch.equal(got_kv, want_kv)
