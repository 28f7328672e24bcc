"""``system_prompt``: a system message put first in every prompt of an env.

Set for all envs (``data.env.system_prompt``) or per env (``data.env.<env>.system_prompt``, which wins). Unset or
empty: no system message, as before (a chat template may then insert its own default: SmolLM2's says "You are a
helpful AI assistant named SmolLM, trained by Hugging Face", which the model echoed). The mixture puts the
effective value into each env's settings, so it travels in ``extra_info["env_config"]`` to verl's workers;
``make_env`` takes it off before the env's own config is built and keeps it on the adapter. Every place that
builds a prompt goes through :func:`with_system_prompt`: ``EnvMixture.build`` (training rows, eval, export, demo),
the SFT export's game demonstrations, the game agent loop's turns and the eval arena's turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .config import ConfigError, to_plain

KEY = "system_prompt"
MAX_CHARS = 20_000


def check_system_prompt(value: Any, where: str) -> str | None:
    """A valid system prompt (None when unset or blank); a non-string or a huge one names ``where``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string (the system message's text), got {value!r}")
    if len(value) > MAX_CHARS:
        raise ConfigError(f"{where}: {len(value)} characters; a system prompt of at most {MAX_CHARS} is expected")
    return value if value.strip() else None


def split_system_prompt(settings: Mapping[str, Any] | None, where: str) -> tuple[str | None, dict[str, Any]]:
    """``(system prompt, the other settings)`` of one env's settings mapping."""
    plain = to_plain(settings) if settings is not None else {}
    if not isinstance(plain, Mapping) or KEY not in plain:
        return None, plain  # a non-mapping: from_mapping names it
    rest = dict(plain)
    return check_system_prompt(rest.pop(KEY), f"{where}.{KEY}"), rest


def with_system_prompt(messages: Sequence[Mapping[str, str]], system_prompt: str | None) -> tuple[dict[str, str], ...]:
    """``messages`` with ``system_prompt`` as the first message (replacing a system message already there);
    unchanged (as a tuple of dicts) when there is no system prompt."""
    chat = tuple(dict(message) for message in messages)
    if not system_prompt:
        return chat
    if chat and chat[0].get("role") == "system":
        chat = chat[1:]
    return ({"role": "system", "content": system_prompt}, *chat)


def system_prompt_of(adapter: object) -> str | None:
    """The system prompt ``make_env`` attached to an adapter (None for adapters built another way)."""
    value = getattr(adapter, KEY, None)
    return value if isinstance(value, str) and value else None
