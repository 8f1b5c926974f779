"""What the CPU offers for inference and training precision, read from its flags.

bf16 is fast only where the CPU multiplies bf16 natively (``amx_bf16``: Intel's AMX tiles,
Sapphire Rapids and later; ``avx512_bf16``: Cooper Lake, Zen 4 and later). Elsewhere oneDNN
and torch emulate it with fp32 arithmetic plus conversions, several times slower than fp32,
so ``auto`` never picks it there. int8 products are native with VNNI (``avx512_vnni``,
``avx_vnni``) or AMX (``amx_int8``).

Shapes: none. Used by ``recognizer.EngineSpec`` (``precision="auto"``), the trainer
(``train.precision: bf16`` on the CPU) and ``wenet-lite --version``.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Optional

__all__ = [
    "BF16_MIN_WIDTH",
    "FLAGS_ENV",
    "PRECISIONS",
    "auto_precision",
    "cpu_flags",
    "cpu_model",
    "cpu_summary",
    "int8_kernel",
    "native_bf16",
]

PRECISIONS = ("auto", "fp32", "bf16", "int8")
"""``--precision`` of the engines: ``auto`` picks by the CPU (:func:`auto_precision`)."""
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")


FLAGS_ENV = "WENET_LITE_CPU_FLAGS"
"""Environment variable that, when set, replaces the CPU's flags (space-separated): to force
a choice of ``auto``, or to test it."""


def cpu_flags(real: bool = False) -> FrozenSet[str]:
    """The CPU's feature flags: ``$WENET_LITE_CPU_FLAGS`` if set (unless ``real``), else Linux
    ``/proc/cpuinfo``'s (empty where it cannot be read)."""
    forced = os.environ.get(FLAGS_ENV)
    if forced is not None and not real:
        return frozenset(forced.split())
    return _proc_flags()


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> Dict[str, str]:
    """The first value of each key of Linux ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def _proc_flags() -> FrozenSet[str]:
    info = _cpuinfo()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` says."""
    return (
        _cpuinfo().get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    )


def native_bf16(flags: Optional[Iterable[str]] = None) -> bool:
    """Whether the CPU multiplies bf16 in hardware (AMX or AVX-512 bf16)."""
    have = set(cpu_flags() if flags is None else flags)
    return any(f in have for f in BF16_FLAGS)


def int8_kernel(flags: Optional[Iterable[str]] = None) -> str:
    """The int8 engine's integer product that the flags suggest (``wenet_lite.model.int8``;
    the same numbers either way): ``int_mm`` (``torch._int_mm``) where the CPU multiplies int8
    natively (VNNI, AMX), else ``fp32`` (exact fp32 products: torch's ``_int_mm`` has no fast
    kernel there). ``model.int8.default_kernel`` also times ``_int_mm`` before using it."""
    have = set(cpu_flags() if flags is None else flags)
    return "int_mm" if any(f in have for f in INT8_FLAGS) else "fp32"


BF16_MIN_WIDTH = 256
"""Encoder width (d_model) from which ``auto`` picks bf16 where it is native. Measured on an AMX
Xeon, one thread (``benchmarks/bench_engines.py``): at 256 (conformer_u2) the bf16 engine
takes 0.66x fp32's time for one stream and 16 batched streams run 1.9x as fast; at 144 (the
demo model) one stream takes 1.3x fp32's time and 16 streams run as fast as fp32: its products
are too small for bf16 to save what the conversions around them cost."""


def auto_precision(flags: Optional[Iterable[str]] = None, width: Optional[int] = None) -> str:
    """The precision ``auto`` means on this CPU for an encoder ``width`` wide (None: any):
    bf16 where it is native and the encoder at least :data:`BF16_MIN_WIDTH` wide, else fp32.

    int8 is never chosen: it is the fastest only on some CPUs and models, and changes results
    more than bf16 (``benchmarks/bench_engines.py``); ``--precision int8`` asks for it.
    """
    if not native_bf16(flags) or (width is not None and width < BF16_MIN_WIDTH):
        return "fp32"
    return "bf16"


def cpu_summary(flags: Optional[Iterable[str]] = None) -> str:
    """One line: the CPU, what it multiplies natively and what ``auto`` picks there."""
    have = set(cpu_flags() if flags is None else flags)
    simd = next(
        (name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("neon", "NEON"),
                                 ("asimd", "NEON")) if flag in have),
        "no AVX2",
    )  # fmt: skip
    bf16 = ", ".join(f for f in BF16_FLAGS if f in have)
    int8 = ", ".join(f for f in INT8_FLAGS if f in have)
    auto_text = auto_precision(have)
    if auto_text == "bf16":
        auto_text = f"bf16 for encoders {BF16_MIN_WIDTH} wide or more, else fp32"
    return (
        f"CPU {cpu_model()}: {simd}; bf16 {f'native ({bf16})' if bf16 else 'emulated'}; "
        f"int8 {f'native ({int8}): _int_mm' if int8 else 'without VNNI: exact fp32'} products; "
        f"--precision auto: {auto_text}"
    )
