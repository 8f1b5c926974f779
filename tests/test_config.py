"""Strict config: unknown keys, wrong types and inconsistent settings name the key path."""

import re
from pathlib import Path

import pytest

from wenet_lite.config import (
    ConfigError,
    config_from_dict,
    config_to_dict,
    load_config,
    save_config,
)
from wenet_lite.model import build_model

CONF = Path(__file__).resolve().parents[1] / "conf"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "yaml_text,key,words",
    [
        ("encoder:\n  d_model: 250\n  num_heads: 4\n", "encoder.d_model", "not divisible"),
        ("encoder:\n  num_blockz: 3\n", "encoder.num_blockz", "unknown key"),
        ("traine:\n  lr: 1\n", "traine", "unknown key"),
        ("encoder:\n  num_blocks: six\n", "encoder.num_blocks", "must be an integer"),
        ("encoder:\n  causal_conv: 1\n", "encoder.causal_conv", "true or false"),
        ("train:\n  lr: fast\n", "train.lr", "must be a number"),
        ("encoder:\n  chunk:\n    mode: sometimes\n", "encoder.chunk.mode", "must be one of"),
        ("data:\n  fbank: gpu\n", "data.fbank", "must be one of"),
        ("train:\n  compile: maybe\n", "train.compile", "true or false"),
        ("train:\n  deterministic: 1\n", "train.deterministic", "true or false"),
        ("encoder:\n  chunk:\n    size: 0\n", "encoder.chunk.size", "positive"),
        (
            "encoder:\n  causal_conv: false\n  chunk:\n    mode: dynamic\n",
            "encoder.causal_conv",
            "streaming would not match",
        ),
        (
            "encoder:\n  causal_conv: false\n  chunk:\n    mode: static\n",
            "encoder.causal_conv",
            "streaming would not match",
        ),
        ("encoder:\n  pos_enc: shaw\n", "encoder.max_rel_dist", "shaw"),
        ("encoder:\n  subsampling_rate: 5\n", "encoder.subsampling_rate", "4, 6 or 8"),
        ("data:\n  speed_perturb: [0.9, -1]\n", "data.speed_perturb", "positive"),
        ("encoder: 3\n", "encoder", "mapping"),
        ("train:\n  schedule: cosine\n  warmup_steps: 10\n", "train.schedule", "max_steps"),
        ("encoder:\n  subsampling_channels: -1\n", "encoder.subsampling_channels", ">= 0"),
        ("encoder:\n  d_model: 1000000\n", "encoder.d_model", "must be <= 8192"),
        ("encoder:\n  num_blocks: 100000\n", "encoder.num_blocks", "must be <= 256"),
        ("decoder:\n  ffn_dim: 10000000\n", "decoder.ffn_dim", "must be <= 65536"),
    ],
)
def test_bad_config_names_key_path(tmp_path: Path, yaml_text: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, yaml_text))
    assert err.value.path == key
    assert str(err.value).startswith(key + ":")
    assert words in str(err.value)


def test_overrides(tmp_path: Path) -> None:
    cfg = load_config(
        CONF / "conformer_u2.yaml",
        [
            "encoder.num_blocks=6",
            "encoder.chunk.mode=full",
            "train.lr=5e-4",
            "data.speed_perturb=[1.0]",
        ],
    )
    assert cfg.encoder.num_blocks == 6
    assert cfg.encoder.chunk.mode == "full"
    assert cfg.train.lr == 5e-4
    assert cfg.data.speed_perturb == (1.0,)
    with pytest.raises(ConfigError, match="encoder.num_blockz: unknown key"):
        load_config(CONF / "conformer_u2.yaml", ["encoder.num_blockz=6"])
    with pytest.raises(ConfigError, match="not of the form"):
        load_config(CONF / "conformer_u2.yaml", ["encoder.num_blocks"])


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "encoder: [unclosed\n"))


def test_round_trip_through_dict_and_yaml(tmp_path: Path) -> None:
    cfg = load_config(CONF / "conformer_u2.yaml", ["encoder.num_blocks=3"])
    assert config_from_dict(config_to_dict(cfg)) == cfg
    save_config(cfg, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == cfg


@pytest.mark.parametrize("name", sorted(p.name for p in CONF.glob("*.yaml")))
def test_shipped_configs_load_and_build(name: str) -> None:
    cfg = load_config(CONF / name, ["encoder.num_blocks=1"])  # one block keeps the test quick
    model = build_model(cfg, cfg.tokenizer.vocab_size)
    assert model.ctc.proj.out_features == cfg.tokenizer.vocab_size


def test_main_configs_have_the_documented_dims() -> None:
    u2 = load_config(CONF / "conformer_u2.yaml")
    full = load_config(CONF / "conformer_full.yaml")
    c16 = load_config(CONF / "conformer_chunk16.yaml")
    for cfg in (u2, full, c16):
        e = cfg.encoder
        assert (e.num_blocks, e.d_model, e.num_heads, e.ffn_dim, e.conv_kernel) == (
            12,
            256,
            4,
            2048,
            15,
        )
        assert (e.subsampling_rate, cfg.features.num_mel_bins) == (4, 80)
    assert (u2.encoder.chunk.mode, u2.encoder.causal_conv) == ("dynamic", True)
    assert (full.encoder.chunk.mode, full.encoder.causal_conv) == ("full", False)
    assert (c16.encoder.chunk.mode, c16.encoder.chunk.size) == ("static", 16)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "holds no settings (an empty config file)"),
        (b"# only a comment\n", "holds no settings"),
        (b"encoder:\n  d_model: 32\n  chunk:\n    size: 4\n    size: 8\n",
         "encoder.chunk.size: appears twice (line 5 of"),
        (b"train:\n  lr: 1.0\ntrain:\n  lr: 2.0\n", "train: appears twice (line 3 of"),
        (b"encoder:\n  d_model: \xff\n", "is not UTF-8 text"),
        (b"features:\n  ? {a: 1}\n  : 3\n", "is not valid YAML: while constructing a mapping"),
        (b"? [1, 2]\n: x\n", "found a list as a key"),
    ],
)  # fmt: skip
def test_silently_wrong_files_are_errors(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=re.escape(words)) as info:
        load_config(path)
    assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_shipped_configs_are_found_by_name(tmp_path, monkeypatch) -> None:
    from wenet_lite.config import find_config, load_config, shipped_configs

    assert {"conformer_u2", "synthetic_small", "tiny_test"} <= set(shipped_configs())
    monkeypatch.chdir(tmp_path)  # no conf/ here: the package's own
    assert load_config("tiny_test") == load_config("tiny_test.yaml")
    assert find_config("conformer_u2").parent.name == "conf"
    (tmp_path / "tiny_test.yaml").write_text("model:\n  ctc_weight: 1.0\n")
    assert find_config("tiny_test.yaml") == Path("tiny_test.yaml")  # a path that exists wins
    with pytest.raises(FileNotFoundError, match=r"nope.*shipped configs, by name: .*tiny_test"):
        find_config("nope")
    with pytest.raises(FileNotFoundError, match="config file not found: sub/tiny_test"):
        find_config("sub/tiny_test")  # a path with a folder is only ever a path


def _anchor_bomb(levels: int = 9) -> str:
    """1 KB of YAML whose value has 10^levels leaves (aliases share one list per level)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines)


def test_an_anchor_bomb_in_a_value_is_one_short_line(tmp_path: Path) -> None:
    """The error shows the value cut short: formatting all of it took minutes and GBs."""
    text = "train:\n  lr:\n    - " + _anchor_bomb().replace("\n", "\n    - ")
    assert len(text) < 2000
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert str(err.value).startswith("train.lr: must be a number, got list [")
    assert len(str(err.value)) < 300


def test_the_hybrid_config_has_the_documented_loss_shares() -> None:
    hybrid = load_config(CONF / "conformer_u2_hybrid.yaml")
    u2 = load_config(CONF / "conformer_u2.yaml")
    m = hybrid.model
    ctc, att = (
        (1 - m.transducer_weight) * m.ctc_weight,
        (1 - m.transducer_weight) * (1 - m.ctc_weight),
    )
    assert (m.transducer_weight, round(ctc, 6), round(att, 6)) == (0.75, 0.1, 0.15)
    assert hybrid.encoder == u2.encoder and hybrid.decoder == u2.decoder
    t = hybrid.transducer
    assert (t.predictor_dim, t.joiner_dim, t.context, t.prune_range) == (512, 512, 2, 5)
