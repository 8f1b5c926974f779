"""The package as a user installs it: a wheel in a fresh virtual environment, without the
source tree and with the core dependencies only, transcribes a file; what the core lacks is
named with its extra in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _installed_torch() -> list:
    """pip's requirement for the torch installed here."""
    return [f"torch=={metadata.version('torch')}"]


def _run(cmd, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.mark.slow
def test_the_wheel_installs_alone_and_transcribes(tiny, corpus, tmp_path) -> None:
    from wenet_lite.data.manifest import load_cuts
    from wenet_lite.transcription import transcribe

    audio = Path(load_cuts(corpus / "test-clean")[0].recording.sources[0].source)
    # built from a copy of the tracked files: the build leaves nothing in the checkout
    listed = _run(["git", "ls-files", "-co", "--exclude-standard"], REPO).stdout.split()
    source = tmp_path / "source"
    for name in listed:
        if (REPO / name).is_file() and not name.startswith("tests/"):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist",
                  source], tmp_path)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("wenet_lite-*.whl")
    env = tmp_path / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    assert _run([base, "-m", "venv", env], tmp_path).returncode == 0
    pip = [env / "bin" / "python", "-m", "pip", "install", "-q"]
    # torch first, the build installed here (pip's index alone could pick a CUDA build of
    # gigabytes): by its distribution's version, which pip can find (a CUDA wheel from PyPI
    # says 2.13.0 where torch.__version__ says 2.13.0+cu130)
    got = _run([*pip, *_installed_torch()], tmp_path)
    if got.returncode != 0 and "+" in metadata.version("torch"):  # a build of PyTorch's index
        label = metadata.version("torch").split("+")[1]
        index = f"https://download.pytorch.org/whl/{label}"
        got = _run([*pip, "--extra-index-url", index, *_installed_torch()], tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    got = _run([*pip, wheel], tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]

    work = tmp_path / "elsewhere"  # no source tree in sight
    work.mkdir()
    model = shutil.copy(tiny.path, work / "model.pt")
    cli = env / "bin" / "wenet-lite"
    out = _run([cli, "transcribe", "--model", model, audio], work)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == transcribe(tiny.path, audio).text
    listed = _run([env / "bin" / "python", "-m", "pip", "list", "--format=freeze"], work).stdout
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert not installed & {"lhotse", "tensorboard", "kaldialign", "onnxruntime", "executorch"}
    # the training stack is an extra, named in one line when a command needs it
    scored = _run([cli, "decode", "--model", model, "--data", work], work)
    assert scored.returncode == 1
    assert scored.stderr.strip().splitlines() == [
        "wenet-lite decode: error: this needs lhotse, which is not installed: "
        "pip install 'wenet_lite[train]'"
    ]
    # the shipped configs travel in the package and are found by name
    code = "from wenet_lite.config import load_config; print(load_config('tiny_test').model)"
    assert _run([env / "bin" / "python", "-c", code], work).returncode == 0
    size = sum(f.stat().st_size for f in env.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"fresh environment with the wheel and its core dependencies: {size / 2**30:.2f} GB")


def test_a_missing_extra_is_named_in_one_line(tiny, tmp_path) -> None:
    """Without lhotse (hidden from the import system) `decode` says which extra to install."""
    argv = ["decode", "--model", str(tiny.path), "--data", str(tmp_path)]
    code = ("import sys; sys.modules['lhotse'] = None; from wenet_lite.cli import main; "
            f"sys.exit(main({argv!r}))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "wenet-lite decode: error: this needs lhotse, which is not installed: "
        "pip install 'wenet_lite[train]'"
    )
