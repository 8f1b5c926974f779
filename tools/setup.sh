#!/usr/bin/env bash
# `make setup` (and so `make test`, `make demo` and .ci/run): everything wenet_lite needs, once.
#
#   bash tools/setup.sh                   # .venv in the checkout (created when missing)
#   PYTHON=/path/to/python bash tools/setup.sh   # your own environment instead
#
# The Python: $PYTHON if set, else the active virtual environment ($VIRTUAL_ENV), else .venv in
# the checkout (created with `python3 -m venv`). Then, only what is missing:
#   1. Debian packages (the synthetic corpus's voices and texts, the manuals whose prose the
#      punctuation model learns from, libsndfile, sox, wget, chromium and its
#      driver for the browser test of `serve`'s page, openssl for its TLS test; python3-venv when
#      .venv must be created): installed with apt-get as root or with passwordless sudo;
#      otherwise it stops before any other work and prints the apt-get line to run.
#   2. torch, only when none is importable: torch's CPU wheel ($TORCH, default torch==2.13.0,
#      from PyTorch's CPU index); a torch you installed yourself (a CUDA build) is kept.
#   3. wenet_lite itself, editable, with its [dev] extra: when it is not installed from this
#      checkout, when one of its requirements is missing, or when pyproject.toml changed.
# A second run finds everything and returns in well under a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
apt_packages=(espeak-ng flite libsndfile1 fortunes-min fortunes python3-doc linux-doc sox wget chromium chromium-driver openssl)
torch_spec=${TORCH:-torch==2.13.0}
torch_index=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
say() { echo "setup: $*"; }

# --- which Python -------------------------------------------------------------------------
make_venv=0
if [ -n "${PYTHON:-}" ]; then
  python=$(command -v "$PYTHON" || true)
  [ -n "$python" ] || { echo "setup: PYTHON=$PYTHON: no such program" >&2; exit 1; }
elif [ -n "${VIRTUAL_ENV:-}" ]; then
  python=$VIRTUAL_ENV/bin/python
else
  python=$root/.venv/bin/python
  [ -x "$python" ] || make_venv=1
fi

# --- Debian packages, before any other work -------------------------------------------------
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${apt_packages[@]}" 2>/dev/null || true)
  for p in "${apt_packages[@]}"; do
    grep -q "^$p install ok installed$" <<< "$installed" || missing+=("$p")
  done
  if [ "$make_venv" = 1 ] && ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
    missing+=(python3-venv)  # Debian's python3 makes no virtual environment without it
  fi
else
  for tool in espeak-ng flite sox wget; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: not a Debian system; install these with your package manager: ${missing[*]}" >&2
    exit 1
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n)
  else
    echo "setup: missing Debian packages: ${missing[*]}. Run this, then make again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  say "apt-get install ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the virtual environment --------------------------------------------------------------
if [ "$make_venv" = 1 ]; then
  say "creating .venv with $(command -v python3) ($(python3 --version 2>&1))"
  python3 -m venv "$root/.venv"
fi
[ -x "$python" ] || { echo "setup: $python is not an executable Python" >&2; exit 1; }
pip=("$python" -m pip install -q)

# --- torch, only when none is importable ----------------------------------------------------
if ! "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  if "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" \
      "$torch_index/torch/" >/dev/null 2>&1; then
    say "installing $torch_spec (CPU wheel, $torch_index) into $python"
    "${pip[@]}" --index-url "$torch_index" "$torch_spec"
  else  # e.g. an offline machine with its own wheel index
    say "$torch_index is not reachable: installing $torch_spec from pip's configured index"
    "${pip[@]}" "$torch_spec"
  fi
fi

# --- wenet_lite and its [dev] extra ----------------------------------------------------------
stamp=$root/.setup-stamp
want="$python $(sha256sum pyproject.toml | cut -d' ' -f1)"
problem=$("$python" -I - "$root" <<'EOF'  # -I: not the checkout's own egg-info
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path

root = Path(sys.argv[1])
try:
    dist = md.distribution("wenet_lite")
except md.PackageNotFoundError:
    sys.exit(print("wenet_lite is not installed"))
origin = json.loads(dist.read_text("direct_url.json") or "{}").get("url")
if origin != root.as_uri():
    sys.exit(print(f"wenet_lite is installed from {origin or 'an index'}, not this checkout"))
for requirement in dist.requires or []:
    name, _, marker = requirement.partition(";")
    # [dev] takes in the other extras: each of theirs counts too
    if "extra" in marker and not re.search(r"""['"](dev|train|onnx|executorch|serve|vad|kenlm|itn|speakers)['"]""", marker):
        continue
    name = re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0]
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        sys.exit(print(f"{name} (a requirement) is missing"))
EOF
)
if [ -n "$problem" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing wenet_lite[dev] (editable) into $python${problem:+: $problem}"
  "${pip[@]}" -e ".[dev]"
  echo "$want" > "$stamp"
fi
