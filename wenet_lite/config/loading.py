"""Reading and writing experiment configs: YAML (a ``SafeLoader`` that refuses duplicate and
unhashable keys), ``--set a.b=value`` overrides, and the typed build of
:class:`~wenet_lite.config.schema.ExperimentConfig` from plain dicts (unknown keys and wrong
types named by their dotted path)."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any, Dict, Iterable, List, Literal

import yaml

from wenet_lite.config.schema import ConfigError, ExperimentConfig, FieldRule, short_repr
from wenet_lite.fileio import write_text_atomic

__all__ = [
    "SHIPPED_CONFIGS",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "find_config",
    "load_config",
    "read_config_dict",
    "save_config",
    "shipped_configs",
]

_SCIENTIFIC = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against the type hint ``tp`` and return it in canonical form."""
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], path)
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, f"must be one of {list(args)}, got {short_repr(value)}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(
                path, f"must be a list, got {type(value).__name__} {short_repr(value)}"
            )
        item = args[0] if args else Any
        items = [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"must be true or false, got {short_repr(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                path, f"must be an integer, got {type(value).__name__} {short_repr(value)}"
            )
        return value
    if tp is float:
        # PyYAML (YAML 1.1) reads 1e-3 without a dot as a string; accept that spelling.
        if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(
                path, f"must be a number, got {type(value).__name__} {short_repr(value)}"
            )
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(
                path, f"must be a string, got {type(value).__name__} {short_repr(value)}"
            )
        return value
    return value


def _build(cls: Any, data: Any, prefix: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = prefix or "config"
        raise ConfigError(prefix, f"{where} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            _join(prefix, str(unknown[0])), f"unknown key (valid keys: {', '.join(sorted(names))})"
        )
    kwargs = {k: _convert(v, hints[k], _join(prefix, k)) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except FieldRule as e:
        raise ConfigError(_join(prefix, e.name), e.message) from None


def config_from_dict(data: Dict[str, Any]) -> ExperimentConfig:
    """Build and validate an :class:`ExperimentConfig` from plain nested dicts."""
    return _build(ExperimentConfig, data, "")


def config_to_dict(cfg: ExperimentConfig) -> Dict[str, Any]:
    """Plain nested dicts (tuples as lists) that :func:`config_from_dict` reads back."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return plain(dataclasses.asdict(cfg))


def apply_overrides(data: Dict[str, Any], overrides: Iterable[str]) -> Dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to nested dicts, returning a copy."""
    import copy

    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("", f"override {item!r} is not of the form key.path=value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError(key, f"cannot parse override value {raw!r}: {e}") from None
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Read a YAML experiment config, apply ``key.path=value`` overrides and validate."""
    data = read_config_dict(path, overrides)
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(e.path, f"{e.message} (in {path})") from None


SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "conf"
"""the configs that come with the package (``conformer_u2``, ``synthetic_small``, ...)"""


def shipped_configs() -> List[str]:
    """The names of the configs that come with the package."""
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))


def find_config(path: str | Path) -> Path:
    """A config file: a path that exists, else a shipped config by name (``conformer_u2`` or
    ``conformer_u2.yaml``). FileNotFoundError names the path and the shipped names."""
    given = Path(path)
    if given.is_dir():
        raise ConfigError("", f"{given} is a directory, not a config file")
    if given.is_file():
        return given
    if given.parent == Path("."):
        shipped = SHIPPED_CONFIGS / (given.name if given.suffix else f"{given.name}.yaml")
        if shipped.is_file():
            return shipped
    raise FileNotFoundError(
        f"config file not found: {given} (shipped configs, by name: {', '.join(shipped_configs())})"
    )


def read_config_dict(path: str | Path, overrides: Iterable[str] = ()) -> Dict[str, Any]:
    """The settings a YAML config file and its overrides give explicitly (not validated, no
    defaults filled in)."""
    path = find_config(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # a SafeLoader
    except UnicodeDecodeError as e:
        raise ConfigError("", f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except _DuplicateKey as e:
        raise ConfigError(e.key, f"appears twice (line {e.line} of {path})") from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"{path} is not valid YAML: {e}") from None
    if data is None:  # an empty file would silently mean "all defaults"
        raise ConfigError("", f"{path} holds no settings (an empty config file)")
    if not isinstance(data, dict):
        raise ConfigError("", f"{path} must hold a mapping of sections, got {type(data).__name__}")
    try:
        return apply_overrides(data, overrides)
    except ConfigError as e:
        raise ConfigError(e.path, f"{e.message} (in {path})") from None


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load``, except that a key given twice in a mapping is an error (PyYAML keeps
    the last one silently); the error carries the dotted key path and the line."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._paths: Dict[int, str] = {}  # id of a mapping node -> its dotted path

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Dict[Any, Any]:
        seen: Dict[Any, int] = {}
        prefix = self._paths.get(id(node), "")
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):  # a mapping or list as a key
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found a {type(key).__name__} as a key", key_node.start_mark,
                )  # fmt: skip
            if key in seen:
                raise _DuplicateKey(f"{prefix}{key}", key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line
        for key_node, value_node in node.value:  # children learn their dotted path
            if isinstance(value_node, yaml.MappingNode):
                self._paths[id(value_node)] = f"{prefix}{self.construct_object(key_node)}."
        return super().construct_mapping(node, deep=deep)


def save_config(cfg: ExperimentConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (readable back with :func:`load_config`)."""
    write_text_atomic(path, yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
