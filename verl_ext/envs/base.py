"""The adapter protocol: what every environment (game family, puzzle family) provides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True)
class Task:
    """One prompt: a game position or a puzzle, fully determined by ``(env, case, seed)``.

    ``state`` is the adapter's own serialisation (a string); together with ``case`` it is all
    ``score`` needs, so it travels through verl in ``extra_info`` and comes back at reward time.
    """

    env: str
    case: str
    task_id: int
    seed: int
    messages: tuple[dict[str, str], ...]
    state: str
    ground_truth: str
    legal_moves: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreResult:
    """The reward for one response and the details behind it.

    ``score`` is in [0, 1]: ``format_weight * format_ok + (1 - format_weight) * task_score``, and
    ``task_score`` is 0 unless the answer is valid (a legal move, an answer the puzzle credits).
    """

    score: float
    format_ok: bool
    valid: bool
    task_score: float
    parsed: str | None
    reason: str = ""
    details: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class EnvAdapter(Protocol):
    """An environment family. One file per adapter, one line in ``verl_ext/envs/__init__.py``."""

    name: ClassVar[str]
    config_cls: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def cases(self) -> list[str]:
        """The case strings this configuration enables, in a stable order."""
        ...

    def num_tasks(self, case: str) -> int:
        """Size of the training pool of ``case`` (task ids ``0..num_tasks-1``)."""
        ...

    def make_task(self, case: str, index: int, seed: int) -> Task:
        """Build task ``index`` of ``case`` deterministically from ``seed``."""
        ...

    def score(self, case: str, state: str, response: str) -> ScoreResult:
        """Score a model response for the task serialised as ``state``. Must not raise on any string."""
        ...

    def reference_answer(self, task: Task) -> str | None:
        """A good answer in the expected format (engine/solver choice) for SFT data; None if there is none."""
        ...
