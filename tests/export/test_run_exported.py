"""examples/run_exported.py: transcribes with only the exported file, never importing wenet_lite.

Here rather than in tests/scripts/ because it uses the model fixtures of tests/export/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List

import torch

from tests.export.conftest import without_decoder
from wenet_lite.export.torchscript import export_torchscript
from wenet_lite.features.audio import load_audio
from wenet_lite.features.fbank import compute_fbank
from wenet_lite.search.ctc_search import ctc_greedy_search

if TYPE_CHECKING:  # fixtures come from conftest, types only here
    from tests.export.conftest import ModelFile

RUNNER = Path(__file__).resolve().parents[2] / "examples" / "run_exported.py"
CHUNK, LEFT = 4, 2
# Imported at interpreter start from PYTHONPATH: any import of wenet_lite then fails, and of
# soxr too (16 kHz input needs no resampler, so a deployment may leave it out).
_BLOCKER = """
import sys

class _NoWenetLite:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("wenet_lite", "soxr"):
            raise ImportError(f"{name} must not be imported by the exported-model runtime")
        return None

sys.meta_path.insert(0, _NoWenetLite())
"""


def _blocked_env(tmp_path: Path) -> Dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return env


def _streaming_text(model_file: ModelFile, path: Path) -> str:
    """wenet_lite's streaming path: offline fbank, forward_chunk_by_chunk, greedy CTC."""
    model, cfg = model_file.model, model_file.cfg
    rate = cfg.features.sample_rate
    feats = compute_fbank(load_audio(path, rate), rate, cfg.features)
    with torch.no_grad():
        log_probs = model.ctc(model.encoder.forward_chunk_by_chunk(feats[None], CHUNK, LEFT))
    hyp = ctc_greedy_search(log_probs, torch.tensor([log_probs.size(1)]))[0]
    return model_file.tokenizer.decode(hyp.tokens)


def _recognizer_text(model_file: ModelFile, path: Path, mode: str = "greedy") -> str:
    """`wenet-lite stream`'s recogniser, endpointing off (one segment, like the runner); a
    beam ``mode`` searches with beam 4."""
    from wenet_lite.model.chunking import Chunking
    from wenet_lite.recognizer import open_recognizer
    from wenet_lite.runtime.endpoint import EndpointConfig
    from wenet_lite.search.options import SearchOptions

    search = SearchOptions(mode=mode, beam_size=None if mode == "greedy" else 4)
    rec = open_recognizer(
        (model_file.model, model_file.tokenizer, model_file.cfg), Chunking(CHUNK, LEFT), search,
        endpoint=EndpointConfig(enabled=False),
    )  # fmt: skip
    stream = rec.create_stream()
    rate = model_file.cfg.features.sample_rate
    stream.accept_waveform(rate, load_audio(path, rate))
    stream.input_finished()
    rec.decode_until_done([stream])
    return stream.result().text


def test_runner_needs_no_wenet_lite_and_matches_streaming(
    speech_model_file: ModelFile, speech_files: List[Path], tmp_path: Path
) -> None:
    model_ts = export_torchscript(speech_model_file.path, tmp_path / "model.ts", CHUNK, LEFT)
    env = _blocked_env(tmp_path)
    guard = subprocess.run([sys.executable, "-c", "import wenet_lite"], env=env, cwd=tmp_path)
    assert guard.returncode != 0  # the blocker works, so the run below proves independence
    files = speech_files[:3]
    cmd = [sys.executable, str(RUNNER), str(model_ts), *map(str, files), "--piece-ms", "70"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    expected = [_streaming_text(speech_model_file, f) for f in files]
    assert printed == expected
    assert len(set(expected)) == len(files) and all(len(t) > 10 for t in expected)
    # the recogniser's text is made of words, so runs of spaces (bare '▁' pieces) collapse
    assert [_recognizer_text(speech_model_file, f) for f in files] == [
        " ".join(t.split()) for t in expected
    ]


def test_runner_reports_a_bad_model_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ts"
    bad.write_bytes(b"not a model")
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(bad), "a.wav"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "cannot load" in proc.stderr and "Traceback" not in proc.stderr


def test_runner_rescoring_equals_streamed_rescoring(
    speech_u2_model_file: ModelFile, speech_files: List[Path], tmp_path: Path
) -> None:
    model_ts = export_torchscript(speech_u2_model_file.path, tmp_path / "model.ts", CHUNK, LEFT)
    files = speech_files[:4]
    cmd = [sys.executable, str(RUNNER), str(model_ts), *map(str, files), "--piece-ms", "70"]
    env = _blocked_env(tmp_path)
    proc = subprocess.run(
        [*cmd, "--rescore", "--beam", "4"], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    printed = [" ".join(t.split()) for t in proc.stdout.splitlines()]
    rescored = [_recognizer_text(speech_u2_model_file, f, "attention_rescoring") for f in files]
    assert printed == rescored
    beam = [_recognizer_text(speech_u2_model_file, f, "prefix_beam") for f in files]
    assert rescored != beam, "the random decoder should overturn some of CTC's choices"
    # A model without a decoder: one line, no traceback.
    plain = export_torchscript(
        without_decoder(speech_u2_model_file, tmp_path), tmp_path / "plain.ts", CHUNK, LEFT
    )
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(plain), str(files[0]), "--rescore"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "has no attention decoder" in proc.stderr
    assert "Traceback" not in proc.stderr
