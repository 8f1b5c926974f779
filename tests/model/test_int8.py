"""The int8 layers' two integer kernels (model/int8.py): ``torch._int_mm`` and exact fp32
products give the same numbers bit for bit, so the int8 engine's transcripts do not depend on
the CPU it runs on; the fp32 kernel's blocks are what make it exact."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.host.cpu import FLAGS_ENV
from wenet_lite.model.int8 import (
    EXACT_BLOCK,
    KERNEL_ENV,
    Int8Linear,
    default_kernel,
    exact_int_product,
    quantize_int8,
)
from wenet_lite.model.linear import Linear


@pytest.mark.parametrize("features", [(256, 1024), (1024, 256), (2048, 256), (3000, 64)])
def test_kernels_give_the_same_numbers(features) -> None:
    torch.manual_seed(0)
    layer = Linear(*features)
    int_mm, fp32 = Int8Linear(layer, "int_mm"), Int8Linear(layer, "fp32")
    assert fp32.weight_f is not None and int_mm.weight_f is None
    for rows in (1, 5, 64):
        x = torch.randn(2, rows, features[0]) * 4
        x[0, 0, :7] = 100.0  # one large value per row sets the row's scale
        a, b = int_mm(x), fp32(x)
        assert a.shape == (2, rows, features[1])
        assert torch.equal(a, b), rows
        assert (a - layer(x)).abs().max() < 0.1 * layer(x).abs().max()  # int8 of the layer
    # Only the quantised weights are saved: the fp32 kernel's copy is made again on loading.
    assert set(fp32.state_dict()) == set(int_mm.state_dict()) == {
        "weight_q", "weight_scale", "bias",
    }  # fmt: skip
    other = Int8Linear(Linear(*features), "fp32")  # other weights, loaded from int_mm's
    other.load_state_dict(int_mm.state_dict())
    assert torch.equal(other(x), int_mm(x))


def test_blocks_keep_large_sums_exact() -> None:
    gen = torch.Generator().manual_seed(1)
    size = 4 * EXACT_BLOCK  # sums of 4096 products of ~110 x ~110: far above 2^24
    q = torch.randint(90, 128, (32, size), generator=gen).float()
    w = torch.randint(90, 128, (size, 64), generator=gen).float()
    exact = torch._int_mm(q.to(torch.int8), w.to(torch.int8)).float()
    assert torch.equal(exact_int_product(q, w), exact)
    assert torch.equal(exact_int_product(-q, w), -exact)
    # Negative control: summed in one fp32 block the large partial sums round.
    assert not torch.equal(exact_int_product(q, w, block=size), exact)


def test_the_cpu_picks_the_kernel(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    import wenet_lite.model.int8 as int8

    layer = torch.nn.Sequential(Linear(8, 8))
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    monkeypatch.setenv(FLAGS_ENV, "avx2 fma")  # no VNNI: fp32, nothing timed
    monkeypatch.setattr(int8, "_int_mm_speed", lambda: pytest.fail("timed without VNNI"))
    monkeypatch.setattr(int8, "_int_mm_pays", int8._int_mm_pays.__wrapped__)  # uncached
    assert default_kernel() == "fp32" and "fp32 kernel" in repr(quantize_int8(layer))
    monkeypatch.setenv(FLAGS_ENV, "avx2 avx512f avx512_vnni amx_int8")
    monkeypatch.setattr(int8, "_int_mm_speed", lambda: (1e-5, 4e-5))  # _int_mm the faster
    assert default_kernel() == "int_mm" and "int_mm kernel" in repr(quantize_int8(layer))
    assert "fp32 kernel" in repr(quantize_int8(layer, "fp32"))
    monkeypatch.setattr(int8, "_int_mm_speed", lambda: (9e-4, 4e-5))  # a torch without one
    with caplog.at_level("WARNING", logger="wenet_lite.model.int8"):
        assert default_kernel() == "fp32"
    assert "torch._int_mm is slower than the fp32 product" in caplog.text
    monkeypatch.setenv(KERNEL_ENV, "int_mm")  # forced
    assert default_kernel() == "int_mm"
    monkeypatch.setenv(KERNEL_ENV, "int4")
    with pytest.raises(ValueError, match="WENET_LITE_INT8_KERNEL must be one of int_mm, fp32"):
        default_kernel()
    with pytest.raises(ValueError, match="int8 kernel must be one of"):
        Int8Linear(Linear(8, 8), "int4")


def test_the_timing_measures_both_products() -> None:
    from wenet_lite.model.int8 import _int_mm_speed

    int_mm_s, fp32_s = _int_mm_speed()
    assert 0 < int_mm_s < 10 and 0 < fp32_s < 10
    assert _int_mm_speed() == (int_mm_s, fp32_s)  # once per process
