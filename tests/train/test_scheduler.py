"""Learning-rate schedules: warmup, Noam decay, cosine decay to the floor at max_steps."""

import math

import pytest
import torch

from wenet_lite.train.scheduler import WarmupLR


def _lrs(steps: int, **kw) -> list:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = WarmupLR(opt, **kw)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])  # the lr this optimizer step uses
        opt.step()
        sched.step()
    return out


def test_noam_warmup_then_inverse_sqrt() -> None:
    lrs = _lrs(40, warmup_steps=10)
    assert lrs[0] == pytest.approx(0.2) and lrs[9] == pytest.approx(2.0)  # steps 1 and 10
    assert max(lrs) == pytest.approx(2.0)
    assert lrs[39] == pytest.approx(2.0 * math.sqrt(10 / 40))


def test_cosine_reaches_the_floor_at_total_steps() -> None:
    lrs = _lrs(60, warmup_steps=10, kind="cosine", total_steps=50, final_scale=0.1)
    assert lrs[9] == pytest.approx(2.0)
    assert lrs[29] == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))  # halfway down: step 30
    assert lrs[49] == pytest.approx(0.2) and lrs[59] == pytest.approx(0.2)  # floor, then held
    after = lrs[9:50]
    assert all(a >= b for a, b in zip(after, after[1:]))


def test_cosine_needs_a_step_budget() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="total_steps"):
        WarmupLR(opt, 100, "cosine", total_steps=50)


def test_resume_keeps_the_position_and_takes_the_new_shape() -> None:
    def make(total: int):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
        return opt, WarmupLR(opt, 10, "cosine", total_steps=total)

    opt, sched = make(50)
    for _ in range(20):
        opt.step()
        sched.step()
    state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
    opt2, sched2 = make(50)
    opt2.load_state_dict(state["optimizer"])
    sched2.load_state_dict(state["scheduler"])
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]  # exact resume
    opt3, sched3 = make(100)  # resumed with a larger step budget
    opt3.load_state_dict(state["optimizer"])
    sched3.load_state_dict(state["scheduler"])
    assert opt3.param_groups[0]["lr"] == pytest.approx(2.0 * sched3.scale(21))
    assert opt3.param_groups[0]["lr"] > opt.param_groups[0]["lr"]
