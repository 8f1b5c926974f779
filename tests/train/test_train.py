"""Training on generated speech: it learns, and an interrupted run resumes exactly."""

import json
from pathlib import Path
from typing import Dict

import pytest
import torch
from lhotse import CutSet

from wenet_lite import load_model
from wenet_lite.config import ConfigError
from wenet_lite.data.dataset import ASRDataset
from wenet_lite.data.manifest import load_cuts
from wenet_lite.data.tokenizer import normalize_text
from wenet_lite.evaluation.wer import sum_counts, word_errors
from wenet_lite.model import ASRModel
from wenet_lite.search.ctc_search import ctc_greedy_search
from wenet_lite.train.trainer import TrainOptions, TrainResult, train

TINY = Path("conf/tiny_test.yaml")


def _train(data: Path, exp: Path, *overrides: str, **kwargs) -> TrainResult:
    kwargs.setdefault("train_parts", ("train-clean-100",))
    kwargs.setdefault("dev_parts", ("dev-clean",))
    kwargs.setdefault("device", "cpu")  # exact resume is promised on CPU (README)
    return train(TrainOptions(TINY, data, exp, overrides, progress_bar=False, **kwargs))


def test_tiny_model_learns_a_few_utterances(synthetic_corpus, make_data, tmp_path) -> None:
    cuts = load_cuts(synthetic_corpus.data / "train-clean-100")
    few = CutSet.from_cuts(sorted(cuts, key=lambda c: c.duration)[:6])  # ~8 s of audio
    data = make_data({"few": few})
    exp = tmp_path / "exp"
    # One bucket, one batch: every step sees the same 6 utterances.
    result = _train(
        data, exp, "train.max_epochs=100", "data.num_buckets=1", "train.lr=0.005",
        "train.warmup_steps=5", train_parts=("few",), dev_parts=(),
        tokenizer=synthetic_corpus.tokenizer,
    )  # fmt: skip
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert len(losses) == 100 and result.nonfinite_steps == 0
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.2 * first, losses
    # The newest checkpoint, read as a model file, transcribes what it was trained on.
    model, tokenizer, cfg = load_model(exp / "step_100.pt")
    layers = model.encoder.subsampling.layers
    batch = ASRDataset(cfg.features, cfg.data, tokenizer, layers, 0, train=False)[(1, few)]
    with torch.no_grad():
        log_probs, lens = model.ctc_log_probs(batch.feats, batch.feats_lens)
    hyps = [tokenizer.decode(h.tokens) for h in ctc_greedy_search(log_probs, lens)]
    errors = sum_counts(word_errors(normalize_text(r), h) for r, h in zip(batch.texts, hyps))
    assert errors.rate <= 0.2, list(zip(batch.texts, hyps))


U2 = (
    "decoder.type=bitransformer",
    "decoder.num_blocks=1",
    "decoder.r2l_num_blocks=1",
    "decoder.ffn_dim=64",
)


def test_joint_ctc_and_attention_training_learns_both(
    synthetic_corpus, make_data, tmp_path
) -> None:
    from wenet_lite.cli import main
    from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.search.options import SearchOptions

    cuts = load_cuts(synthetic_corpus.data / "train-clean-100")
    few = CutSet.from_cuts(sorted(cuts, key=lambda c: c.duration)[:6])
    data = make_data({"few": few})
    exp = tmp_path / "exp"
    result = _train(
        data, exp, *U2, "decoder.dropout=0.0", "train.max_epochs=100", "data.num_buckets=1",
        "train.lr=0.005", "train.warmup_steps=5",
        train_parts=("few",), dev_parts=(), tokenizer=synthetic_corpus.tokenizer,
    )  # fmt: skip
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert sum(losses[-5:]) < 0.3 * sum(losses[:5])  # label smoothing keeps a floor
    # The log lines give both parts: loss = 0.3 ctc + 0.7 attention (the config's weights).
    import re

    logged = re.findall(
        r"loss ([\d.]+) \(ctc ([\d.]+), attention ([\d.]+)\)", (exp / "train.log").read_text()
    )
    assert len(logged) == 100 // 5  # conf/tiny_test.yaml logs every 5 steps
    for loss, ctc, att in logged:
        assert float(loss) == pytest.approx(0.3 * float(ctc) + 0.7 * float(att), abs=2e-4)
    # Averaging covers the decoder; the averaged model rescores what it learnt.
    avg = exp / "avg.pt"
    assert main(["average", "--exp", str(exp), "--num", "2", "--out", str(avg)]) == 0
    model, tokenizer, cfg = load_model(avg)
    last = load_model(exp / "step_100.pt")[0].state_dict()
    middle = load_model(exp / "step_99.pt")[0].state_dict()
    for key, value in model.state_dict().items():
        if key.startswith("decoder.") and value.is_floating_point():
            assert torch.allclose(value, (last[key] + middle[key]) / 2, atol=1e-6), key
    # The decoder alone recognises the training audio: rescoring with no CTC weight.
    search = SearchOptions(mode="attention_rescoring", beam_size=4, ctc_weight=0.0)
    report = decode_model(model, tokenizer, cfg, list(few), DecodeOptions(search, Chunking(4, -1)))
    errors = sum_counts(r.score.words for r in report.results)
    assert errors.rate <= 0.2, [r.text for r in report.results]


def _state(result: TrainResult) -> Dict[str, torch.Tensor]:
    assert result.model is not None
    return result.model.state_dict()


# Everything random switched on: dropout, SpecAugment, speed perturbation, dither (the tiny
# config's default 1.0), dynamic chunks; plus gradient accumulation across the interruption.
RANDOM = (
    "encoder.dropout=0.1",
    "specaug.enabled=true",
    "specaug.max_time_width=10",
    "data.speed_perturb=[0.9,1.0,1.1]",
    "train.accum_grad=2",
    "train.max_epochs=2",
    *U2,  # the attention decoder too, with dropout
    "decoder.dropout=0.1",
)


def test_resume_gives_the_same_losses_as_an_uninterrupted_run(synthetic_corpus, tmp_path) -> None:
    data = synthetic_corpus.data
    tok = synthetic_corpus.tokenizer
    full = _train(data, tmp_path / "full", *RANDOM, tokenizer=tok)
    steps = sorted(full.losses)
    assert len(steps) >= 8 and full.epoch == 3
    # Reproducible: a second whole run repeats every step's loss, and another seed does not.
    assert _train(data, tmp_path / "again", *RANDOM, tokenizer=tok).losses == full.losses
    other = _train(data, tmp_path / "seed", *RANDOM, "train.seed=1", tokenizer=tok).losses
    assert sorted(other) == steps and all(other[s] != full.losses[s] for s in steps)
    exp = tmp_path / "cut"
    # Stop mid-epoch 1, then mid-epoch 2 (with DataLoader workers, which prefetch ahead of
    # training: the resume point must be what was trained on, not what was loaded), then finish.
    a = _train(data, exp, *RANDOM, "train.max_steps=3", tokenizer=tok)
    b = _train(data, exp, *RANDOM, "train.max_steps=7", "data.num_workers=2", resume=True)
    c = _train(data, exp, *RANDOM, resume=True)
    assert sorted(a.losses) == [1, 2, 3] and sorted(b.losses) == [4, 5, 6, 7]
    # A run that max_steps stops mid-epoch still scores its final weights on dev.
    assert a.dev_loss is not None and b.dev_loss is not None and a.dev_loss != b.dev_loss
    log = [line.split(": ", 1)[1] for line in (exp / "train.log").read_text().splitlines()]
    for step, epoch in ((3, 1), (7, 2)):  # scored, then saved with that score
        saved = log.index(f"saved {exp / f'step_{step}.pt'}")
        assert log[saved - 1].startswith(f"epoch {epoch} dev: 10 utts, loss"), log[saved - 1]
    resumed = {**a.losses, **b.losses, **c.losses}
    assert resumed == full.losses  # exactly, step by step
    assert c.dev_loss == full.dev_loss
    for key, value in _state(full).items():
        assert torch.equal(value, _state(c)[key]), key
    assert json.loads((exp / "skipped.json").read_text()) == full.skipped


def test_bf16_on_the_cpu_learns_and_resumes_exactly(
    synthetic_corpus, make_data, tmp_path, monkeypatch
) -> None:
    """``train.precision: bf16`` on a CPU that multiplies bf16 natively: autocast in bf16, the
    loss falls, an interrupted run repeats every logged loss. On a CPU without it the same
    arithmetic is emulated (slower, same results), so the flags are set to claim AMX here."""
    from wenet_lite.host.cpu import FLAGS_ENV, cpu_flags

    monkeypatch.setenv(FLAGS_ENV, " ".join(cpu_flags(real=True) | {"amx_bf16"}))
    data, tok = synthetic_corpus.data, synthetic_corpus.tokenizer
    cuts = load_cuts(data / "train-clean-100")
    few = make_data({"few": CutSet.from_cuts(sorted(cuts, key=lambda c: c.duration)[:6])})
    # One bucket, one batch: the same 6 utterances every step.
    learned = _train(
        few,
        tmp_path / "few",
        "train.max_epochs=30",
        "data.num_buckets=1",
        "train.lr=0.005",
        "train.warmup_steps=5",
        "train.precision=bf16",
        train_parts=("few",),
        dev_parts=(),
        tokenizer=tok,
    )
    losses = [learned.losses[s] for s in sorted(learned.losses)]
    assert learned.nonfinite_steps == 0 and sum(losses[-5:]) < 0.7 * sum(losses[:5]), losses
    log = (tmp_path / "few" / "train.log").read_text()
    assert "training precision: bf16 (autocast on the CPU)" in log
    common = (*RANDOM, "train.precision=bf16")
    full = _train(data, tmp_path / "full", *common, tokenizer=tok)
    fp32 = _train(data, tmp_path / "fp32", *common, "train.precision=fp32", tokenizer=tok)
    assert all(fp32.losses[s] != full.losses[s] for s in full.losses)  # bf16 really ran
    exp = tmp_path / "cut"
    a = _train(data, exp, *common, "train.max_steps=3", tokenizer=tok)
    b = _train(data, exp, *common, resume=True)
    assert {**a.losses, **b.losses} == full.losses  # exactly, step by step
    for key, value in _state(full).items():
        assert torch.equal(value, _state(b)[key]), key
    assert all(v.dtype == torch.float32 for v in _state(b).values() if v.is_floating_point())
    # auto picks bf16 only for encoders BF16_MIN_WIDTH wide or more: this 32-wide one trains
    # in fp32, the very losses of train.precision=fp32.
    auto = _train(data, tmp_path / "auto", *RANDOM, "train.precision=auto", "train.max_steps=3",
                  tokenizer=tok)  # fmt: skip
    assert auto.losses and auto.losses == {s: fp32.losses[s] for s in auto.losses}
    log = (tmp_path / "auto" / "train.log").read_text()
    assert "fp32 (auto: bf16 only for encoders 256 wide or more; this one: 32)" in log


def test_auto_training_precision_follows_the_width_rule(monkeypatch) -> None:
    """``train.precision: auto`` on the CPU: bf16 where it is native and the encoder is at least
    ``BF16_MIN_WIDTH`` wide (the engines' rule), else fp32 without a warning; ``bf16`` asked
    for trains in bf16 at any width; no native bf16: fp32."""
    from wenet_lite.host.cpu import BF16_FLAGS, BF16_MIN_WIDTH, FLAGS_ENV, cpu_flags
    from wenet_lite.train.precision import autocast_for, precision_note, training_precision

    cpu = torch.device("cpu")
    monkeypatch.setenv(FLAGS_ENV, " ".join(cpu_flags(real=True) | {"amx_bf16"}))
    assert training_precision("auto", cpu, BF16_MIN_WIDTH) == "bf16"
    assert training_precision("auto", cpu, BF16_MIN_WIDTH - 1) == "fp32"
    assert training_precision("bf16", cpu, 144) == "bf16"
    assert isinstance(autocast_for("auto", cpu, 512), torch.autocast)
    line, warning = precision_note("auto", cpu, 144)
    assert line.startswith("training precision: fp32 (auto: bf16 only") and warning is None
    bf16_line = "training precision: bf16 (autocast on the CPU)"
    assert precision_note("auto", cpu, 512) == (bf16_line, None)
    monkeypatch.setenv(FLAGS_ENV, " ".join(cpu_flags(real=True) - set(BF16_FLAGS)))
    assert training_precision("auto", cpu, 512) == "fp32"
    assert precision_note("auto", cpu, 512) == ("training precision: fp32", None)


def test_bf16_without_native_bf16_trains_fp32_with_one_warning(
    synthetic_corpus, tmp_path, monkeypatch, caplog
) -> None:
    from wenet_lite.host.cpu import BF16_FLAGS, FLAGS_ENV, cpu_flags

    monkeypatch.setenv(FLAGS_ENV, " ".join(cpu_flags(real=True) - set(BF16_FLAGS)))
    data, tok = synthetic_corpus.data, synthetic_corpus.tokenizer
    few = ("train.max_steps=2",)
    with caplog.at_level("WARNING"):
        asked = _train(data, tmp_path / "a", *few, "train.precision=bf16", tokenizer=tok)
    warnings = [r.getMessage() for r in caplog.records if "train.precision bf16" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].endswith("training in fp32"), warnings
    assert "\n" not in warnings[0]
    plain = _train(data, tmp_path / "b", *few, "train.precision=fp32", tokenizer=tok)
    assert asked.losses == plain.losses  # fp32 indeed
    assert "training precision: fp32" in (tmp_path / "a" / "train.log").read_text()


def test_resume_refuses_a_different_model(synthetic_corpus, tmp_path) -> None:
    data, tok = synthetic_corpus.data, synthetic_corpus.tokenizer
    _train(data, tmp_path / "exp", "train.max_steps=1", tokenizer=tok, dev_parts=())
    with pytest.raises(ValueError, match="already holds checkpoints"):
        _train(data, tmp_path / "exp", tokenizer=tok)
    with pytest.raises(ConfigError, match="encoder.num_blocks: is 3 but .*step_1.pt"):
        _train(data, tmp_path / "exp", "encoder.num_blocks=3", resume=True)


def test_bad_inputs_fail_at_start_naming_the_file(synthetic_corpus, tmp_path) -> None:
    data, tok = synthetic_corpus.data, synthetic_corpus.tokenizer
    with pytest.raises(FileNotFoundError, match="train-other-500"):
        _train(data, tmp_path / "a", train_parts=("train-other-500",), tokenizer=tok)
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        _train(data, tmp_path / "b", cmvn=tmp_path / "nowhere.json")
    bad = tmp_path / "bad" / "train-clean-100"
    bad.mkdir(parents=True)
    (bad / "cuts.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(Exception, match="cuts.jsonl.gz"):
        _train(tmp_path / "bad", tmp_path / "c", dev_parts=(), tokenizer=tok)
    with pytest.raises(ConfigError, match="train.accum_grad"):
        _train(data, tmp_path / "d", "train.accum_grad=0")


def test_a_non_finite_step_is_skipped_and_counted(synthetic_corpus, tmp_path, monkeypatch) -> None:
    calls = []
    forward = ASRModel.forward

    def poisoned(self, *args, **kwargs):
        loss, lens, parts = forward(self, *args, **kwargs)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 3 else loss), lens, parts

    monkeypatch.setattr(ASRModel, "forward", poisoned)
    exp = tmp_path / "exp"
    result = _train(
        synthetic_corpus.data, exp, "train.max_steps=5", dev_parts=(),
        tokenizer=synthetic_corpus.tokenizer,
    )  # fmt: skip
    assert result.step == 5 and result.nonfinite_steps == 1
    assert result.losses[3] != result.losses[3]  # NaN, reported as is
    # Had Adam taken the NaN step, its moments and then every weight would be NaN.
    assert all(bool(torch.isfinite(p).all()) for p in _state(result).values())
    assert "step 3: non-finite gradient norm, step skipped" in (exp / "train.log").read_text()


def test_adamw_and_gradient_clipping(synthetic_corpus, tmp_path, monkeypatch) -> None:
    seen = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        params = [p for p in params if p.grad is not None]
        before = clip(params, max_norm, *args, **kwargs)
        after = torch.stack([p.grad.norm() for p in params]).norm()
        seen.append((max_norm, float(before), float(after)))
        return before

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    exp = tmp_path / "exp"
    _train(
        synthetic_corpus.data, exp, "train.max_steps=3", "train.optimizer=adamw",
        "train.weight_decay=0.01", "train.grad_clip=0.5", dev_parts=(),
        tokenizer=synthetic_corpus.tokenizer,
    )  # fmt: skip
    assert len(seen) == 3 and all(max_norm == 0.5 for max_norm, _, _ in seen)
    assert all(before > 0.5 and after <= 0.5 * 1.001 for _, before, after in seen), seen
    state = torch.load(exp / "step_3.pt", weights_only=True)["optimizer"]
    group = state["param_groups"][0]
    assert group["weight_decay"] == 0.01 and group["decoupled_weight_decay"] is True


def test_fbank_on_the_device_trains_like_fbank_in_workers(synthetic_corpus, tmp_path) -> None:
    common = ("train.max_steps=4", "data.speed_perturb=[0.9,1.0,1.1]", "specaug.enabled=true")
    kw = dict(dev_parts=(), tokenizer=synthetic_corpus.tokenizer)
    workers = _train(synthetic_corpus.data, tmp_path / "w", *common, "data.fbank=workers", **kw)
    device = _train(synthetic_corpus.data, tmp_path / "d", *common, "data.fbank=device", **kw)
    log = (tmp_path / "d" / "train.log").read_text()
    assert "training fbank computed on cpu" in log
    # The same utterances, speed factors, dither and masks; fbank within 1e-3 (test_torch_fbank).
    for step in range(1, 5):
        assert device.losses[step] == pytest.approx(workers.losses[step], rel=1e-3)
    assert device.losses != workers.losses  # not silently the same path
    assert device.skipped == workers.skipped


@pytest.mark.slow
def test_compiled_training_matches_eager(synthetic_corpus, tmp_path) -> None:
    kw = dict(dev_parts=(), tokenizer=synthetic_corpus.tokenizer)
    eager = _train(synthetic_corpus.data, tmp_path / "e", "train.max_steps=6", **kw)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = _train(
        synthetic_corpus.data, tmp_path / "c", "train.max_steps=6", "train.compile=true", **kw
    )
    for step in range(1, 7):
        assert compiled.losses[step] == pytest.approx(eager.losses[step], rel=1e-3)
    # Compiled once per chunk-mask case, not once per batch length.
    stats = torch._dynamo.utils.counters["stats"]
    model = compiled.model.train()
    seen = []
    for frames in (131, 167, 229):
        feats = torch.randn(2, frames, 80)
        loss, _, _ = model(feats, torch.tensor([frames, frames - 9]), torch.ones(2, 3).long(),
                           torch.tensor([3, 2]), 4, 2)  # fmt: skip
        loss.backward()
        seen.append(stats["unique_graphs"])
    assert seen[0] == seen[1] == seen[2], seen
    # The checkpoint is the plain model's: it loads into an eager model.
    model, _, _ = load_model(tmp_path / "c" / "step_6.pt")
    assert not any(k.startswith("_orig_mod") for k in model.state_dict())


def test_deterministic_training_runs_and_leaves_the_global_setting(synthetic_corpus, tmp_path):
    kw = dict(dev_parts=(), tokenizer=synthetic_corpus.tokenizer)
    plain = _train(synthetic_corpus.data, tmp_path / "p", "train.max_steps=3", **kw)
    assert not torch.are_deterministic_algorithms_enabled()
    strict = _train(
        synthetic_corpus.data, tmp_path / "s", "train.max_steps=3", "train.deterministic=true",
        **kw,
    )  # fmt: skip
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the run
    assert strict.losses == plain.losses  # CPU kernels are deterministic already


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_deterministic_cuda_resume_repeats_the_uninterrupted_losses(synthetic_corpus, tmp_path):
    data, tok = synthetic_corpus.data, synthetic_corpus.tokenizer
    cuda = ("train.deterministic=true", "train.max_epochs=2")
    full = _train(data, tmp_path / "full", *RANDOM, *cuda, tokenizer=tok, device="cuda")
    exp = tmp_path / "cut"
    a = _train(data, exp, *RANDOM, *cuda, "train.max_steps=3", tokenizer=tok, device="cuda")
    b = _train(data, exp, *RANDOM, *cuda, resume=True, device="cuda")
    assert {**a.losses, **b.losses} == full.losses  # exactly, step by step


def test_a_run_whose_every_step_diverges_stops_in_one_line(synthetic_corpus, tmp_path,
                                                           monkeypatch) -> None:  # fmt: skip
    """A learning rate of 1e12 turns the weights to NaN at once: every later step is skipped,
    and after MAX_NONFINITE_RUN of them in a row training stops with a message (it ran to its
    last step, doing nothing, and exited 0)."""
    from wenet_lite.train import loop

    monkeypatch.setattr(loop, "MAX_NONFINITE_RUN", 3)
    overrides = ("train.lr=1e12", "train.warmup_steps=1", "train.max_epochs=3",
                 "train.log_interval=1")  # fmt: skip
    opts = TrainOptions(
        Path("conf/tiny_test.yaml"), synthetic_corpus.data, tmp_path / "exp", overrides,
        ("train-clean-100",), (), tokenizer=synthetic_corpus.tokenizer, progress_bar=False,
        device="cpu",
    )  # fmt: skip
    with pytest.raises(loop.DivergedError, match=r"steps \d+-\d+: 3 steps in a row had a NaN"):
        train(opts)
