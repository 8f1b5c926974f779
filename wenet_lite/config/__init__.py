"""Typed, strict configuration (schema.py: one frozen dataclass per component; loading.py:
read from YAML with ``--set`` overrides, written back) and the words of settings (fields.py:
a message names a setting by its field; each reader renders it, Python callers as keywords,
the CLI as its flags)."""

from wenet_lite.config import loading, schema
from wenet_lite.config.loading import (  # noqa: F401 - the package's names
    apply_overrides,
    config_from_dict,
    config_to_dict,
    find_config,
    load_config,
    read_config_dict,
    save_config,
    shipped_configs,
)
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
    flag,
)

__all__ = [n for n in schema.__all__ if n not in ("FieldRule", "SIZE_LIMITS", "short_repr")]
__all__ += loading.__all__
