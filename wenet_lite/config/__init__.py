"""Typed, strict configuration (schema.py: one frozen dataclass per component, read from YAML
with ``--set`` overrides) and the words of settings (fields.py: a message names a setting by
its field; each reader renders it, Python callers as keywords, the CLI as its flags)."""

from wenet_lite.config import schema
from wenet_lite.config.schema import (  # noqa: F401 - the package's names
    ChunkConfig,
    ConfigError,
    DataConfig,
    DecodeConfig,
    DecoderConfig,
    EncoderConfig,
    ExperimentConfig,
    FeatureConfig,
    ModelConfig,
    SpecAugConfig,
    TokenizerConfig,
    TrainConfig,
    TransducerConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    find_config,
    flag,
    load_config,
    read_config_dict,
    save_config,
    shipped_configs,
)

__all__ = schema.__all__
