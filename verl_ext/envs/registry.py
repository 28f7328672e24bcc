"""Env registry: name -> adapter class (which names its own config dataclass)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from .base import EnvAdapter
from .config import ConfigError, from_mapping, to_plain
from .system_prompt import split_system_prompt

_REGISTRY: dict[str, type] = {}
_CACHE: dict[tuple[str, str], EnvAdapter] = {}
_CACHE_LOCK = threading.Lock()


def register_env(adapter_cls: type) -> type:
    """Register an adapter class under ``adapter_cls.name``. Refuses duplicates and malformed classes."""
    name = getattr(adapter_cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{adapter_cls!r} needs a class attribute `name` that is an identifier, got {name!r}")
    if not hasattr(adapter_cls, "config_cls"):
        raise TypeError(f"{adapter_cls.__name__} needs a class attribute `config_cls` (a dataclass)")
    missing = [m for m in ("cases", "num_tasks", "make_task", "score", "reference_answer")
               if not callable(getattr(adapter_cls, m, None))]
    if missing:
        raise TypeError(f"{adapter_cls.__name__} does not implement {', '.join(missing)}")
    if name in _REGISTRY and _REGISTRY[name] is not adapter_cls:
        raise ValueError(f"env {name!r} is already registered to {_REGISTRY[name].__name__}")
    _REGISTRY[name] = adapter_cls
    return adapter_cls


def env_names() -> list[str]:
    """Registered env names, in registration order."""
    return list(_REGISTRY)


def make_env(name: str, settings: Mapping[str, Any] | None = None, where: str | None = None) -> EnvAdapter:
    """Build the adapter ``name`` from a settings mapping, validating every key."""
    where = where or f"data.env.{name}"
    if name not in _REGISTRY:
        raise ConfigError(f"{where}: unknown env {name!r} (registered: {', '.join(_REGISTRY)})")
    adapter_cls = _REGISTRY[name]
    system_prompt, settings = split_system_prompt(settings, where)  # ours, not the env's (envs/system_prompt.py)
    config = from_mapping(adapter_cls.config_cls, settings, where)
    adapter = adapter_cls(config, where=where)
    adapter.system_prompt = system_prompt  # type: ignore[attr-defined]
    return adapter


def cached_env(name: str, settings_json: str, overrides: Mapping[str, Any] | None = None) -> EnvAdapter:
    """One adapter (with its caches) per distinct (env, settings) in this process.

    ``settings_json`` is the env's settings as a row carries them (``extra_info["env_config"]``);
    ``overrides`` are merged on top. Used by the reward function and the game agent loop, which run in
    verl's worker processes and rebuild adapters from the rows they see.
    """
    settings = json.loads(settings_json) if settings_json else {}
    if overrides:
        settings = {**settings, **to_plain(overrides)}
    key = (name, json.dumps(settings, sort_keys=True))
    with _CACHE_LOCK:
        adapter = _CACHE.get(key)
        if adapter is None:
            adapter = make_env(name, settings)
            _CACHE[key] = adapter
    return adapter
