"""Which single-move training positions a run keeps (``data.env.train_positions``): ``all``, or ``tactical`` only.

``tactical`` keeps the positions of two-player perfect-information games that have a one-ply tactic
(``verl_ext/envs/tactics.py``): a move that wins at once, or a threat to block (some moves, not all, let the
opponent win at once). Those are the positions where the engine reward's moves differ most, and where a one-ply
tactician scores 0.95 / 0.93 on SmolLM2's held-out tic_tac_toe / connect_four positions against the fixed-move
line's 0.75 / 0.80 (docs/eval.md). On the rest GRPO's summed push mostly teaches a favourite move
(docs/runs/2026-11-27-cpu-advantage-pull/). Only the training plan is filtered: held-out positions stay all
positions, puzzles and whole-game rows are kept as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .envs import EnvAdapter, Task
from .envs.config import ConfigError
from .envs.tactics import has_tactics, one_ply

TRAIN_POSITIONS = ("all", "tactical")
FILTERED_ENV = "openspiel"


def check_train_positions(value: object, adapters: Mapping[str, EnvAdapter], where: str) -> str:
    """``train_positions`` as one of ``TRAIN_POSITIONS``, refused by name where the configured ``adapters`` have
    no positions it could filter."""
    if value not in TRAIN_POSITIONS:
        raise ConfigError(f"{where}: expected one of {', '.join(TRAIN_POSITIONS)} (which single-move training "
                          f"positions to keep), got {value!r}")
    if value == "all":
        return "all"
    if FILTERED_ENV not in adapters:
        raise ConfigError(f"{where}: {value!r} filters the {FILTERED_ENV} env's positions, and no {FILTERED_ENV} env "
                          f"is configured")
    positions = adapters[FILTERED_ENV]
    if getattr(positions.config, "task_mode", "move") == "game":
        env_where = where.rsplit(".", 1)[0]
        raise ConfigError(f"{where}: {value!r} filters single-move positions, and {env_where}.{FILTERED_ENV}.task_mode "
                          f"is 'game' (whole games only): nothing to filter")
    for case in positions.cases():  # tactical needs every case to have one-ply tactics
        if not has_tactics(case):
            raise ConfigError(f"{where}: 'tactical' keeps positions with an immediate win or a threat to block, "
                              f"which only two-player games of perfect information have; case {case!r} is not one "
                              f"(use train_positions=all, or leave {case!r} out)")
    return str(value)


def is_tactical(task: Task) -> bool:
    """Whether ``task`` stays in a ``tactical`` plan: a whole-game row always; a position when its player to move
    can win at once or must block."""
    if task.info.get("mode") == "game":
        return True
    tactics = one_ply(task.case, task.state)
    return tactics is not None and tactics.has_tactic


def position_filter(setting: str, env: str) -> Callable[[Task], bool] | None:
    """The predicate a training task of ``env`` must pass under ``setting``; None keeps every task."""
    return is_tactical if setting == "tactical" and env == FILTERED_ENV else None
