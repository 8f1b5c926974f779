import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

# The tiny rigged models, test audio and bad audio files, and a small punctuation model, shared
# by every test directory.
pytest_plugins = ["tests.tiny_models", "tests.punct_models"]

# Tests are small; one thread keeps them fast and deterministic on a shared 2-core machine.
torch.set_num_threads(1)

# `--precision auto` (the default) picks bf16 on CPUs that multiply it natively. The suite runs
# as on a CPU without it (the same choices on every machine, so fp32 references hold); the bf16
# tests ask for bf16 themselves, and the tests of `auto` set the flags they need. Subprocesses
# inherit this.
from wenet_lite.host.cpu import BF16_FLAGS, FLAGS_ENV, cpu_flags  # noqa: E402

os.environ[FLAGS_ENV] = " ".join(sorted(cpu_flags(real=True) - set(BF16_FLAGS)))

# Exported graphs (wenet_lite/export/cache.py) are kept in a folder of the run's own, never in
# the user's cache; subprocesses inherit it.
from wenet_lite.export.cache import CACHE_ENV  # noqa: E402

os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="wenet-lite-graphs-")
atexit.register(shutil.rmtree, os.environ[CACHE_ENV], True)

# Recipes and CLI subprocesses call `wenet-lite` and `python3`: those of the environment running
# the tests, whether or not it is activated (`make test` runs .venv/bin/python directly).
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")


# ---- a tiny generated LibriSpeech-layout corpus, shared by the data and training tests ----

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "conf" / "tiny_test.yaml"


class Corpus(NamedTuple):
    root: Path  # holds LibriSpeech/<part>/...
    data: Path  # prepared: data/<part>/cuts.jsonl.gz and data/cmvn.json (tiny_test features)
    tokenizer: Path  # tiny_test tokenizer trained on train-clean-100's transcripts


@pytest.fixture(scope="session")
def synthetic_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """0.05 h of synthetic speech (55 train, 10 dev, 10 test utterances), prepared, with CMVN."""
    missing = [t for t in ("espeak-ng", "flite") if shutil.which(t) is None]
    if missing or not Path("/usr/share/games/fortunes").is_dir():
        pytest.skip("needs apt-get install espeak-ng flite fortunes-min fortunes")
    from wenet_lite.config import load_config
    from wenet_lite.data.compute_cmvn import compute_cmvn_file
    from wenet_lite.data.librispeech import prepare_librispeech
    from wenet_lite.data.manifest import cut_text, load_cuts
    from wenet_lite.data.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("synthetic")
    cmd = [
        sys.executable,
        str(REPO / "recipes" / "synthetic" / "local" / "make_synthetic_librispeech.py"),
    ]
    cmd += ["--out", str(root), "--hours", "0.05", "--seed", "0", "--jobs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = root / "data"
    prepare_librispeech(root, None, data)
    cfg = load_config(TINY_CONFIG)
    compute_cmvn_file([data / "train-clean-100"], cfg.features, data / "cmvn.json", progress=False)
    texts = [cut_text(c) for c in load_cuts(data / "train-clean-100")]
    Tokenizer.train(texts, cfg.tokenizer, data / "tokenizer.model")
    return Corpus(root, data, data / "tokenizer.model")


SALTED_COUNTS = {
    "missing_audio": 1,
    "unreadable_audio": 2,
    "empty_audio": 2,
    "silent_audio": 1,
    "too_short": 2,
    "too_short_for_text": 1,
    "too_long": 1,
    "empty_text": 2,
    "no_known_pieces": 1,
}
"""What :func:`salted_cuts` adds, by reason (with tiny_test's data limits: 0.3 s to 15 s)."""


def _cut(cut_id: str, path: Path, duration: float, text: str):  # -> MonoCut
    from lhotse import MonoCut, Recording, SupervisionSegment
    from lhotse.audio import AudioSource

    rate = 16000
    recording = Recording(
        cut_id, [AudioSource("file", [0], str(path))], rate, int(duration * rate), duration
    )
    sup = SupervisionSegment(cut_id, cut_id, 0.0, duration, text=text)
    return MonoCut(cut_id, 0.0, duration, 0, supervisions=[sup], recording=recording)


def _wav(path: Path, samples) -> Path:
    import soundfile as sf

    sf.write(str(path), samples, 16000, subtype="PCM_16", format="WAV")
    return path


@pytest.fixture(scope="session")
def salted_cuts(synthetic_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory):
    """(bad cuts, SALTED_COUNTS): one or two utterances of every kind training must skip."""
    import numpy as np
    from lhotse import CutSet

    from wenet_lite.data.manifest import cut_text, load_cuts

    d = tmp_path_factory.mktemp("salted")
    good = next(iter(load_cuts(synthetic_corpus.data / "train-clean-100")))
    flac, text, dur = Path(good.recording.sources[0].source), cut_text(good), good.duration
    noise = 0.1 * np.random.default_rng(0).standard_normal(16000 * 2)
    (d / "garbage.flac").write_bytes(np.random.default_rng(1).bytes(20000))
    (d / "truncated.flac").write_bytes(flac.read_bytes()[: flac.stat().st_size // 2])
    bad = [
        _cut("bad-missing", d / "missing.flac", dur, text),
        _cut("bad-garbage", d / "garbage.flac", dur, text),
        _cut("bad-truncated", d / "truncated.flac", dur, text),
        _cut("bad-empty-file", _wav(d / "empty.wav", np.zeros(0)), dur, text),  # stale duration
        _cut("bad-zero-duration", d / "empty.wav", 0.0, text),
        _cut("bad-silent", _wav(d / "silent.wav", np.zeros(32000)), 2.0, text),
        _cut("bad-5-frames", _wav(d / "short.wav", noise[:800]), 1.0, text),  # stale duration
        _cut("bad-below-min", _wav(d / "below.wav", noise[:3200]), 0.2, text),
        _cut("bad-long-text", _wav(d / "tight.wav", noise[:6400]), 0.4, text),
        _cut("bad-too-long", flac, 16.0, text),
        _cut("bad-no-text", flac, dur, ""),
        _cut("bad-blank-text", flac, dur, "   "),
        _cut("bad-unknown-chars", flac, dur, "ЖЖЖ ЩЩ ЮЮЮЮ"),
    ]
    return CutSet.from_cuts(bad), dict(SALTED_COUNTS)
