"""The punctuation and casing model: labels from written text, training that beats the
baseline on held-out text, streaming labels equal to the whole text's, batched equal to alone,
and one-line refusals of bad texts and model directories."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.punct_models import sentence, write_text
from wenet_lite.punct.punctuator import PunctError, Punctuator
from wenet_lite.punct.text import CASES, MARKS, apply_labels, baseline, split_text
from wenet_lite.punct.train import evaluate, read_split_text, read_training_text, score_labels


def test_written_text_becomes_labels_and_back() -> None:
    line = "Hello, world! \"Is it\" McDonald's -- or NASA's; a well-known U.S. day... I'm fine"
    words = split_text(line)
    assert [w.word for w in words] == [
        "hello", "world", "is", "it", "mcdonald's", "or", "nasa's", "a", "well", "known", "u",
        "s", "day", "i'm", "fine",
    ]  # fmt: skip
    assert [MARKS[w.mark] for w in words][:7] == [",", "!", "", "", "", "", ","]
    assert [CASES[w.case] for w in words][:7] == ["capital", "lower", "capital", "lower",
                                                  "mixed", "lower", "upper"]  # fmt: skip
    assert MARKS[words[12].mark] == "."  # "..." is a period
    written = apply_labels([w.word for w in words], [w.mark for w in words],
                           [w.case for w in words], {"mcdonald's": "McDonald's"})  # fmt: skip
    assert " ".join(written) == (
        "Hello, world! Is it McDonald's or NASA's, a well known U. S. day. I'm fine"
    )
    assert split_text(" , . ! ") == []  # marks alone are no words
    marks, cases = baseline(["so", "i", "went"])
    assert apply_labels(["so", "i", "went"], marks, cases) == ["So", "I", "went."]


def test_training_beats_the_baseline_on_held_out_text(punct_model: Path) -> None:
    metrics = json.loads((punct_model / "metrics.json").read_text())
    model, base = metrics["model"], metrics["baseline"]
    assert metrics["held-out lines"] >= 50
    # the baseline finds line ends alone: no comma, no ?, no ! and no names
    assert model["f1 all marks"] > base["f1 all marks"] + 30, (model, base)
    assert model["f1 ?"] > 80 and model["f1 ,"] > 80 and base["f1 ?"] == 0
    assert model["case accuracy"] > base["case accuracy"] + 5
    # lines run together: the sentence ends inside are the model's alone
    run, run_base = metrics["model, running text"], metrics["baseline, running text"]
    assert run["words"] == model["words"]
    assert run["f1 ."] > run_base["f1 ."] + 40 and run["f1 capital"] > run_base["f1 capital"] + 40
    assert base["f1 ."] > run_base["f1 ."] + 40  # the control: the rule needs a line a sentence
    p = Punctuator.load(punct_model)
    assert p.text("did john see nasa") == "Did John see NASA?"
    assert p.text("MARY LIKED MCDONALD BUT PARIS LEFT THE CAT") == (
        "Mary liked McDonald, but Paris left the cat."
    )


def test_streamed_labels_equal_the_whole_texts(punct_model: Path, monkeypatch) -> None:
    p = Punctuator.load(punct_model)
    rng = random.Random(5)
    text = " ".join(sentence(rng) for _ in range(12))
    words = [w.word for w in split_text(text)]
    whole = p.words(words)
    assert len(words) > 3 * (p.left_context + p.right_context)
    stream = p.stream()
    out = []
    for i in range(0, len(words), 3):  # three words at a time
        got = stream.accept(words[i : i + 3])
        assert len(out) + len(got) <= max(0, i + 3 - p.right_context)  # a word waits
        out += got
    out += stream.finish()
    assert out == whole
    # the control: a stream that labels each word before its right context has come
    monkeypatch.setattr(Punctuator, "right_context", property(lambda self: 0))
    hurried = p.stream()
    early = [w for i in range(0, len(words), 3) for w in hurried.accept(words[i : i + 3])]
    assert early + hurried.finish() != whole


def test_a_words_labels_depend_on_its_stated_context_alone() -> None:
    """The reach the streams wait for (``left_context``/``right_context``) is the model's:
    changing a word just outside it leaves a word's logits as they were; changing one just
    inside it changes them (the control)."""
    from wenet_lite.punct.model import PunctConfig, PunctModel, WordFeatures

    torch.manual_seed(0)
    cfg = PunctConfig(dim=16, num_layers=3, buckets=256, vocab_size=50, dropout=0.0)
    assert (cfg.left_context, cfg.right_context) == (12, 6)
    model = PunctModel(cfg).eval()
    features = WordFeatures([f"w{i}" for i in range(50)], cfg.buckets)
    words = [f"w{i % 50}" for i in range(3 * (cfg.left_context + cfg.right_context))]
    at = cfg.left_context + 5

    def logits(ws):
        with torch.no_grad():
            marks, cases = model(*features.batch([ws]))
        return torch.cat([marks[0, at], cases[0, at]])

    base = logits(words)
    for offset, changes in ((cfg.right_context + 1, False), (cfg.right_context, True),
                            (-cfg.left_context - 1, False), (-cfg.left_context, True)):  # fmt: skip
        other = list(words)
        other[at + offset] = "unseen"
        assert (not torch.equal(logits(other), base)) == changes, (offset, changes)


def test_batched_labels_equal_alone(punct_model: Path) -> None:
    p = Punctuator.load(punct_model)
    rng = random.Random(9)
    texts = [[w.word for w in split_text(sentence(rng) + " " + sentence(rng))]
             for _ in range(6)]  # fmt: skip
    together = p.labels(texts)
    for text, labels in zip(texts, together):
        assert p.labels([text])[0] == labels


def test_bad_texts_and_model_directories_are_named(tmp_path: Path, punct_model: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    marks = tmp_path / "marks.txt"
    marks.write_text("... !!! ,,, ???\n-- --\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\xe9 au lait.\n".encode("latin-1"))
    flat = tmp_path / "flat.txt.gz"
    with gzip.open(flat, "wt") as f:
        f.write("no capitals and no marks here\n")
    for path, said in [(empty, "no words"), (marks, "no words"), (latin1, "not UTF-8"),
                       (flat, "no punctuation and no capitals"),
                       (tmp_path / "missing.txt", "no such")]:  # fmt: skip
        with pytest.raises((ValueError, FileNotFoundError), match=said) as e:
            read_training_text([path])
        assert str(path) in str(e.value)
        with pytest.raises((ValueError, FileNotFoundError), match=said) as e:
            read_split_text([path], 0.05, 0)  # what train-punct reads with
        assert str(path) in str(e.value)
    asr = tmp_path / "asr"
    asr.mkdir()
    (asr / "model.pt").write_bytes(b"x")
    with pytest.raises(PunctError, match="an ASR model"):
        Punctuator.load(asr)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "punct.pt").write_bytes(b"not a pickle")
    with pytest.raises(PunctError, match="punct.pt: not a readable"):
        Punctuator.load(broken)
    # the CLI: one line each, naming the file or directory
    cli = [sys.executable, "-m", "wenet_lite"]
    run = subprocess.run(cli + ["train-punct", "--text", str(marks), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and str(marks) in run.stderr
    run = subprocess.run(cli + ["punctuate", "--model", str(asr)], input="HELLO\n",
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and str(asr) in run.stderr
    run = subprocess.run(cli + ["punctuate", "--model", str(punct_model)],
                         input="did mary see the dog\nTHE CAT SAW PARIS\n", capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["Did Mary see the dog?", "The cat saw Paris."]


def test_train_punct_cli_reports_scores(tmp_path: Path) -> None:
    text = write_text(tmp_path / "t.txt", 200, seed=3)
    run = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "train-punct", "--text", str(text), "--out",
         str(tmp_path / "m"), "--max-steps", "5", "--dim", "32", "--no-progress",
         "--whole-lines", "0.2", "--word-dropout", "0.1"], capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "held out" in run.stdout and "baseline: f1 ," in run.stdout
    assert (tmp_path / "m" / "punct.pt").is_file()
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert (metrics["steps"], metrics["whole lines"], metrics["word dropout"]) == (5, 0.2, 0.1)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_train_punct_in_bf16_keeps_fp32_weights(tmp_path: Path, precision: str) -> None:
    """`--precision bf16` trains under bf16 autocast where the CPU has it natively (else fp32,
    said in the log and the metrics); the saved weights are fp32 either way and load."""
    from wenet_lite.host.cpu import native_bf16

    text = write_text(tmp_path / "t.txt", 200, seed=5)
    run = subprocess.run(
        [sys.executable, "-m", "wenet_lite", "train-punct", "--text", str(text), "--out",
         str(tmp_path / "m"), "--max-steps", "5", "--dim", "32", "--no-progress",
         "--precision", precision], capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    expected = "bf16" if precision == "bf16" and native_bf16() else "fp32"
    assert metrics["precision"] == expected
    if precision == "bf16" and not native_bf16():
        assert "has no native bf16" in run.stderr
    blob = torch.load(tmp_path / "m" / "punct.pt", map_location="cpu", weights_only=True)
    tensors = [v for v in blob["state_dict"].values() if v.is_floating_point()]
    assert tensors and all(v.dtype == torch.float32 for v in tensors)
    assert Punctuator.load(tmp_path / "m").labels([["hello", "world"]])


def test_bf16_falls_back_to_fp32_where_the_cpu_emulates_it(monkeypatch, caplog) -> None:
    import logging

    import wenet_lite.host.cpu as cpu
    from wenet_lite.punct.train import _autocast

    monkeypatch.setattr(cpu, "native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert not isinstance(_autocast("bf16"), torch.autocast)
    assert "no native bf16" in caplog.text
    monkeypatch.setattr(cpu, "native_bf16", lambda: True)  # the control: native, it autocasts
    assert isinstance(_autocast("bf16"), torch.autocast)
    assert not isinstance(_autocast("fp32"), torch.autocast)


def test_punctuate_scores_a_written_text_beside_the_baseline(
    tmp_path: Path, punct_model: Path
) -> None:
    """`punctuate --score TEXT` strips the text to words, punctuates them and scores the
    result against the text as train-punct scores its held-out lines; a model that learnt the
    grammar beats the baseline on it, and scoring the text against itself is perfect."""
    text = write_text(tmp_path / "t.txt", 60, seed=11)
    cli = [sys.executable, "-m", "wenet_lite", "punctuate", "--model", str(punct_model)]
    run = subprocess.run([*cli, "--score", str(text), "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    scores = json.loads(run.stdout)
    assert scores["lines"] == 60
    model, rule = scores["model, running text"], scores["baseline, running text"]
    assert model["f1 ."] > rule["f1 ."] + 30 and model["words"] == rule["words"] > 0
    punctuator = Punctuator.load(punct_model)
    lines = read_training_text([text])
    assert scores["model"] == evaluate(punctuator, lines)["model"]
    perfect = [([w.mark for w in ws], [w.case for w in ws]) for ws in lines]
    assert score_labels(perfect, perfect)["f1 all marks"] == 100.0  # the scorer's control
    shown = subprocess.run([*cli, "--score", str(text)], capture_output=True, text=True)
    assert f"{text} (" in shown.stdout and "baseline, running text: f1 ," in shown.stdout
    missing = subprocess.run([*cli, "--score", str(tmp_path / "none.txt")], capture_output=True,
                             text=True)  # fmt: skip
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1, missing.stderr
    assert "none.txt" in missing.stderr


def test_bad_flags_and_stdin_lines_are_one_line_each(tmp_path: Path, punct_model: Path) -> None:
    text = write_text(tmp_path / "t.txt", 20)
    cli = [sys.executable, "-m", "wenet_lite"]
    bad = [(["--held-out", "1.5"], "--held-out 1.5"), (["--right", "-1"], "--right -1"),
           (["--dim", "0"], "--dim"), (["--epochs", "inf"], "--epochs inf"),
           (["--epochs", "nan"], "--epochs nan"), (["--max-steps", "-5"], "--max-steps -5"),
           (["--right", "100000"], "--right 100000"), (["--dim", "100000"], "--dim: dim 100000"),
           (["--layers", "1000"], "--layers: num_layers 1000"),
           (["--whole-lines", "1.5"], "--whole-lines 1.5"),
           (["--word-dropout", "-0.1"], "--word-dropout -0.1")]  # fmt: skip
    for flags, said in bad:
        command = [*cli, "train-punct", "--text", str(text), "--out", str(tmp_path / "m"), *flags]
        run = subprocess.run(command, capture_output=True, text=True)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and said in run.stderr, (
            run.stderr
        )
        assert not (tmp_path / "m").exists()  # nothing written (-5 steps wrote a model)
    run = subprocess.run([*cli, "punctuate", "--model", str(punct_model)],
                         input=b"did mary see the dog\n\xff\xfe bad\nTHE CAT SAW PARIS\n",
                         capture_output=True)  # fmt: skip
    assert run.returncode == 1 and run.stderr.decode().count("\n") == 1
    assert "stdin line 2: not UTF-8" in run.stderr.decode()
    assert run.stdout.decode().splitlines() == ["Did Mary see the dog?", "", "The cat saw Paris."]


def _tampered(punct_model: Path, tmp_path: Path, name: str, change) -> Path:
    blob = torch.load(punct_model / "punct.pt", weights_only=True)
    change(blob)
    (tmp_path / name).mkdir()
    torch.save(blob, tmp_path / name / "punct.pt")
    return tmp_path / name


def test_a_hostile_punctuation_file_is_refused_before_it_is_built(tmp_path, punct_model) -> None:
    """Each checked before memory is given to the model, in one line naming the file: a config
    claiming 8 M hashed n-grams (6 GB) over a small file's weights, 100,000 layers, buckets 0;
    a word list longer than the word embedding; every weight NaN; every weight x 1e30 (finite,
    its labels overflow). The control: the file untouched loads."""
    import resource

    Punctuator.load(punct_model)

    def config(**changes):
        return lambda blob: blob["config"].update(changes)

    def words(blob):
        blob["vocab"] = list(blob["vocab"]) + [f"w{i}" for i in range(blob["config"]["vocab_size"])]

    def scaled(value):
        def change(blob):
            for t in blob["state_dict"].values():
                if t.is_floating_point():
                    t.mul_(value) if value == value else t.fill_(value)

        return change

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for name, change, said in [
        ("big", config(buckets=4_000_000, dim=512), r"parameters: at most 200,000,000"),
        ("huge_buckets", config(buckets=8_000_000), r"buckets 8000000: give a whole number"),
        ("deep", config(num_layers=100_000), r"num_layers 100000: give a whole number in 1..32"),
        ("nobuckets", config(buckets=0), r"buckets 0: give a whole number in 1\.\."),
        ("long", words, r"its word list \(\d+ entries\) is not words that fit"),
        ("nan", scaled(float("nan")), r"weight \S+ holds \d+ NaN or infinite"),
        ("huge", scaled(1e30), r"its labels of three words are NaN or infinite"),
    ]:  # fmt: skip
        directory = _tampered(punct_model, tmp_path, name, change)
        with pytest.raises(PunctError, match=said) as e:
            Punctuator.load(directory)
        assert str(directory / "punct.pt") in str(e.value) and "\n" not in str(e.value)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KB
    assert grown < 500_000, f"{grown} KB: a refused file was built"


def test_a_pickle_carrying_code_is_one_line_without_torchs_advice(tmp_path) -> None:
    import pickle

    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    (tmp_path / "p").mkdir()
    with open(tmp_path / "p" / "punct.pt", "wb") as f:
        pickle.dump(Payload(), f)
    with pytest.raises(PunctError) as e:
        Punctuator.load(tmp_path / "p")
    assert "\n" not in str(e.value) and "will likely succeed" not in str(e.value)
