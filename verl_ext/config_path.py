"""A path walk through a run's config that works on every shape verl hands out (no other import).

It lives outside ``verl_ext.envs`` because importing that package registers the env adapters (OpenSpiel among
them), which the trainer-side patches must not pull into every process just to read a config key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def config_at(config: Any, *keys: str) -> Any:
    """The node at ``keys`` under ``config`` (a mapping, OmegaConf's DictConfig included, or an object with those
    attributes, such as a trainer's config); None where a key is absent."""
    node = config
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)
    return node
