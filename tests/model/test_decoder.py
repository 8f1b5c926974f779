"""The attention decoder (U2++): teacher forcing equals step-by-step decoding, the right-to-left
direction reads the sequence reversed, padding changes no score, and the joint loss."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.config import ConfigError, load_config
from wenet_lite.model import build_model
from wenet_lite.model.decoder import IGNORE, AttentionDecoder, decoder_io

TINY = "conf/tiny_test.yaml"
U2 = ["decoder.type=bitransformer", "decoder.num_blocks=2", "decoder.r2l_num_blocks=1"]
V = 23


def _decoder(seed: int = 0, sos_eos_id: int = -1) -> AttentionDecoder:
    torch.manual_seed(seed)
    return AttentionDecoder(V, 32, 4, 64, 2, 2, 0.0, 0.0, sos_eos_id=sos_eos_id).eval()


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    memory = torch.randn(3, 17, 32, generator=gen)  # (B, S, D)
    memory_lens = torch.tensor([17, 9, 12])
    targets = torch.randint(1, V, (3, 6), generator=gen)  # (B, U)
    target_lens = torch.tensor([6, 3, 1])
    return memory, memory_lens, targets, target_lens


def _log_prob_of(decoder, net, memory, memory_lens, seq):
    """log P(seq + eos) under ``net``, one step at a time: each step runs the decoder on the
    prefix alone and reads its last position (no teacher-forced sequence at all)."""
    sos = decoder.sos_eos
    mask = (torch.arange(memory.size(1)) < memory_lens[0]).view(1, 1, -1)
    total = 0.0
    prefix = [sos]
    for token in seq + [sos]:
        tokens = torch.tensor([prefix])
        logits = net(tokens, torch.tensor([len(prefix)]), memory, mask)
        total += float(logits[0, -1].float().log_softmax(-1)[token])
        prefix.append(token)
    return total


@torch.no_grad()
@pytest.mark.parametrize("sos_eos_id", [-1, 2])
def test_teacher_forced_scores_equal_step_by_step_in_both_directions(sos_eos_id: int) -> None:
    """Also with start/end of sentence inside the vocabulary (WeNet's <sos/eos> at id 2)."""
    decoder = _decoder(sos_eos_id=sos_eos_id)
    assert decoder.l2r.out.out_features == (V + 1 if sos_eos_id == -1 else V)
    assert decoder.sos_eos == (V if sos_eos_id == -1 else 2)
    memory, memory_lens, targets, target_lens = _batch()
    l2r = decoder.score(memory, memory_lens, targets, target_lens, reverse_weight=0.0)
    both = decoder.score(memory, memory_lens, targets, target_lens, reverse_weight=1.0)
    for i in range(3):
        seq = targets[i, : target_lens[i]].tolist()
        mem = memory[i : i + 1, : memory_lens[i]]
        lens = memory_lens[i : i + 1]
        assert float(l2r[i]) == pytest.approx(
            _log_prob_of(decoder, decoder.l2r, mem, lens, seq), abs=1e-4
        )
        # The right-to-left decoder scores the reversed sequence.
        r2l = _log_prob_of(decoder, decoder.r2l[0], mem, lens, seq[::-1])
        assert float(both[i]) == pytest.approx(r2l, abs=1e-4)
        assert (
            r2l != pytest.approx(_log_prob_of(decoder, decoder.r2l[0], mem, lens, seq), abs=1e-3)
            or len(seq) == 1
        )
    mixed = decoder.score(memory, memory_lens, targets, target_lens, reverse_weight=0.3)
    assert torch.allclose(mixed, 0.7 * l2r + 0.3 * both, atol=1e-5)


@torch.no_grad()
def test_padding_changes_no_score() -> None:
    decoder = _decoder(1)
    memory, memory_lens, targets, target_lens = _batch(1)
    batched = decoder.score(memory, memory_lens, targets, target_lens, 0.3)
    for i in range(3):
        alone = decoder.score(
            memory[i : i + 1, : memory_lens[i]], memory_lens[i : i + 1],
            targets[i : i + 1, : target_lens[i]], target_lens[i : i + 1], 0.3,
        )  # fmt: skip
        assert float(alone) == pytest.approx(float(batched[i]), abs=1e-4)
    # Garbage in the padding of memory and tokens changes nothing.
    memory2, targets2 = memory.clone(), targets.clone()
    for i in range(3):
        memory2[i, memory_lens[i] :] = 1e3
        targets2[i, target_lens[i] :] = 5
    again = decoder.score(memory2, memory_lens, targets2, target_lens, 0.3)
    assert torch.allclose(again, batched, atol=1e-4)


def test_decoder_io() -> None:
    targets = torch.tensor([[5, 6, 7], [8, 0, 0]])
    lens = torch.tensor([3, 1])
    ys_in, ys_out = decoder_io(targets, lens, 9, reverse=False)
    assert ys_in.tolist() == [[9, 5, 6, 7], [9, 8, 9, 9]]
    assert ys_out.tolist() == [[5, 6, 7, 9], [8, 9, IGNORE, IGNORE]]
    ys_in, ys_out = decoder_io(targets, lens, 9, reverse=True)
    assert ys_in.tolist() == [[9, 7, 6, 5], [9, 8, 9, 9]]
    assert ys_out.tolist() == [[7, 6, 5, 9], [8, 9, IGNORE, IGNORE]]


def test_joint_loss_weights_ctc_and_both_directions() -> None:
    cfg = load_config(TINY, U2 + ["model.ctc_weight=0.3", "model.reverse_weight=0.4"])
    torch.manual_seed(0)
    model = build_model(cfg, V).eval()
    feats, feats_lens = torch.randn(2, 120, 80), torch.tensor([120, 80])
    targets, target_lens = torch.tensor([[3, 4, 5], [6, 7, 0]]), torch.tensor([3, 2])
    with torch.no_grad():
        loss, _, parts = model(feats, feats_lens, targets, target_lens, 4, -1)
        out, lens = model.encoder(feats, feats_lens, 4, -1)
        ctc = model.ctc.loss(out, lens, targets, target_lens)
        (l2r_lp, l2r_ys), (r2l_lp, r2l_ys) = model.decoder(out, lens, targets, target_lens)

        def smoothed(lp, ys):  # label smoothing 0.1 over V + 1 classes, summed, / batch
            keep = ys != IGNORE
            nll = -lp.gather(2, ys.clamp(min=0)[..., None])[..., 0]
            uniform = -lp.mean(-1)
            return ((0.9 * nll + 0.1 * uniform) * keep).sum() / 2

        att = 0.6 * smoothed(l2r_lp, l2r_ys) + 0.4 * smoothed(r2l_lp, r2l_ys)
    assert float(loss) == pytest.approx(float(0.3 * ctc + 0.7 * att), rel=1e-5)
    assert parts.tolist() == pytest.approx([float(ctc), float(att), 0.0, 0.0], rel=1e-5)  # logs


def test_model_without_decoder_trains_on_ctc_alone() -> None:
    cfg = load_config(TINY)
    torch.manual_seed(0)
    model = build_model(cfg, V).eval()
    assert model.decoder is None
    assert not any(k.startswith("decoder") for k in model.state_dict())
    feats, lens = torch.randn(1, 100, 80), torch.tensor([100])
    targets, target_lens = torch.tensor([[3, 4]]), torch.tensor([2])
    with torch.no_grad():
        loss, _, parts = model(feats, lens, targets, target_lens)
        out, out_lens = model.encoder(feats, lens)
        assert float(loss) == float(model.ctc.loss(out, out_lens, targets, target_lens))
        assert parts.tolist() == [float(loss), 0.0, 0.0, 0.0]


def test_config_errors_name_the_key(tmp_path) -> None:
    with pytest.raises(ConfigError, match="model.reverse_weight"):
        load_config(TINY, U2 + ["decoder.r2l_num_blocks=0", "model.reverse_weight=0.3"])
    with pytest.raises(ConfigError, match="decoder.num_heads"):
        load_config(TINY, U2 + ["decoder.num_heads=3"])
    with pytest.raises(ConfigError, match="decoder.type"):
        load_config(TINY, ["decoder.type=lstm"])
    with pytest.raises(ConfigError, match="model.ctc_weight"):
        load_config(TINY, ["model.ctc_weight=1.5"])
    with pytest.raises(ConfigError, match="decoder.activation"):
        load_config(TINY, U2 + ["decoder.activation=gelu"])
    with pytest.raises(ConfigError, match="decoder.norm_eps"):
        load_config(TINY, U2 + ["decoder.norm_eps=0"])
    with pytest.raises(ConfigError, match="decoder.sos_eos_id: must be -1 or an id > 0"):
        load_config(TINY, U2 + ["decoder.sos_eos_id=0"])
    with pytest.raises(ValueError, match=f"sos_eos_id must be -1 or in 1..{V - 1}, got {V}"):
        _decoder(sos_eos_id=V)


@torch.no_grad()
def test_relu_feed_forward_and_norm_eps_from_the_config() -> None:
    """WeNet's decoders: ReLU feed-forward layers, LayerNorm epsilon as trained; the same
    weights give other scores under each, so the options are really applied."""
    cfg = load_config(TINY, U2 + ["decoder.activation=relu", "decoder.norm_eps=1e-12"])
    wenet_like = build_model(cfg, V).decoder.eval()
    plain = build_model(load_config(TINY, U2), V).decoder.eval()
    plain.load_state_dict(wenet_like.state_dict())  # same keys: same weights
    assert isinstance(wenet_like.l2r.blocks[0].ffn[1], torch.nn.ReLU)
    assert {m.eps for m in wenet_like.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-12}
    memory, memory_lens, targets, target_lens = _batch()
    memory = memory[..., : wenet_like.l2r.d_model]
    ours = wenet_like(memory, memory_lens, targets, target_lens)[0][0]
    theirs = plain(memory, memory_lens, targets, target_lens)[0][0]
    assert (ours - theirs).abs().max() > 1e-3


def test_detached_decoder_leaves_the_encoder_to_ctc() -> None:
    """decoder.detach_encoder: the encoder's gradients are ctc_weight times CTC's alone, the
    decoder's are those of joint training."""
    feats, feats_lens = torch.randn(2, 120, 80), torch.tensor([120, 80])
    targets, target_lens = torch.tensor([[3, 4, 5], [6, 7, 0]]), torch.tensor([3, 2])
    grads = {}
    for detach in (False, True):
        cfg = load_config(TINY, U2 + [f"decoder.detach_encoder={str(detach).lower()}"])
        torch.manual_seed(0)
        model = build_model(cfg, V)
        loss, _, parts = model(feats, feats_lens, targets, target_lens, 4, -1)
        loss.backward()
        grads[detach] = {k: p.grad.clone() for k, p in model.named_parameters()}
        if detach:
            model.zero_grad()
            out, lens = model.encoder(feats, feats_lens, 4, -1)
            (0.3 * model.ctc.loss(out, lens, targets, target_lens)).backward()
            for k, p in model.encoder.named_parameters():
                torch.testing.assert_close(grads[True][f"encoder.{k}"], p.grad)
    decoder_keys = [k for k in grads[True] if k.startswith("decoder.")]
    assert decoder_keys
    for k in decoder_keys:
        torch.testing.assert_close(grads[True][k], grads[False][k])
    first = next(k for k in grads[True] if k.startswith("encoder."))
    assert not torch.allclose(grads[True][first], grads[False][first])  # joint training differs


@torch.no_grad()
def test_shared_memory_rows_equal_one_memory_per_hypothesis() -> None:
    """The n-best of a segment can share its encoder output (``rows``): the same scores as a
    copy per hypothesis."""
    decoder = _decoder(2)
    memory, memory_lens, targets, target_lens = _batch(2)  # 3 segments
    rows = torch.tensor([2, 0, 0, 1, 2, 2])
    hyps = torch.randint(1, V, (6, 5), generator=torch.Generator().manual_seed(3))
    hyp_lens = torch.tensor([5, 1, 3, 4, 2, 5])
    shared = decoder.score(memory, memory_lens, hyps, hyp_lens, 0.3, rows)
    copied = decoder.score(memory[rows], memory_lens[rows], hyps, hyp_lens, 0.3)
    torch.testing.assert_close(shared, copied)


def test_export_metadata_names_an_in_vocabulary_sos_eos() -> None:
    from wenet_lite.export.common import export_metadata

    for extra, want in (([], V), (["decoder.sos_eos_id=3"], 3)):
        cfg = load_config(TINY, U2 + extra)
        model = build_model(cfg, V)
        assert model.decoder.sos_eos == want
        assert export_metadata(cfg, model, 4, 1, "none")["sos_eos_id"] == str(want)
