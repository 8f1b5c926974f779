"""Property tests: whatever bytes, text or arrays reach the toolkit's readers, they either work
or raise the toolkit's documented error naming the input, never anything else.

Documented errors: the audio reader raises AudioError (a ValueError naming the file); the
config loader and ``--set`` overrides raise ConfigError (naming the key or the file); the
manifest reader raises ValueError naming the file (FileNotFoundError when there is none).
Examples are derandomized (the same ones on every run), so a failure reproduces; for a longer
random hunt: ``WENET_LITE_HYPOTHESIS_RANDOM=1 WENET_LITE_HYPOTHESIS_EXAMPLES=2000 pytest
tests/test_properties.py``.
"""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from wenet_lite.config import (
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
)
from wenet_lite.data.manifest import read_manifest
from wenet_lite.features.audio import AudioError, load_audio

PROPERTY = settings(
    max_examples=int(os.environ.get("WENET_LITE_HYPOTHESIS_EXAMPLES", "100")),
    derandomize=os.environ.get("WENET_LITE_HYPOTHESIS_RANDOM") != "1",
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _fresh(tmp_path: Path, name: str) -> Path:
    """A new file path per example (examples share the test's tmp_path)."""
    folder = tmp_path / f"ex{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    return folder / name


def _wav_header(num_bytes: int, channels: int, rate: int, bits: int) -> bytes:
    """A RIFF/WAVE header declaring ``num_bytes`` of PCM data."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, bits)
    return (
        b"RIFF" + struct.pack("<I", 36 + num_bytes) + b"WAVE"
        + b"fmt " + struct.pack("<I", 16) + fmt
        + b"data" + struct.pack("<I", num_bytes)
    )  # fmt: skip


def _check_audio(path: Path) -> None:
    try:
        samples = load_audio(path, 16000)
    except AudioError as e:
        assert str(path) in str(e)
        return
    assert samples.dtype == np.float32 and samples.ndim == 1 and samples.size > 0
    assert np.isfinite(samples).all()


# ---- the audio reader ------------------------------------------------------------------------


@PROPERTY
@given(data=st.binary(max_size=2000), suffix=st.sampled_from([".wav", ".flac", ".mp3", ".ogg"]))
def test_random_bytes_into_the_audio_reader(tmp_path, data, suffix):
    path = _fresh(tmp_path, "audio" + suffix)
    path.write_bytes(data)
    _check_audio(path)


@PROPERTY
@given(
    body=st.binary(max_size=600),
    declared=st.integers(0, 2**32 - 1),
    channels=st.integers(0, 9),
    rate=st.sampled_from([0, 1, 8000, 16000, 44100, 2**31]),
    bits=st.sampled_from([0, 8, 16, 24, 32, 7]),
)
def test_wav_headers_with_random_fields_and_bodies(tmp_path, body, declared, channels, rate, bits):
    """Past the magic bytes: a header's sizes, channel count, rate and width all lie."""
    path = _fresh(tmp_path, "audio.wav")
    try:
        header = _wav_header(declared, channels, rate, bits)
    except struct.error:
        return
    path.write_bytes(header[:40] + struct.pack("<I", declared % 2**32) + body)
    _check_audio(path)


_samples = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.floats(-1, 1, width=32),
    ),
    max_size=400,
)


@PROPERTY
@given(samples=_samples, rate=st.sampled_from([8000, 16000, 22050, 48000]))
@example(samples=[1.7014117e38, 1.7014118e38], rate=8000)  # resampled, overflowed to NaN
def test_random_arrays_written_as_audio(tmp_path, samples, rate):
    """Any float samples, NaN, inf, silence, clipping, no samples at all."""
    path = _fresh(tmp_path, "audio.wav")
    buf = io.BytesIO()
    sf.write(buf, np.asarray(samples, dtype=np.float32), rate, format="WAV", subtype="FLOAT")
    path.write_bytes(buf.getvalue())
    _check_audio(path)


# ---- the config loader and --set -------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=True),
    st.text(max_size=12),
)  # fmt: skip
_keys = st.one_of(
    st.sampled_from(list(config_to_dict(ExperimentConfig()))),
    st.text(max_size=8),
)
_sections = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)


def _check_config(path: Path) -> None:
    try:
        cfg = load_config(path)
    except ConfigError:
        return
    assert isinstance(cfg, ExperimentConfig)


@PROPERTY
@given(data=st.binary(max_size=800))
def test_random_bytes_into_the_config_loader(tmp_path, data):
    path = _fresh(tmp_path, "conf.yaml")
    path.write_bytes(data)
    _check_config(path)


@PROPERTY
@given(text=st.text(max_size=400))
def test_random_text_into_the_config_loader(tmp_path, text):
    path = _fresh(tmp_path, "conf.yaml")
    path.write_text(text, encoding="utf-8")
    _check_config(path)


@PROPERTY
@given(tree=st.dictionaries(_keys, _sections, max_size=5))
def test_random_yaml_trees_into_the_config_loader(tmp_path, tree):
    """Well-formed YAML of the wrong shape: unknown keys, wrong types, lists for sections."""
    path = _fresh(tmp_path, "conf.yaml")
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    _check_config(path)


_override_keys = st.one_of(
    st.sampled_from(
        [f"{s}.{k}" for s, v in config_to_dict(ExperimentConfig()).items() for k in v]
        + list(config_to_dict(ExperimentConfig()))
    ),
    st.text(max_size=20),
)


@PROPERTY
@given(
    items=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.tuples(_override_keys, st.text(max_size=20)).map(lambda kv: f"{kv[0]}={kv[1]}"),
        ),
        max_size=4,
    )
)
def test_random_set_overrides(items):
    base = config_to_dict(ExperimentConfig())
    try:
        cfg = config_from_dict(apply_overrides(base, items))
    except ConfigError:
        return
    assert isinstance(cfg, ExperimentConfig)


# ---- the manifest reader ---------------------------------------------------------------------


def _check_manifest(path: Path) -> None:
    try:
        result = read_manifest(path)
    except ValueError as e:
        assert str(path) in str(e), str(e)
        return
    assert len(result.cuts) > 0


@PROPERTY
@given(data=st.binary(max_size=800), name=st.sampled_from(["data.list", "cuts.jsonl.gz"]))
def test_random_bytes_into_the_manifest_reader(tmp_path, data, name):
    path = _fresh(tmp_path, name)
    path.write_bytes(data)
    _check_manifest(path)


_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@PROPERTY
@given(
    lines=st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"key": _json_values, "wav": _json_values, "txt": _json_values},
                optional={"extra": _json_values},
            ),
            _json_values,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_random_data_list_lines(tmp_path, lines):
    """JSON lines of every shape: fields missing, of the wrong type, naming no file."""
    path = _fresh(tmp_path, "data.list")
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    _check_manifest(path)
