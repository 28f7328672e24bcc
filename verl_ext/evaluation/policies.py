"""What is evaluated: model-backed and scripted policies behind one interface.

A policy receives chat prompts (the tasks' own messages) and returns one reply text per prompt; the
reply is then parsed and scored by the env adapter exactly as a training rollout would be.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..envs.config import ConfigError
from .backends import Backend, GenerationSettings, check_model_dir, make_backend

SCRIPTED_PREFIX = "scripted:"
SCRIPTED_KINDS = ("first", "random", "illegal", "tactician")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


@dataclass(frozen=True)
class MoveRequest:
    """One prompt for a policy: the chat, the legal moves when there are any, and a seed for its randomness.

    ``tactical_moves``: the legal moves (as written in ``legal_moves``) a one-ply tactician picks from
    (``envs/tactics.py``: the winning moves, else those that do not let the opponent win at once, else all), from
    the real game state; empty where the position has no one-ply analysis (puzzles, games without tactics). Only
    ``scripted:tactician`` reads them; a model sees the chat alone."""

    messages: tuple[dict[str, str], ...]
    legal_moves: tuple[str, ...] = ()
    seed: int = 0
    tactical_moves: tuple[str, ...] = ()


class Policy(Protocol):
    """Answers a batch of prompts with one reply text each (in the same order)."""

    name: str

    def respond(self, requests: Sequence[MoveRequest]) -> list[str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ModelSpec:
    """One ``--models`` entry: ``name=path[,adapter=path][,trust_remote_code=true]`` or ``name=scripted:KIND``."""

    name: str
    path: str
    adapter: str | None = None
    trust_remote_code: bool = False

    @property
    def scripted(self) -> str | None:
        """The scripted policy kind, or None for a model."""
        return self.path[len(SCRIPTED_PREFIX):] if self.path.startswith(SCRIPTED_PREFIX) else None

    def describe(self) -> dict[str, object]:
        """JSON-ready description (no machine-specific state)."""
        if self.scripted:
            return {"kind": "scripted", "policy": self.scripted}
        return {"kind": "model", "path": self.path, "adapter": self.adapter,
                "trust_remote_code": self.trust_remote_code}


def parse_model_spec(text: str, flag: str = "--models") -> ModelSpec:
    """Parse one ``--models`` entry; the error names the entry and what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{flag}: empty model entry {text!r}")
    head, *options = [part.strip() for part in text.split(",")]
    if "=" in head:
        name, path = (s.strip() for s in head.split("=", 1))
    else:
        name, path = Path(head.rstrip("/")).name, head
    if not _NAME.match(name or ""):
        raise ConfigError(f"{flag}: model name {name!r} in {text!r} must be letters, digits, '_', '.', '+', '-'")
    if not path:
        raise ConfigError(f"{flag}: model {name!r} has no path (expected name=path[,adapter=path])")
    adapter, trust = None, False
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not value:
            raise ConfigError(f"{flag}: option {option!r} of model {name!r} must be key=value "
                              "(adapter=PATH or trust_remote_code=true)")
        if key == "adapter":
            adapter = value
        elif key == "trust_remote_code":
            if value.lower() not in _TRUE + _FALSE:
                raise ConfigError(f"{flag}: trust_remote_code={value!r} of model {name!r} must be true or false")
            trust = value.lower() in _TRUE
        else:
            raise ConfigError(f"{flag}: unknown option {key!r} of model {name!r} (known: adapter, trust_remote_code)")
    spec = ModelSpec(name, path, adapter, trust)
    if spec.scripted is not None:
        if spec.scripted not in SCRIPTED_KINDS:
            raise ConfigError(f"{flag}: unknown scripted policy {spec.scripted!r} of model {name!r} "
                              f"(choose from {', '.join(SCRIPTED_PREFIX + k for k in SCRIPTED_KINDS)})")
        if adapter:
            raise ConfigError(f"{flag}: scripted policy {name!r} takes no adapter")
    else:
        check_model_dir(path, f"{flag} {name}")
        if adapter:
            check_model_dir(adapter, f"{flag} {name} adapter")
    return spec


def parse_model_specs(entries: Sequence[str], flag: str = "--models") -> list[ModelSpec]:
    """Parse every entry and refuse duplicate names."""
    specs = [parse_model_spec(entry, flag) for entry in entries]
    if not specs:
        raise ConfigError(f"{flag}: name at least one model (e.g. --models base=/path/to/model)")
    names = [s.name for s in specs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{flag}: model name {name!r} is used twice; give each model its own name")
    return specs


class ModelPolicy:
    """A language model behind a generation backend."""

    def __init__(self, name: str, backend: Backend) -> None:
        self.name = name
        self.backend = backend

    def respond(self, requests: Sequence[MoveRequest]) -> list[str]:
        if not requests:
            return []
        return self.backend.generate([r.messages for r in requests], [r.seed for r in requests])

    def close(self) -> None:
        self.backend.close()


class ScriptedPolicy:
    """Baselines and test doubles that answer in the expected format without a model.

    ``first``: the first legal move; ``random``: a uniformly random legal move (seeded per request);
    ``illegal``: a well-formed answer that is never a legal move; ``tactician``: the one-ply tactician of
    ``envs/tactics.py``, a uniformly random move (seeded per request) among the request's ``tactical_moves`` (a
    win where there is one, else a move that does not let the opponent win at once), among the legal moves where
    the request has none (a game without one-ply tactics: then it plays as ``random``). Without legal moves
    (puzzles) ``first``, ``random`` and ``tactician`` answer ``?``.
    """

    def __init__(self, name: str, kind: str) -> None:
        if kind not in SCRIPTED_KINDS:
            raise ValueError(f"unknown scripted policy {kind!r} (choose from {SCRIPTED_KINDS})")
        self.name = name
        self.kind = kind

    def _move(self, request: MoveRequest) -> str:
        moves = request.legal_moves
        if self.kind == "illegal":
            move = "no-such-move"
            while move in moves:
                move += "!"
            return move
        if not moves:
            return "?"
        if self.kind == "first":
            return moves[0]
        if self.kind == "tactician" and request.tactical_moves:
            moves = request.tactical_moves
        return random.Random(request.seed).choice(moves)

    def respond(self, requests: Sequence[MoveRequest]) -> list[str]:
        return [f"<answer>{self._move(r)}</answer>" for r in requests]

    def close(self) -> None:
        return None


class RecordingPolicy:
    """Wraps a policy and keeps every (request, reply) it answered, in order, in ``log`` (for analyses of what a
    model said in arena games)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.log: list[tuple[MoveRequest, str]] = []

    def respond(self, requests: Sequence[MoveRequest]) -> list[str]:
        replies = self.policy.respond(requests)
        self.log.extend(zip(requests, replies))
        return replies

    def close(self) -> None:
        self.policy.close()


def make_policy(spec: ModelSpec, backend: str, settings: GenerationSettings) -> Policy:
    """Load the policy of ``spec`` (a model through ``backend``, or a scripted baseline)."""
    if spec.scripted is not None:
        return ScriptedPolicy(spec.name, spec.scripted)
    return ModelPolicy(spec.name, make_backend(backend, spec.path, spec.adapter, settings, spec.trust_remote_code))


def clip(reply: object, limit: int = 400) -> str:
    """A short, printable, valid-UTF-8 excerpt of a reply (whatever the reply is) for the results file."""
    text = reply if isinstance(reply, str) else repr(reply)
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def respond_all(policy: Policy, requests: Sequence[MoveRequest], desc: str, progress: bool,
                chunk: int = 64) -> list[str]:
    """All replies, asked in chunks of ``chunk`` prompts so that a progress bar can follow."""
    from tqdm import tqdm

    replies: list[str] = []
    with tqdm(total=len(requests), desc=desc, unit="prompt", disable=not progress, leave=False) as bar:
        for start in range(0, len(requests), chunk):
            batch = requests[start:start + chunk]
            answers = policy.respond(batch)
            if len(answers) != len(batch):
                raise RuntimeError(f"policy {policy.name!r} returned {len(answers)} replies for {len(batch)} prompts")
            replies += answers
            bar.update(len(batch))
    return replies
