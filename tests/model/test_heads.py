"""The heads on one encoder: the transducer's share of the loss and its warm-up, CR-CTC's
consistency term between two views, and models without either as before."""

from __future__ import annotations

import pytest
import torch

from wenet_lite.config import ConfigError, load_config
from wenet_lite.model import build_model
from wenet_lite.model.asr import PARTS, consistency_loss


def _batch(B: int = 2, T_in: int = 60, U: int = 4, V: int = 20):
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(B, T_in, 80, generator=g)
    return (feats, torch.tensor([T_in, T_in - 9]), torch.randint(1, V, (B, U), generator=g),
            torch.tensor([U, U - 1]))  # fmt: skip


def _model(*overrides: str):
    torch.manual_seed(0)
    cfg = load_config("tiny_test", overrides)
    return build_model(cfg, 20), cfg


def test_a_model_without_the_head_is_as_before() -> None:
    model, _ = _model()
    assert model.transducer is None
    assert not any(k.startswith("transducer.") for k in model.state_dict())
    loss, _, parts = model(*_batch())
    assert parts.shape == (len(PARTS),) and float(parts[2]) == 0 and float(parts[3]) == 0


def test_the_transducer_takes_its_share_of_the_loss() -> None:
    model, _ = _model("model.transducer_weight=0.75", "transducer.warmup_steps=10")
    assert model.transducer is not None
    model.eval()  # no dropout: the parts are comparable
    batch = _batch()
    loss, _, parts = model(*batch, step=10)
    ctc, att, trans, _ = parts.tolist()
    rest = model.ctc_weight * ctc + (1 - model.ctc_weight) * att if model.decoder else ctc
    assert float(loss.detach()) == pytest.approx(0.75 * trans + 0.25 * rest, rel=1e-5)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if n.startswith("transducer.")}
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())
    # the warm-up: at step 0 the simple loss counts whole and the pruned a tenth
    head, c = model.transducer, model.transducer_cfg
    with torch.no_grad():
        out, lens = model.encoder(batch[0], batch[1])
        simple, pruned = head.losses(out, lens, batch[2], batch[3], c.prune_range, 0.0,
                                     (c.lm_scale, c.am_scale))  # fmt: skip
        _, _, early = model(*batch, step=0)
    assert float(early[2]) == pytest.approx(float(simple + 0.1 * pruned) / 2, rel=1e-4)
    assert float(trans) == pytest.approx(float(0.5 * simple + pruned) / 2, rel=1e-4)


def test_cr_ctc_compares_the_two_views() -> None:
    model, _ = _model("model.cr_ctc_weight=0.2", "specaug.enabled=true")
    model.eval()
    feats, lens, targets, target_lens = _batch()
    same = torch.cat([feats, feats])
    two = (lens.repeat(2), targets.repeat(2, 1), target_lens.repeat(2))
    _, _, parts = model(same, two[0], *two[1:], views=2)
    assert float(parts[3]) == pytest.approx(0.0, abs=1e-6)  # one view twice: nothing to pull
    masked = feats.clone()
    masked[:, 10:30] = 0.0
    loss, _, parts = model(torch.cat([feats, masked]), two[0], *two[1:], views=2)
    assert float(parts[3]) > 1e-4
    assert float(loss) == pytest.approx(float(parts[0]) + 0.2 * float(parts[3]), rel=1e-5)
    _, _, one = model(feats, lens, targets, target_lens)  # one view: no consistency term
    assert float(one[3]) == 0.0


def test_the_consistency_weight_ramps_in_and_keeps_its_ratio_to_ctc() -> None:
    """The term's weight is cr_ctc_weight times CTC's own weight in the loss, ramped in
    linearly over cr_warmup_steps: in a hybrid (CTC 0.25 of the loss) 0.2 means 0.05, as
    icefall's 0.02 beside CTC 0.1. The control: without the ramp the whole weight from step 0."""
    model, _ = _model("model.cr_ctc_weight=0.2", "specaug.enabled=true",
                      "model.cr_warmup_steps=100")  # fmt: skip
    model.eval()
    assert [model.consistency_weight(s) for s in (0, 50, 100, 1000, None)] == pytest.approx(
        [0.0, 0.1, 0.2, 0.2, 0.2]
    )
    feats, lens, targets, target_lens = _batch()
    masked = feats.clone()
    masked[:, 10:30] = 0.0
    two = (torch.cat([feats, masked]), lens.repeat(2), targets.repeat(2, 1),
           target_lens.repeat(2))  # fmt: skip
    for step, weight in ((0, 0.0), (25, 0.05), (None, 0.2)):
        loss, _, parts = model(*two, step=step, views=2)
        want = float(parts[0]) + weight * float(parts[3])
        assert float(loss) == pytest.approx(want, rel=1e-5), step
    hybrid, _ = _model("model.cr_ctc_weight=0.2", "specaug.enabled=true",
                       "model.transducer_weight=0.75", "model.cr_warmup_steps=100")  # fmt: skip
    assert hybrid.consistency_weight(None) == pytest.approx(0.2 * 0.25)
    no_ramp, _ = _model("model.cr_ctc_weight=0.2", "specaug.enabled=true",
                        "model.cr_warmup_steps=0")  # fmt: skip
    assert no_ramp.consistency_weight(0) == pytest.approx(0.2)
    late, _ = _model("model.cr_ctc_weight=0.2", "specaug.enabled=true",
                     "model.cr_warmup_steps=100", "model.cr_start_step=1000")  # fmt: skip
    assert [late.consistency_weight(s) for s in (0, 999, 1000, 1050, 1100, 5000, None)] == (
        pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2, 0.2, 0.2])
    )  # the ramp starts at the start step


def test_the_consistency_term_is_a_symmetric_kl_over_valid_frames() -> None:
    g = torch.Generator().manual_seed(1)
    lp = torch.randn(4, 6, 5, generator=g).log_softmax(-1)
    lens = torch.tensor([6, 4, 6, 4])
    got = consistency_loss(lp, lens)
    a, b = lp[:2].double(), lp[2:].double()
    kl = (b.exp() * (b - a) + a.exp() * (a - b)).sum(-1)  # KL(b||a) + KL(a||b) per frame
    kl[1, 4:] = 0.0  # padding
    assert float(got) == pytest.approx(float(kl.sum()) / 4, rel=1e-5)
    padded = lp.clone()
    padded[1, 5], padded[3, 5] = lp[0, 0], lp[0, 1]  # a padding frame's values do not count
    assert float(consistency_loss(padded, lens)) == pytest.approx(float(got), rel=1e-6)


def test_cr_ctc_needs_specaugment() -> None:
    with pytest.raises(ConfigError, match="model.cr_ctc_weight.*specaug.enabled is false"):
        load_config("tiny_test", ("model.cr_ctc_weight=0.2", "specaug.enabled=false"))


@pytest.mark.parametrize("key", ["model.cr_start_step", "model.cr_warmup_steps"])
def test_a_negative_consistency_step_is_refused_naming_its_key(key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*must be >= 0"):
        load_config("tiny_test", ("model.cr_ctc_weight=0.2", "specaug.enabled=true", f"{key}=-1"))
    load_config("tiny_test", ("model.cr_ctc_weight=0.2", "specaug.enabled=true", f"{key}=0"))
