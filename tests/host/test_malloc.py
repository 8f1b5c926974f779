"""keep_freed_memory: freed large tensors are reused instead of page-faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = """
import resource, sys, torch
from wenet_lite.host.malloc import keep_freed_memory
print(keep_freed_memory())
for mib in (4, 16, 32):  # activations of growing size, each freed at once
    torch.empty(mib << 18).fill_(1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        torch.empty(mib << 18).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)  # of the 32 MiB rounds
"""


def _probe(**env: str) -> tuple:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    clean.pop("WENET_LITE_MALLOC", None)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env={**clean, **env}, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_large_allocations_reused_without_page_faults() -> None:
    applied, faults = _probe()
    assert applied
    skipped, faults_default = _probe(WENET_LITE_MALLOC="0")
    assert not skipped
    pages = (32 << 20) // 4096
    # By default each of the ten 32 MiB tensors is mmapped and faulted in anew...
    assert faults_default >= 8 * pages
    # ...while kept on malloc's heap most are reused: the heap's growth faults in a few of them
    # (measured 0 or 3 allocations' worth; the bound leaves room for one more).
    assert faults <= 4 * pages + 64


def test_users_own_malloc_tuning_is_left_alone() -> None:
    applied, _ = _probe(MALLOC_TRIM_THRESHOLD_="1000000")
    assert not applied
