"""Keep freed tensor memory in the process instead of handing it back to the OS at once.

glibc's malloc serves allocations above a threshold (128 KiB, raised adaptively up to 32 MiB)
with ``mmap`` and unmaps them on free; the next allocation of that size then takes a page fault
per 4 KiB page as the kernel zero-fills it again. PyTorch on CPU allocates every intermediate
tensor this way, so a batched streaming step (tens of MiB per activation) page-faults on every
large activation. Raising the mmap and trim thresholds to 1 GiB makes freed blocks stay on
malloc's heap and be reused (``benchmarks/bench_encoder.py`` runs with it, as the recogniser).
The cost: the process's resident memory no longer shrinks after a peak.

``WENET_LITE_MALLOC=0``, or either ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the
environment (the user's own tuning), leaves malloc alone; so does a non-glibc C library.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # bytes
_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (and processes forked from it).

    Returns True when they are set (now or by an earlier call), False when left alone.
    """
    global _done
    if _done:
        return True
    if os.environ.get("WENET_LITE_MALLOC", "1") == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library already loaded into the process
    except (OSError, AttributeError):  # not glibc (e.g. macOS, musl without mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _THRESHOLD)
    )
    return _done
