"""Dataclass configs that reject unknown keys and name the offending key and value."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

C = TypeVar("C")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid. The message names the key and value."""


def to_plain(value: Any) -> Any:
    """OmegaConf containers / mappings / sequences -> plain dicts and lists (leaves untouched)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency via hydra-core
        pass
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _check_type(where: str, key: str, value: Any, annotation: Any) -> Any:
    """Coerce simple scalars (ints given as strings by a shell, etc.) and reject wrong types."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(where, key, value, arg)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
            return value.lower() in ("1", "true", "yes")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin in (list, tuple) or annotation in (list, tuple):
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):  # "hex,go" from a shell variable
            return [part.strip() for part in value.split(",") if part.strip()]
    elif origin is dict or annotation is dict:
        if isinstance(value, Mapping):
            return dict(value)
    else:
        return value
    raise ConfigError(f"{where}.{key}: expected {getattr(annotation, '__name__', annotation)}, got {value!r}")


def from_mapping(config_cls: type[C], values: Mapping[str, Any] | None, where: str) -> C:
    """Build ``config_cls`` from ``values``; unknown keys and wrong types raise ``ConfigError``."""
    values = to_plain(values or {})
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping of settings, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(fields))})")
    hints = typing.get_type_hints(config_cls)
    kwargs = {key: _check_type(where, key, value, hints[key]) for key, value in values.items()}
    config = config_cls(**kwargs)
    validate = getattr(config, "validate", None)
    if callable(validate):
        validate(where)
    return config
