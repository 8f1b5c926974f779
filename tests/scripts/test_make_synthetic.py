"""recipes/synthetic/local/make_synthetic_librispeech.py: layout, audio, transcripts,
determinism, errors."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import pytest
import soundfile as sf

SCRIPT = (
    Path(__file__).resolve().parents[2]
    / "recipes"
    / "synthetic"
    / "local"
    / "make_synthetic_librispeech.py"
)
PARTS = ("train-clean-100", "dev-clean", "test-clean", "test-other")
APT_HINT = "apt-get install espeak-ng flite fortunes-min fortunes"
HOURS = "0.01"  # 36 s of train; dev and test get their 10-utterance minimum

needs_synth = pytest.mark.skipif(
    shutil.which("espeak-ng") is None
    or shutil.which("flite") is None
    or not Path("/usr/share/games/fortunes").is_dir(),
    reason=f"needs {APT_HINT}",
)

Corpus = Dict[str, Dict[str, Tuple[str, np.ndarray]]]  # part -> uid -> (transcript, audio)


def _run(
    out: Path, *args: str, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def _generate(out: Path, seed: int, jobs: int) -> Path:
    proc = _run(out, "--hours", HOURS, "--seed", str(seed), "--jobs", str(jobs))
    assert proc.returncode == 0, proc.stderr
    return out / "LibriSpeech"


def _read(root: Path) -> Corpus:
    corpus: Corpus = {}
    for part in PARTS:
        texts = {}
        for trans in (root / part).glob("*/*/*.trans.txt"):
            for line in trans.read_text().splitlines():
                uid, text = line.split(" ", 1)
                texts[uid] = text
        corpus[part] = {
            f.stem: (texts.get(f.stem), sf.read(str(f), dtype="int16")[0])
            for f in (root / part).glob("*/*/*.flac")
        }
    return corpus


def _lm_text(out: Path) -> set:
    with gzip.open(out / "librispeech-lm-norm.txt.gz", "rt", encoding="utf-8") as f:
        return {line.rstrip("\n") for line in f}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Dict[str, Path]:
    if shutil.which("espeak-ng") is None or shutil.which("flite") is None:
        pytest.skip(f"needs {APT_HINT}")
    base = tmp_path_factory.mktemp("synth")
    return {
        "a": _generate(base / "a", seed=0, jobs=2),
        "b": _generate(base / "b", seed=0, jobs=1),
        "c": _generate(base / "c", seed=1, jobs=2),
    }


@needs_synth
def test_layout_and_transcripts(corpora):
    root = corpora["a"]
    for part in PARTS:
        flacs = sorted((root / part).glob("*/*/*.flac"))
        assert flacs, f"{part} is empty"
        chapters = {f.parent for f in flacs}
        assert set((root / part).glob("*/*/*")) == set(flacs) | {
            c / f"{c.parent.name}-{c.name}.trans.txt" for c in chapters
        }
        for chapter in chapters:
            spk, chap = chapter.parent.name, chapter.name
            lines = (chapter / f"{spk}-{chap}.trans.txt").read_text().splitlines()
            ids = [line.split(" ", 1)[0] for line in lines]
            assert ids == sorted(f.stem for f in chapter.glob("*.flac"))
            for line in lines:
                assert re.fullmatch(rf"{spk}-{chap}-\d{{4}} [A-Z']+( [A-Z']+)*", line), line
                assert 3 <= len(line.split()) - 1 <= 25


@needs_synth
def test_audio_is_16k_mono_flac_and_never_digital_silence(corpora):
    for flac in corpora["a"].glob("*/*/*/*.flac"):
        info = sf.info(str(flac))
        assert (info.format, info.samplerate, info.channels) == ("FLAC", 16000, 1), flac
        audio = sf.read(str(flac), dtype="int16")[0].astype(np.int64)
        assert 0.5 < len(audio) / 16000 < 20, flac
        assert np.abs(audio).max() > 0.3 * 32768, flac  # peak-normalised speech, not silence
        edges = np.flatnonzero(np.diff(np.concatenate([[0], audio == 0, [0]]).astype(int)))
        zero_runs = edges[1::2] - edges[::2]
        assert zero_runs.max(initial=0) < 10, f"{flac}: exact-zero run of {zero_runs.max()}"


@needs_synth
def test_parts_have_disjoint_sentences_and_meet_targets(corpora):
    corpus = _read(corpora["a"])
    sentences = {part: {text for text, _ in utts.values()} for part, utts in corpus.items()}
    assert not sentences[PARTS[0]] & sentences[PARTS[1]]
    assert not sentences[PARTS[0]] & sentences[PARTS[2]]
    assert not sentences[PARTS[1]] & sentences[PARTS[2]]
    # test-other: test-clean's sentences read by voices no other part has
    assert sentences[PARTS[3]] and not sentences[PARTS[3]] & (
        sentences[PARTS[0]] | sentences[PARTS[1]]
    )
    speakers = {part: {uid.split("-")[0] for uid in utts} for part, utts in corpus.items()}
    assert not speakers[PARTS[3]] & (speakers[PARTS[0]] | speakers[PARTS[1]] | speakers[PARTS[2]])
    train_s = sum(len(a) for _, a in corpus[PARTS[0]].values()) / 16000
    assert train_s >= float(HOURS) * 3600
    assert len(corpus[PARTS[1]]) >= 10 and len(corpus[PARTS[2]]) >= 10
    summary = json.loads((corpora["a"] / "SYNTHETIC.json").read_text())
    assert summary["seed"] == 0 and len(summary["voices"]) == 100
    held_out = {v["name"].split("+")[1] for v in summary["held_out_voices"]}
    assert len(summary["held_out_voices"]) == 20
    assert not held_out & {v["name"].split("+")[-1] for v in summary["voices"]}
    # The LM text is the train pool: every spoken train sentence, no dev or test sentence.
    lm_text = _lm_text(corpora["a"].parent)
    assert summary["lm_text"]["sentences"] == len(lm_text) > len(sentences[PARTS[0]])
    assert sentences[PARTS[0]] <= lm_text
    assert not (sentences[PARTS[1]] | sentences[PARTS[2]]) & lm_text
    for part in PARTS:
        assert summary["parts"][part]["utterances"] == len(corpus[part])


@needs_synth
def test_same_seed_is_identical_whatever_the_jobs(corpora):
    a, b = _read(corpora["a"]), _read(corpora["b"])
    for part in PARTS:
        assert a[part].keys() == b[part].keys()
        for uid, (text, audio) in a[part].items():
            assert text == b[part][uid][0]
            np.testing.assert_array_equal(audio, b[part][uid][1], err_msg=uid)
    summary = "SYNTHETIC.json"
    assert (corpora["a"] / summary).read_bytes() == (corpora["b"] / summary).read_bytes()


@needs_synth
def test_parts_are_added_to_a_corpus_made_before_them(corpora, tmp_path):
    """--parts test-other on a corpus without it writes the part the full run writes (same
    seed, same hours), and merges it into SYNTHETIC.json; another seed is refused."""
    out = tmp_path / "old"
    shutil.copytree(corpora["a"].parent, out)
    root = out / "LibriSpeech"
    shutil.rmtree(root / "test-other")
    summary = json.loads((root / "SYNTHETIC.json").read_text())
    del summary["parts"]["test-other"]
    (root / "SYNTHETIC.json").write_text(json.dumps(summary))
    bad = _run(out, "--parts", "test-other", "--seed", "1")
    assert bad.returncode == 1 and "--seed 0" in bad.stderr, bad.stderr
    proc = _run(out, "--parts", "test-other", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert _read(root)["test-other"].keys() == _read(corpora["a"])["test-other"].keys()
    merged = json.loads((root / "SYNTHETIC.json").read_text())
    assert merged["parts"] == json.loads((corpora["a"] / "SYNTHETIC.json").read_text())["parts"]
    again = _run(out, "--parts", "test-other")
    assert again.returncode == 1 and "test-other exists" in again.stderr
    assert not list(root.glob("*.partial"))
    unknown = _run(out, "--parts", "test-dirty")
    assert unknown.returncode == 2 and "--parts test-dirty" in unknown.stderr


@needs_synth
def test_other_seed_gives_other_content(corpora):
    a, c = _read(corpora["a"]), _read(corpora["c"])
    for part in PARTS:
        assert {t for t, _ in a[part].values()} != {t for t, _ in c[part].values()}


def test_help_documents_the_hours():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "in addition, each 5% of it (at most 0.25 h" in text, proc.stdout


def test_missing_synthesiser_names_the_apt_packages(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _run(tmp_path / "out", "--hours", HOURS, env={**os.environ, "PATH": str(empty)})
    assert proc.returncode != 0
    assert "espeak-ng" in proc.stderr and APT_HINT in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@needs_synth
def test_missing_text_names_the_apt_packages(tmp_path):
    proc = _run(tmp_path / "out", "--hours", HOURS, "--text-dir", str(tmp_path / "none"))
    assert proc.returncode != 0
    assert APT_HINT in proc.stderr, proc.stderr


def test_lm_text_only_needs_no_synthesiser_and_matches_the_full_run(corpora, tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no espeak-ng or flite on PATH
    proc = _run(tmp_path / "out", "--lm-text-only", "--seed", "0", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "out" / "LibriSpeech").exists()
    assert _lm_text(tmp_path / "out") == _lm_text(corpora["a"].parent)  # same seed, same pool
    assert _lm_text(tmp_path / "out") != _lm_text(corpora["c"].parent)  # seed 1
    proc = _run(tmp_path / "out2")
    assert proc.returncode == 2 and "--hours is required" in proc.stderr


def _load_module(monkeypatch):
    spec = importlib.util.spec_from_file_location("make_synthetic", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_synthetic", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def test_clean_sentence_keeps_only_certain_readings(monkeypatch):
    module = _load_module(monkeypatch)
    clean = module.clean_sentence
    assert clean('"Well-known," isn\'t it -- the  end?') == (
        "Well-known, isn't it, the end?",
        "WELL KNOWN ISN'T IT THE END",
    )
    assert clean("I saw 3 cats today.") is None  # digits
    assert clean("The USA is big today.") is None  # acronym: spelt or read?
    assert clean("J. R. Tolkien wrote books.") is None  # initials
    assert clean("Send mail to me@home now.") is None  # symbols
    assert clean("Too short.") is None


def test_eval_hours_default_and_bad_value(corpora, tmp_path):
    summary = json.loads((corpora["a"] / "SYNTHETIC.json").read_text())
    assert summary["hours_requested_eval"] == pytest.approx(0.05 * float(HOURS))
    proc = _run(tmp_path / "out", "--hours", HOURS, "--eval-hours", "0")
    assert proc.returncode == 2 and "--eval-hours (0.0) must be > 0" in proc.stderr


@needs_synth
def test_every_run_at_two_jobs_exits(tmp_path):
    """The run stops its workers with work still queued (the overshoot of the last batch): that
    must never wait forever. Repeated, since the hang it guards against came now and then."""
    for run in range(6):
        out = tmp_path / str(run)
        proc = _run(out, "--hours", "0.002", "--eval-hours", "0.001", "--seed", str(run),
                    "--jobs", "2")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert (out / "LibriSpeech" / "SYNTHETIC.json").is_file()


def test_a_stopped_consumer_leaves_nothing_queued(monkeypatch):
    """in_order submits a small window and cancels it when the consumer stops early."""
    module = _load_module(monkeypatch)
    from concurrent.futures import ThreadPoolExecutor

    started = []

    def fake(utt):
        started.append(utt)
        return np.zeros(1, np.int16)

    monkeypatch.setattr(module, "synthesize", fake)
    with ThreadPoolExecutor(1) as pool:
        audios = module.in_order(pool, 1, range(1000))
        assert next(audios) is not None
        audios.close()  # what zip() stopping early amounts to
    assert len(started) <= 3  # the window is 2 x jobs; nothing beyond it ever ran


def test_a_hung_synthesiser_fails_naming_the_utterance(monkeypatch):
    module = _load_module(monkeypatch)
    monkeypatch.setattr(module, "VOICE_TIMEOUT_S", 0.5)
    voice = module.Voice(0, "espeak-ng", "en", 150, 50, -3.0)
    monkeypatch.setattr(module.Voice, "command", lambda self, t, w: ["sleep", "30"])
    utt = module.Utterance("1-1000-0000", voice, "Hello there.", "HELLO THERE", 0)
    with pytest.raises(RuntimeError, match=r"did not finish 1-1000-0000"):
        module.synthesize(utt)
