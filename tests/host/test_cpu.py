"""What the CPU offers, read from its flags, and what ``--precision auto`` picks (faked flags)."""

from __future__ import annotations

import os
import subprocess

import pytest

from wenet_lite.host.cpu import (
    FLAGS_ENV,
    auto_precision,
    cpu_flags,
    cpu_summary,
    int8_kernel,
    native_bf16,
)
from wenet_lite.recognizer import EngineSpec

AMD_AVX2 = "fpu sse4_2 avx avx2 fma"
XEON_AMX = "avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8"


def test_auto_is_bf16_only_where_it_is_native() -> None:
    assert auto_precision(AMD_AVX2.split()) == "fp32"
    assert auto_precision(XEON_AMX.split()) == "bf16"
    assert auto_precision(["avx512f", "avx512_bf16"]) == "bf16"  # Zen 4, Cooper Lake
    assert auto_precision(["avx512f", "avx512_vnni"]) == "fp32"  # int8 alone: not chosen
    assert auto_precision([]) == "fp32"  # flags unreadable
    assert auto_precision(XEON_AMX.split(), width=256) == "bf16"
    assert auto_precision(XEON_AMX.split(), width=255) == "fp32"  # too narrow to pay
    assert auto_precision(AMD_AVX2.split(), width=512) == "fp32"


def test_int8_kernel_is_int_mm_only_where_int8_is_native() -> None:
    assert int8_kernel(AMD_AVX2.split()) == "fp32"
    assert int8_kernel(XEON_AMX.split()) == "int_mm"
    assert int8_kernel(["avx2", "avx_vnni"]) == "int_mm"  # Alder Lake and later
    assert int8_kernel([]) == "fp32"


def test_the_summary_line_names_the_cpu_and_the_choice() -> None:
    line = cpu_summary(AMD_AVX2.split())
    assert (
        "AVX2" in line
        and "bf16 emulated" in line
        and "int8 without VNNI: exact fp32 products" in line
    )
    assert line.endswith("--precision auto: fp32")
    line = cpu_summary(XEON_AMX.split())
    assert "AVX-512" in line and "bf16 native (amx_bf16, avx512_bf16)" in line
    assert "int8 native (amx_int8, avx512_vnni): _int_mm products" in line and line.endswith(
        "auto: bf16 for encoders 256 wide or more, else fp32"
    )


def test_engine_specs_resolve_auto_by_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLAGS_ENV, AMD_AVX2)
    assert not native_bf16() and EngineSpec().resolved() == "fp32"
    monkeypatch.setenv(FLAGS_ENV, XEON_AMX)
    assert cpu_flags() == frozenset(XEON_AMX.split())
    assert EngineSpec().resolved() == "bf16"
    assert EngineSpec().resolved(width=256) == "bf16"  # conformer_u2's width
    assert EngineSpec().resolved(width=144) == "fp32"  # the demo model's: bf16 does not pay
    assert EngineSpec(precision="bf16").resolved(width=144) == "bf16"
    assert EngineSpec(precision="fp32").resolved() == "fp32"  # a flag forces one
    assert EngineSpec(precision="int8").resolved() == "int8"
    assert EngineSpec().resolved(exported=True) == "fp32"  # an export directory's programs
    assert EngineSpec("executorch").resolved() == "fp32"
    assert EngineSpec("onnxruntime").resolved() == "fp32"
    assert EngineSpec(device="cuda").resolved() == "fp32"
    assert cpu_flags(real=True) != frozenset(XEON_AMX.split())  # the real ones stay readable


def test_version_prints_the_cpu_line() -> None:
    env_line = subprocess.run(
        ["wenet-lite", "--version"], capture_output=True, text=True, check=True,
        env={**os.environ, FLAGS_ENV: XEON_AMX},
    ).stdout.splitlines()  # fmt: skip
    assert env_line[0].startswith("wenet-lite ") and len(env_line) == 2
    assert env_line[1].startswith("CPU ") and env_line[1].endswith(
        "--precision auto: bf16 for encoders 256 wide or more, else fp32"
    )
