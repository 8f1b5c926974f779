"""Training the hybrid heads: a transducer beside CTC (and CR-CTC's two views) learns a few
utterances, and both transducer searches transcribe them; a CTC model becomes a hybrid with
``--init``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from lhotse import CutSet

from wenet_lite import load_model
from wenet_lite.data.manifest import load_cuts
from wenet_lite.evaluation.decode_set import DecodeOptions, decode_model
from wenet_lite.evaluation.wer import sum_counts
from wenet_lite.model.chunking import Chunking
from wenet_lite.search.options import SearchOptions
from wenet_lite.train.trainer import TrainOptions, train

TINY = Path("conf/tiny_test.yaml")
# 500 steps: at 250 the streamed greedy transducer search made 7 errors in 22 words (4 pass) on
# an AVX2 EPYC (training roundings differ between CPUs); at 500 every search is within one.
FAST = ("train.max_epochs=500", "data.num_buckets=1", "train.lr=0.01", "train.warmup_steps=5",
        "transducer.warmup_steps=20")  # fmt: skip


def _few(synthetic_corpus):
    cuts = load_cuts(synthetic_corpus.data / "train-clean-100")
    return CutSet.from_cuts(sorted(cuts, key=lambda c: c.duration)[:6])


@pytest.mark.slow
def test_a_hybrid_with_cr_ctc_learns_and_both_transducer_searches_transcribe(
    synthetic_corpus, make_data, tmp_path
) -> None:
    few = _few(synthetic_corpus)
    data, exp = make_data({"few": few}), tmp_path / "exp"
    result = train(TrainOptions(
        TINY, data, exp, (*FAST, "model.transducer_weight=0.75", "model.cr_ctc_weight=0.2",
                          "model.cr_warmup_steps=50",
                          "specaug.enabled=true", "specaug.max_time_width=5"),
        train_parts=("few",), dev_parts=(), tokenizer=synthetic_corpus.tokenizer,
        progress_bar=False, device="cpu",
    ))  # fmt: skip
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert result.nonfinite_steps == 0 and sum(losses[-5:]) < 0.3 * sum(losses[:5]), losses
    logged = re.findall(r"\(ctc ([\d.]+), transducer ([\d.]+), consistency ([\d.]+)\)",
                        (exp / "train.log").read_text())  # fmt: skip
    assert logged and all(float(c) > 0 for _, _, c in logged)  # two views, other masks
    model, tokenizer, cfg = load_model(exp / "step_500.pt")
    assert model.transducer is not None
    _cli_decodes_and_streams_it(exp / "step_500.pt", data / "few", tmp_path)
    for mode, beam in (("transducer_greedy", None), ("transducer_beam", 4)):
        for chunking in (Chunking(0), Chunking(4, -1)):
            search = SearchOptions(mode=mode, beam_size=beam)
            report = decode_model(model, tokenizer, cfg, list(few), DecodeOptions(search, chunking))
            errors = sum_counts(r.score.words for r in report.results)
            assert errors.rate <= 0.2, (mode, chunking, [r.text for r in report.results])
            if chunking.chunk_size == 0:  # the Python API's transcribe: the same text
                from wenet_lite import transcribe

                first = report.results[0]
                wav = next(c for c in few if c.id == first.utt_id).recording.sources[0].source
                kwargs = {"beam": beam} if beam else {}
                said = transcribe(str(exp / "step_500.pt"), wav, mode=mode, **kwargs)
                assert said.text == first.text, mode


def _cli_decodes_and_streams_it(model: Path, part: Path, tmp_path: Path) -> None:
    """The command line's transducer modes: `decode --simulate-streaming` of a set and
    `stream --ref` of the same set give the same transcripts, and the summary names the
    search."""
    from wenet_lite.cli import main

    search = ["--model", str(model), "--mode", "transducer_beam", "--beam", "4",
              "--chunk-size", "4"]  # fmt: skip
    decoded, streamed = tmp_path / "decoded", tmp_path / "streamed"
    assert main(["decode", *search, "--data", str(part), "--simulate-streaming",
                 "--out", str(decoded)]) == 0  # fmt: skip
    assert "transducer modified beam (beam 4)" in (decoded / "summary.txt").read_text()
    assert main(["stream", *search, "--no-endpoint", "--ref", str(part),
                 "--out", str(streamed)]) == 0  # fmt: skip
    hyps = (decoded / "hyp.txt").read_text()
    assert hyps.strip() and sorted(hyps.splitlines()) == sorted(
        (streamed / "hyp.txt").read_text().splitlines()
    )


def test_a_ctc_model_without_the_head_refuses_transducer_modes(tiny) -> None:
    model, tokenizer, cfg = load_model(tiny.path)
    with pytest.raises(ValueError, match='has no transducer head.*mode="transducer_greedy"'):
        decode_model(model, tokenizer, cfg, [], DecodeOptions(SearchOptions(
            mode="transducer_greedy")))  # fmt: skip


def test_init_from_a_ctc_model_adds_the_head(synthetic_corpus, make_data, tiny, tmp_path) -> None:
    few = _few(synthetic_corpus)
    data, exp = make_data({"few": few}), tmp_path / "exp"
    train(TrainOptions(
        TINY, data, exp, ("train.max_steps=2", "model.transducer_weight=0.75"),
        train_parts=("few",), dev_parts=(), init=Path(tiny.path), progress_bar=False,
        device="cpu",
    ))  # fmt: skip
    log = (exp / "train.log").read_text()
    assert re.search(r"has no transducer head: one is added with new weights", log), log
    model = load_model(exp / "step_2.pt")[0]
    start = load_model(tiny.path)[0]
    assert model.transducer is not None and start.transducer is None


@pytest.mark.slow
def test_a_hybrid_with_cr_ctc_resumes_exactly(synthetic_corpus, tmp_path) -> None:
    """Interrupted mid-epoch and mid-warm-up (the transducer's scales depend on the step),
    with gradient accumulation, dynamic chunks and both SpecAugment views: every step's loss
    and the final weights equal an uninterrupted run's."""
    hybrid = ("model.transducer_weight=0.5", "model.cr_ctc_weight=0.2", "specaug.enabled=true",
              "specaug.max_time_width=5", "transducer.warmup_steps=6", "train.accum_grad=2",
              "encoder.chunk.mode=dynamic", "train.max_epochs=2")  # fmt: skip

    def run(exp, *extra, **kwargs):
        return train(TrainOptions(
            TINY, synthetic_corpus.data, exp, (*hybrid, *extra), dev_parts=(),
            tokenizer=synthetic_corpus.tokenizer, progress_bar=False, device="cpu", **kwargs,
        ))  # fmt: skip

    full = run(tmp_path / "full")
    assert len(full.losses) >= 6
    cut = tmp_path / "cut"
    first = run(cut, "train.max_steps=3")
    rest = run(cut, resume=True)
    assert {**first.losses, **rest.losses} == full.losses
    assert full.model is not None and rest.model is not None
    for key, value in full.model.state_dict().items():
        assert torch.equal(value, rest.model.state_dict()[key]), key


@pytest.mark.slow
def test_the_hybrid_trains_under_bf16_autocast(synthetic_corpus, make_data, tmp_path,
                                               monkeypatch) -> None:  # fmt: skip
    """``train.precision: bf16`` (autocast on a CPU claiming native bf16, as
    test_train.py's bf16 test): the transducer and CR-CTC losses stay finite and fall, and
    differ from fp32's (bf16 really ran)."""
    from wenet_lite.host.cpu import FLAGS_ENV, cpu_flags

    monkeypatch.setenv(FLAGS_ENV, " ".join(cpu_flags(real=True) | {"amx_bf16"}))
    few = _few(synthetic_corpus)
    data = make_data({"few": few})
    settings = ("train.max_epochs=30", "data.num_buckets=1", "train.lr=0.005",
                "train.warmup_steps=5", "model.transducer_weight=0.5", "model.cr_ctc_weight=0.2",
                          "model.cr_warmup_steps=50",
                "specaug.enabled=true", "specaug.max_time_width=5")  # fmt: skip

    def run(name: str, precision: str):
        return train(TrainOptions(
            TINY, data, tmp_path / name, (*settings, f"train.precision={precision}"),
            train_parts=("few",), dev_parts=(), tokenizer=synthetic_corpus.tokenizer,
            progress_bar=False, device="cpu",
        ))  # fmt: skip

    bf16, fp32 = run("bf16", "bf16"), run("fp32", "fp32")
    losses = [bf16.losses[s] for s in sorted(bf16.losses)]
    assert bf16.nonfinite_steps == 0 and sum(losses[-5:]) < 0.7 * sum(losses[:5]), losses
    assert all(bf16.losses[s] != fp32.losses[s] for s in bf16.losses)


def test_cr_ctc_from_its_start_step_sees_two_views_only_from_there(
    synthetic_corpus, make_data, tmp_path
) -> None:
    """``model.cr_start_step``: one view (CTC + SpecAugment) before it, two views and the
    consistency term from it on, in one run. The control: no start step, two views from the
    first step."""
    data = make_data({"few": _few(synthetic_corpus)})
    logged = {}
    for start in (4, 0):
        exp = tmp_path / f"exp{start}"
        train(TrainOptions(
            TINY, data, exp, ("train.max_epochs=8", "data.num_buckets=1", "train.log_interval=1",
                              "model.cr_ctc_weight=0.2", "model.cr_warmup_steps=0",
                              f"model.cr_start_step={start}", "specaug.enabled=true",
                              "specaug.start_step=0", "specaug.max_time_width=5"),
            train_parts=("few",), dev_parts=(), tokenizer=synthetic_corpus.tokenizer,
            progress_bar=False, device="cpu",
        ))  # fmt: skip
        found = re.findall(r"step (\d+): loss [\d.]+ \(ctc [\d.]+, consistency ([\d.]+)\)",
                           (exp / "train.log").read_text())  # fmt: skip
        logged[start] = {int(step): float(c) for step, c in found}
    late = logged[4]
    assert sorted(late) == list(range(1, 9)), late
    assert all(late[s] == 0.0 for s in (1, 2, 3, 4)) and all(late[s] > 0 for s in (5, 6, 7, 8))
    assert all(c > 0 for c in logged[0].values())
