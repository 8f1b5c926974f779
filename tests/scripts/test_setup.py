"""tools/setup.sh (`make setup`): what it installs and when, with apt-get, sudo and Python
replaced by recording fakes, in a copy of the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
# The Debian packages setup.sh installs, read from its apt_packages=(...) line.
PACKAGES = (
    re.search(r"^apt_packages=\(([^)]*)\)", (REPO / "tools" / "setup.sh").read_text(), re.M)
    .group(1)
    .split()
)


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


@pytest.fixture()
def checkout(tmp_path: Path) -> Dict[str, Path]:
    root = tmp_path / "checkout"
    (root / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "setup.sh", root / "tools" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    installed = "\n".join(f"echo '{p} install ok installed'" for p in PACKAGES if p != "flite")
    flite = f"[ -f {tmp_path}/flite ] && echo 'flite install ok installed'"
    _fake(bin_dir, "dpkg-query", f"{installed}\n{flite}\ntrue")  # flite: once apt-get ran
    _fake(bin_dir, "id", 'if [ "$1" = -u ]; then echo 1000; else /usr/bin/id "$@"; fi')
    _fake(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}; touch {tmp_path}/flite')
    # A Python whose torch is importable and whose wenet_lite check finds nothing wrong.
    _fake(bin_dir, "python", f'echo "python $*" >> {log}; cat > /dev/null')
    return {"root": root, "bin": bin_dir, "log": log}


def _run(paths: Dict[str, Path], sudo: str) -> subprocess.CompletedProcess:
    _fake(paths["bin"], "sudo", sudo)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHON")}
    env.update(PATH=f"{paths['bin']}:/usr/bin:/bin", PYTHON=str(paths["bin"] / "python"))
    cmd = ["bash", str(paths["root"] / "tools" / "setup.sh")]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def _calls(paths: Dict[str, Path]) -> List[str]:
    return paths["log"].read_text().splitlines() if paths["log"].exists() else []


def test_without_root_or_sudo_it_stops_first_with_the_apt_line(checkout) -> None:
    proc = _run(checkout, sudo="exit 1")  # sudo asks for a password
    assert proc.returncode == 1
    assert "sudo apt-get update && sudo apt-get install -y flite" in proc.stderr
    assert _calls(checkout) == []  # nothing else was done
    assert not (checkout["root"] / ".setup-stamp").exists()


def test_with_sudo_it_installs_what_is_missing_then_the_package_once(checkout) -> None:
    sudo = 'if [ "$1" = -n ] && [ "$2" = true ]; then exit 0; fi; shift; "$@"'
    proc = _run(checkout, sudo=sudo)
    assert proc.returncode == 0, proc.stderr
    calls = _calls(checkout)
    assert "apt-get install -y -qq --no-install-recommends flite" in calls
    pip = [c for c in calls if " -m pip install" in c]
    assert pip == ["python -m pip install -q -e .[dev]"]  # torch is there: not installed
    checkout["log"].unlink()
    assert _run(checkout, sudo=sudo).returncode == 0
    assert not [c for c in _calls(checkout) if "pip install" in c or "apt-get" in c]
