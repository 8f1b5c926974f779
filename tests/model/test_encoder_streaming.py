"""Streaming is exact: chunk by chunk with caches equals the chunk-masked full forward."""

import io

import pytest
import torch

from wenet_lite.model.conformer import ConformerEncoder

F_DIM = 20


def _encoder(**kw) -> ConformerEncoder:
    torch.manual_seed(0)
    args = dict(d_model=32, num_heads=4, ffn_dim=64, num_blocks=2, conv_kernel=5, dropout=0.0)
    args.update(kw)
    enc = ConformerEncoder(F_DIM, **args).eval()
    with torch.no_grad():  # non-trivial CMVN so the buffers are exercised
        enc.cmvn.mean.normal_()
        enc.cmvn.istd.uniform_(0.5, 2.0)
    return enc


def _max_valid_diff(a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor) -> float:
    return max((a[i, :n] - b[i, :n]).abs().max().item() for i, n in enumerate(lens.tolist()))


@pytest.mark.parametrize("pos_enc,z", [("xl", 0), ("xl", 6), ("shaw", 8)])
@pytest.mark.parametrize("chunk", [1, 4, 16])
@pytest.mark.parametrize("left", [-1, 0, 2])
def test_chunk_by_chunk_equals_masked_forward(pos_enc: str, z: int, chunk: int, left: int) -> None:
    enc = _encoder(pos_enc=pos_enc, max_rel_dist=z)
    torch.manual_seed(1)
    feats = torch.randn(3, 203, F_DIM)
    lens = torch.tensor([203, 131, 37])
    with torch.no_grad():
        full, out_lens = enc(feats, lens, chunk, left)
        streamed = enc.forward_chunk_by_chunk(feats, chunk, left, lens)
        single, _ = enc(feats[1:2, :131], lens[1:2], chunk, left)
        single_streamed = enc.forward_chunk_by_chunk(feats[1:2, :131], chunk, left)
    assert streamed.shape == full.shape
    assert _max_valid_diff(full, streamed, out_lens) <= 1e-5
    # batch 1, no padding at all, and the padded batch agrees with the utterance alone
    assert (single - single_streamed).abs().max().item() <= 1e-5
    assert (single[0] - full[1, : out_lens[1]]).abs().max().item() <= 1e-5


def test_chunk_mask_changes_output() -> None:
    """Guards the test above: chunked and full context must actually differ."""
    enc = _encoder()
    feats = torch.randn(1, 120, F_DIM)
    lens = torch.tensor([120])
    with torch.no_grad():
        full, _ = enc(feats, lens)
        chunked, _ = enc(feats, lens, 4, 0)
    assert (full - chunked).abs().max().item() > 1e-3


def test_batchnorm_conv_streams_exactly() -> None:
    enc = _encoder(conv_norm="batch_norm")
    feats = torch.randn(2, 90, F_DIM)
    lens = torch.tensor([90, 61])
    with torch.no_grad():
        full, out_lens = enc(feats, lens, 4, 1)
        streamed = enc.forward_chunk_by_chunk(feats, 4, 1, lens)
    assert _max_valid_diff(full, streamed, out_lens) <= 1e-5


def test_final_norm_and_norm_eps_stream_exactly_and_change_the_output() -> None:
    """WeNet's options (a LayerNorm after the last block, every LayerNorm at eps 1e-12) keep
    streaming exact and are really applied (the output differs from the default's)."""
    feats = torch.randn(2, 90, F_DIM, generator=torch.Generator().manual_seed(2))
    lens = torch.tensor([90, 61])
    outs = {}
    for name, kw in {"plain": {}, "final": {"final_norm": True},
                     "eps": {"final_norm": True, "norm_eps": 1e-12}}.items():  # fmt: skip
        enc = _encoder(**kw)
        with torch.no_grad():
            if kw:  # an affine of its own, as a trained final norm has
                enc.final_norm.weight.uniform_(0.5, 1.5)
                enc.final_norm.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
            full, out_lens = enc(feats, lens, 4, 1)
            streamed = enc.forward_chunk_by_chunk(feats, 4, 1, lens)
        assert _max_valid_diff(full, streamed, out_lens) <= 1e-5, name
        outs[name] = full
    assert isinstance(_encoder().final_norm, torch.nn.Identity)  # no new keys by default
    assert (outs["final"] - outs["plain"]).abs().max() > 0.1
    assert (outs["final"] - outs["eps"]).abs().max() > 0


def test_wenet_conv_pad_is_zero_block_inputs_before_the_stream() -> None:
    """``conv_pad: wenet``: the causal conv sees, before the first frame, what zero inputs of
    the block would give (WeNet pads before the pointwise conv): the conv module on the input
    with K-1 zero frames in front, minus those frames (the oracle). Zero padding differs (the
    negative control)."""
    from wenet_lite.model.convolution import ConvModule

    torch.manual_seed(3)
    wenet = ConvModule(16, 5, True, "layer_norm", pad="wenet").eval()
    zero = ConvModule(16, 5, True, "layer_norm").eval()
    zero.load_state_dict(wenet.state_dict())
    with torch.no_grad():
        wenet.pointwise_in.bias.normal_()  # a bias that matters
        zero.pointwise_in.bias.copy_(wenet.pointwise_in.bias)
        x = torch.randn(2, 9, 16)
        valid = torch.ones(2, 9, dtype=torch.bool)
        cache = torch.zeros(2, 16, 4)
        nothing = torch.zeros(2, 1, 4, dtype=torch.bool)
        ours, _ = wenet(x, valid, cache, nothing)
        padded = torch.cat([torch.zeros(2, 4, 16), x], dim=1)
        oracle, _ = zero(padded, torch.ones(2, 13, dtype=torch.bool), cache)
        plain, _ = zero(x, valid, cache)
    assert (ours - oracle[:, 4:]).abs().max() < 1e-5
    assert (ours - plain).abs().max() > 1e-2


@pytest.mark.parametrize("chunk,left", [(4, -1), (4, 2), (1, 4)])
def test_wenet_conv_pad_streams_exactly(chunk: int, left: int) -> None:
    enc = _encoder(conv_pad="wenet")
    plain = _encoder()
    with torch.no_grad():
        for block in enc.blocks:
            block.conv.pointwise_in.bias.normal_()
        plain.load_state_dict(enc.state_dict())
    feats = torch.randn(2, 90, F_DIM, generator=torch.Generator().manual_seed(4))
    lens = torch.tensor([90, 61])
    with torch.no_grad():
        full, out_lens = enc(feats, lens, chunk, left)
        streamed = enc.forward_chunk_by_chunk(feats, chunk, left, lens)
        other, _ = plain(feats, lens, chunk, left)
    assert _max_valid_diff(full, streamed, out_lens) <= 1e-5
    assert (full - other).abs().max() > 1e-3
    torch.jit.script(enc)  # the exports script or export this path


def test_wenet_conv_pad_needs_k_minus_1_cached_frames() -> None:
    from wenet_lite.config import load_config
    from wenet_lite.model.chunking import Chunking, check_chunking

    cfg = load_config("conf/tiny_test.yaml", ["encoder.conv_pad=wenet"]).encoder
    check_chunking(cfg, Chunking(4, -1), True, "m.pt")
    with pytest.raises(ValueError, match=r"m.pt pads its convolution as WeNet .* keeps 0"):
        check_chunking(cfg, Chunking(4, 0), True, "m.pt")
    check_chunking(cfg, Chunking(4, 0), False, "m.pt")  # chunk-masked: no cache to need


@pytest.mark.parametrize("rate,channels", [(6, 0), (8, 0), (4, 8)])
def test_other_subsampling_rates_stream_exactly(rate: int, channels: int) -> None:
    enc = _encoder(subsampling_rate=rate, subsampling_channels=channels)
    width = channels or 32
    assert enc.subsampling.conv[-2].out_channels == width
    feats = torch.randn(2, 250, F_DIM)
    lens = torch.tensor([250, 170])
    with torch.no_grad():
        full, out_lens = enc(feats, lens, 3, 2)
        streamed = enc.forward_chunk_by_chunk(feats, 3, 2, lens)
    assert _max_valid_diff(full, streamed, out_lens) <= 1e-5


def test_forward_chunk_is_pure() -> None:
    enc = _encoder()
    state = enc.init_state(2, 4, 2)
    window = torch.randn(2, enc.subsampling.window_size(4), F_DIM)
    with torch.no_grad():
        _, state = enc.forward_chunk(window, state)
        before = [s.clone() for s in state]
        out1, _ = enc.forward_chunk(window, state)
        out2, _ = enc.forward_chunk(window, state)
    for s, b in zip(state, before):
        assert torch.equal(s, b)
    assert torch.equal(out1, out2)


def test_long_stream_has_constant_state_size() -> None:
    """>= 10,000 encoder frames (> 400 s) through forward_chunk with 4 left chunks."""
    enc = _encoder()
    chunk, left = 16, 4
    state = enc.init_state(1, chunk, left)
    window = enc.subsampling.window_size(chunk)
    shapes = set()
    frames = 0
    gen = torch.Generator().manual_seed(0)
    tables = enc.position_tables(chunk, chunk * (left + 1))
    with torch.no_grad():
        while frames < 10_000:
            feats = torch.randn(1, window, F_DIM, generator=gen)
            out, state = enc.forward_chunk(feats, state, pos=tables)
            assert out.shape == (1, chunk, 32)
            assert torch.isfinite(out).all()
            frames += out.size(1)
            shapes.add(tuple(tuple(s.shape) for s in state))
    assert frames >= 10_000
    assert len(shapes) == 1, shapes
    assert state.cache_len.item() == chunk * left


def test_output_depends_only_on_recent_context_not_offset() -> None:
    """With N >= 0 a chunk's output is a function of a bounded recent past: the same audio
    after a short or a long prefix gives the same output once the receptive field is inside
    the shared part. An encoder indexing positions by stream offset fails this."""
    enc = _encoder(conv_kernel=3)
    chunk, left, rate = 4, 1, 4
    step = chunk * rate  # input frames per chunk keeps chunk boundaries aligned
    gen = torch.Generator().manual_seed(3)
    shared = torch.randn(1, 20 * step + 3, F_DIM, generator=gen)
    short = torch.cat([torch.randn(1, 2 * step, F_DIM, generator=gen), shared], 1)
    long = torch.cat([torch.randn(1, 9 * step, F_DIM, generator=gen), shared], 1)
    with torch.no_grad():
        a = enc.forward_chunk_by_chunk(short, chunk, left)
        b = enc.forward_chunk_by_chunk(long, chunk, left)
        tail = 5 * chunk
        torch.testing.assert_close(a[:, -tail:], b[:, -tail:], atol=1e-5, rtol=1e-5)
        # all-history attention does see the prefix, so the same check must fail there
        c = enc.forward_chunk_by_chunk(short, chunk, -1)
        d = enc.forward_chunk_by_chunk(long, chunk, -1)
        assert (c[:, -tail:] - d[:, -tail:]).abs().max().item() > 1e-4


def test_non_causal_encoder_refuses_to_stream() -> None:
    enc = _encoder(causal_conv=False)
    with pytest.raises(RuntimeError, match="causal"):
        enc.forward_chunk(torch.randn(1, 19, F_DIM), enc.init_state(1, 4, 1))


def test_too_short_input_is_a_clear_error() -> None:
    enc = _encoder()
    with pytest.raises(ValueError, match="needs at least 7"):
        enc(torch.randn(1, 5, F_DIM), torch.tensor([5]))


def test_torchscript_round_trip_equals_eager() -> None:
    enc = _encoder()
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(enc), buf)
    buf.seek(0)
    scripted = torch.jit.load(buf)
    feats = torch.randn(2, 100, F_DIM)
    lens = torch.tensor([100, 77])
    chunk, left = 4, 2
    # Eager inference convolves one sample at a time, the scripted graph the batch: oneDNN's
    # kernels for the two batch sizes round differently (about 1e-6 apart on some CPUs).
    tol = {"atol": 1e-5, "rtol": 0}
    with torch.no_grad():
        torch.testing.assert_close(
            scripted(feats, lens, chunk, left), enc(feats, lens, chunk, left), **tol
        )
        s_eager = enc.init_state(2, chunk, left)
        s_script = scripted.init_state(2, chunk, left)
        window = enc.subsampling.window_size(chunk)
        for k in range(4):  # >= 3 chained chunks, caches filling and then full
            x = feats[:, k * chunk * 4 : k * chunk * 4 + window]
            o_eager, s_eager = enc.forward_chunk(x, s_eager)
            o_script, s_script = scripted.forward_chunk(x, s_script)
            torch.testing.assert_close(o_script, o_eager, **tol)
            for a, b in zip(s_script, s_eager):
                torch.testing.assert_close(a, b, **tol)


def _steps(enc, windows, state):
    """forward_chunk over each window in turn; the outputs and the last state."""
    outs = []
    for w in windows:
        out, state = enc.forward_chunk(w, state)
        outs.append(out)
    return torch.cat(outs, 1), state


def _copied(state):
    """The same state in fresh tensors (nothing shared with any slab)."""
    return type(state)(*(t.clone() for t in state))


def test_steps_append_in_place_and_never_change_a_state() -> None:
    """A stream's next step writes its keys and values after the cache, in the slab the last
    step returned (no copy), and no state a caller holds ever changes: a second step from an
    old state (two continuations of one stream) takes a new slab and equals the same steps
    from a fresh copy of that state. The control writes in place regardless and must fail."""
    import wenet_lite.model.conformer as conformer

    enc = _encoder()
    torch.manual_seed(2)
    window = enc.subsampling.window_size(4)
    windows = [torch.randn(2, window, F_DIM) for _ in range(6)]
    other = [torch.randn(2, window, F_DIM) for _ in range(3)]

    def check() -> None:
        with torch.inference_mode():
            _, held = _steps(enc, windows[:3], enc.init_state(2, 4, 2))
            kept = _copied(held)
            _, next_state = enc.forward_chunk(windows[3], held)
            assert next_state.att_cache.cache_slab is held.att_cache.cache_slab  # appended in place
            next_cache = next_state.att_cache.clone()
            a_out, a_state = _steps(enc, windows[3:], held)  # (a second time: a new slab)
            a_cache = a_state.att_cache.clone()
            b_out, b_state = _steps(enc, other, held)  # from the same state again
            fresh_out, fresh_state = _steps(enc, other, _copied(kept))
            for got, want in zip(held, kept):  # the held state is as it was
                assert torch.equal(got, want)
            assert torch.equal(next_state.att_cache, next_cache)  # and the continuations' states
            assert torch.equal(a_state.att_cache, a_cache)
            torch.testing.assert_close(b_out, fresh_out, atol=0, rtol=0)
            torch.testing.assert_close(b_state.att_cache, fresh_state.att_cache, atol=0, rtol=0)
            assert not torch.equal(a_out, b_out)  # the continuations did differ

    check()
    room = conformer.cache_room

    def careless(att, c):  # appends where the view ends, written past it or not
        slab = getattr(att, "cache_slab", None)
        if slab is not None and att.cache_slab_start + att.size(3) + c <= slab.size(3):
            return slab, att.cache_slab_start
        return room(att, c)

    conformer.cache_room = careless
    try:
        with pytest.raises(AssertionError):
            check()
    finally:
        conformer.cache_room = room
