"""bf16 layers: a row's numbers never depend on how many rows share its product, the checks
that choose the rows per product and the subsampling's precision, and ``auto`` by width."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.model import bf16
from wenet_lite.model.bf16 import (
    Bf16Conv,
    Bf16Linear,
    conv_independent,
    row_group,
    rows_independent,
    to_bf16,
)  # fmt: skip
from wenet_lite.model.conformer import FeedForward
from wenet_lite.model.int8 import PerSample
from wenet_lite.model.linear import Linear
from wenet_lite.model.subsampling import Conv2dSubsampling


def _rows(n: int, size: int, seed: int) -> torch.Tensor:
    return torch.randn(n, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rows", [128, 16, 1])
def test_a_row_is_the_same_in_any_call(rows: int) -> None:
    torch.manual_seed(0)
    layer = Bf16Linear(Linear(48, 96), rows=rows)
    assert f"{rows} rows a product" in repr(layer)
    x = _rows(300, 48, 1)  # more rows than one product holds: cut into groups
    whole = layer(x)
    assert whole.dtype == torch.float32 and whole.shape == (300, 96)
    for start, size in ((0, 1), (5, 16), (17, 130), (160, 140)):
        assert torch.equal(layer(x[start : start + size]), whole[start : start + size])
    streams = x[:256].view(16, 16, 48)  # (B, C, I): 16 streams' chunks
    assert torch.equal(layer(streams).view(256, 96), whole[:256])
    # every product has ``rows`` rows: a short call is filled up with zero rows
    short, w = x[:5].to(torch.bfloat16), layer.weight
    if rows > 5:
        expected = (torch.cat([short, short.new_zeros(rows - 5, 48)]) @ w)[:5]
    else:  # one row a product
        expected = torch.cat([short[i : i + 1] @ w for i in range(5)])
    assert torch.equal(bf16.grouped_product(short, w, rows), expected)
    # bf16: the inputs and the output are rounded; close to fp32, not equal to it
    fp32 = x @ layer.weight.float() + layer.bias
    assert not torch.equal(whole, fp32) and (whole - fp32).abs().max() < 0.05 * fp32.abs().max()


def test_the_feed_forward_keeps_its_inner_activations_in_bf16() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(32, 96, 0.1).eval()
    converted = to_bf16(torch.nn.Sequential(ffn))[0]
    inner, outer = converted[0], converted[-1]
    assert inner.bf16_output and not outer.bf16_output and "bf16 output" in repr(inner)
    x = _rows(40, 32, 2)
    assert inner(x).dtype == torch.bfloat16
    out = converted(x)
    assert out.dtype == torch.float32
    # The first layer's product and bias in bf16, SiLU in bf16, then the second layer: bit for
    # bit.
    h = (x.to(torch.bfloat16) @ inner.weight) + inner.bias.to(torch.bfloat16)
    h = torch.nn.functional.silu(h)
    assert torch.equal(out, (h @ outer.weight).float() + outer.bias)
    fp32 = ffn(x)  # and close to fp32's
    assert (out - fp32).abs().max() < 0.05 * fp32.abs().max()
    # A row alone equals it among others (the engine's batched == alone).
    assert all(torch.equal(converted(x[i : i + 1]), out[i : i + 1]) for i in (0, 17, 39))


def test_rows_per_product_are_the_largest_that_keep_rows_independent(monkeypatch) -> None:
    assert rows_independent(64, 32, 128) and rows_independent(64, 32, 1)
    assert row_group(40, 24) == bf16.ROW_GROUPS[0]  # this CPU's kernel: rows independent
    threads = torch.get_num_threads()
    try:  # chosen per thread count too: a kernel may split its sums by threads
        bf16._row_group.cache_clear()
        for count in (1, 2, 1):
            torch.set_num_threads(count)
            row_group(40, 24)
        assert bf16._row_group.cache_info().currsize == 2
    finally:
        torch.set_num_threads(threads)

    # Negative controls: a kernel whose rows from position 40 on come out differently is
    # caught, and the layer then multiplies 32 rows at a time; one where a row depends on the
    # other rows leaves one row a product. One whose numbers depend on how many rows it has is
    # harmless: every product has the same number (the last group is filled with zero rows).
    def from_40(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w  # the real bf16 product
        y[40:] *= 2
        return y

    assert not rows_independent(64, 32, 64, from_40) and rows_independent(64, 32, 32, from_40)

    def any_count(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w) + x.float().abs().sum()

    def by_count(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w) * (2 if x.size(0) >= 40 else 1)

    assert rows_independent(64, 32, 64, by_count)

    # ... and so is a kernel whose rows change when groups are written into one result.
    real_grouped = bf16.grouped_product
    monkeypatch.setattr(
        bf16, "grouped_product", lambda x, w, rows: real_grouped(x, w, rows) * (x.size(0) <= rows)
    )
    assert not rows_independent(64, 32, 32)
    monkeypatch.setattr(bf16, "grouped_product", real_grouped)

    original = bf16.rows_independent
    try:
        for fake, expected in ((from_40, 32), (any_count, 1), (by_count, 128)):
            bf16._row_group.cache_clear()
            monkeypatch.setattr(
                bf16, "rows_independent", lambda i, o, r, f=fake: original(i, o, r, f)
            )
            assert row_group(64, 32) == expected
            assert Bf16Linear(Linear(64, 32)).rows == expected
    finally:
        bf16._row_group.cache_clear()  # no fake choice left for other tests
    with pytest.raises(ValueError, match="rows per product must be >= 1"):
        Bf16Linear(Linear(4, 4), rows=0)


def test_subsampling_runs_bf16_only_where_it_is_batch_invariant() -> None:
    torch.manual_seed(0)
    sub = Conv2dSubsampling(40, 32, 4, 8).eval()
    assert conv_independent(Bf16Conv(sub.conv), sub.rate, 40)  # this CPU's bf16 convolutions
    model = torch.nn.Sequential(sub)
    converted = to_bf16(model)[0]
    assert isinstance(converted.conv, Bf16Conv) and isinstance(converted.out, Bf16Linear)
    # The convolutions hand bf16 to the bf16 output layer: the same numbers as through fp32.
    assert converted.conv.bf16_output
    feats, lens = torch.randn(2, 67, 40), torch.tensor([67, 50])
    out, _ = converted(feats, lens)
    converted.conv.bf16_output = False
    assert torch.equal(converted(feats, lens)[0], out) and out.dtype == torch.float32
    refused = to_bf16(model, conv_check=lambda convs, rate, freq: False)
    assert isinstance(refused[0].conv, PerSample)  # fp32, one sample at a time
    assert refused[0].conv.module[0].weight.dtype == torch.float32
    # The check multiplies the layer's own input bins.
    seen = []
    to_bf16(model, conv_check=lambda convs, rate, freq: seen.append((rate, freq)) or True)
    assert seen == [(4, 40)]
    # bf16 subsampling: a window alone equals it in a batch and cut from a longer input.
    conv = Bf16Conv(sub.conv)
    x = torch.randn(3, 1, 67, 40)
    batch = conv(x)
    assert batch.dtype == torch.float32
    assert all(torch.equal(conv(x[i : i + 1]), batch[i : i + 1]) for i in range(3))


def test_conv_check_catches_a_batch_dependent_convolution() -> None:
    """Negative control: convolutions whose output depends on the batch fail the check."""

    class BatchDependent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) + 1e-2 * x.size(0)

    assert not conv_independent(Bf16Conv(BatchDependent()), 2, 20)

    class LengthDependent(BatchDependent):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) + 1e-2 * (x.size(2) > 100)

    assert not conv_independent(Bf16Conv(LengthDependent()), 2, 20)
    plain = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, 2), torch.nn.ReLU())
    assert conv_independent(Bf16Conv(plain), 2, 20)


def test_auto_picks_bf16_by_the_encoder_width(monkeypatch) -> None:
    from wenet_lite.config import load_config
    from wenet_lite.host.cpu import FLAGS_ENV
    from wenet_lite.model import build_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import EngineSpec, make_engine

    monkeypatch.setenv(FLAGS_ENV, "avx2 avx512f avx512_bf16 amx_bf16")
    for width, engine in ((256, "torch bf16"), (64, "torch")):
        sets = [
            f"encoder.d_model={width}",
            "encoder.ffn_dim=64",
            "encoder.num_blocks=1",
            "encoder.subsampling_channels=8",
        ]
        cfg = load_config("conf/tiny_test.yaml", sets)
        model = build_model(cfg, 10).eval()
        assert make_engine(EngineSpec(), model, Chunking(4, 2)).name == engine
