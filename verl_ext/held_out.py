"""Held-out tasks that training never sees, by content, not only by seed.

Seeds alone do not keep evaluation honest: a tic_tac_toe position or a small sum comes up again under another
seed (of 200 validation positions drawn by seed, 107 tic_tac_toe and 94 leg_counting ones were also in a
1,500-task training pool). So every single-prompt task gets a content key (its prompt text), and a stable hash of
``case + key`` puts a fixed share of all possible contents in the held-out bucket:

- the training pool skips held-out contents (the pool's seeds are the first ones whose task is not held out);
- the validation set takes distinct held-out contents, in seed order, until it has ``val_tasks_per_case``.

The split depends on nothing but the content and ``held_out_share``: SFT export, GRPO, the signal check and
``verl-ext eval`` agree on it whatever their pool sizes. Full-game tasks all start from the same position, so
they are told apart by seed as before (``content_key`` is None for them).

The training contents can be split again the same way (``train_part``): a cold start fitted to one part and RL on
the other keeps GRPO off the positions SFT memorised, where its training reward only measures how sharply the
policy repeats its SFT answers (docs/runs/2026-11-27-h200-smollm2-grpo100/). ``cold_start_share`` of the training
contents form the ``cold_start`` part, the rest the ``rl`` part; ``all`` (the default) is both. Full games have no
content key and belong to every part.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable

from .envs import Task
from .envs.config import ConfigError

DEFAULT_HELD_OUT_SHARE = 0.1
TRAIN_PARTS = ("all", "cold_start", "rl")
DEFAULT_COLD_START_SHARE = 0.5
# A case whose content space is small stops the search for validation tasks after this many draws per task.
DRAWS_PER_VAL_TASK = 200
# a filtered training plan may draw this many times as many tasks (the tactical filter keeps ~40 % of connect_four
# positions)
FILTER_DRAWS = 5


def content_key(task: Task) -> str | None:
    """What makes two tasks the same question: their non-system messages (or the adapter's rendering-free
    ``info["content"]``: a board drawn another way is the same position); None for full games (split by seed)."""
    if task.info.get("mode") == "game":
        return None
    messages = task.messages
    if isinstance(task.info.get("content"), str):
        messages = ({"role": "user", "content": task.info["content"]},)
    return json.dumps([[m.get("role"), m.get("content")] for m in messages if m.get("role") != "system"],
                      ensure_ascii=False)


def content_position(case: str, key: str) -> float:
    """Where content ``key`` of ``case`` falls in [0, 1): a stable hash, the same on every machine and run."""
    digest = hashlib.blake2b(f"{case}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def is_held_out(case: str, key: str, share: float) -> bool:
    """Whether content ``key`` of ``case`` belongs to the held-out bucket (a stable hash, the same everywhere)."""
    return content_position(case, key) < share


def training_part(case: str, key: str, share: float, cold_start_share: float) -> str:
    """``"val"`` for a held-out content, else the training part it belongs to: ``"cold_start"`` or ``"rl"``."""
    position = content_position(case, key)
    if position < share:
        return "val"
    return "cold_start" if (position - share) / (1.0 - share) < cold_start_share else "rl"


def check_train_part(value: object, where: str) -> str:
    """``train_part`` as one of ``TRAIN_PARTS``."""
    if value not in TRAIN_PARTS:
        raise ConfigError(f"{where}: expected one of {', '.join(TRAIN_PARTS)} (which training contents this run "
                          f"draws from: all, the cold start's part or the RL part), got {value!r}")
    return str(value)


def check_cold_start_share(value: object, where: str) -> float:
    """``cold_start_share`` as a float in (0, 1)."""
    try:
        share = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number in (0, 1), got {value!r}") from None
    if not 0.0 < share < 1.0:
        raise ConfigError(f"{where}: expected a number in (0, 1) (the share of training contents in the cold "
                          f"start's part; the rest is the RL part), got {value!r}")
    return share


def check_share(value: object, where: str) -> float:
    """``held_out_share`` as a float in (0, 0.5]."""
    try:
        share = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number in (0, 0.5], got {value!r}") from None
    if not 0.0 < share <= 0.5:
        raise ConfigError(f"{where}: expected a number in (0, 0.5] (the share of task contents kept out of "
                          f"training), got {value!r}")
    return share


def kept_share(share: float, part: str = "all", cold_start_share: float = DEFAULT_COLD_START_SHARE) -> float:
    """The share of a case's contents that training ``part`` draws from."""
    kept = 1.0 - share
    if part != "all":
        kept *= cold_start_share if part == "cold_start" else 1.0 - cold_start_share
    return kept


def expected_training_draws(pool: int, share: float, part: str = "all",
                            cold_start_share: float = DEFAULT_COLD_START_SHARE) -> int:
    """About how many seeds ``training_seeds`` reads to find ``pool`` tasks of a case with many contents (a
    little more, so that tasks made ahead cover it)."""
    return int(pool / kept_share(share, part, cold_start_share) * 1.1) + 8


def expected_validation_draws(count: int, share: float) -> int:
    """About how many indices ``validation_indices`` reads for ``count`` tasks of a case with many contents."""
    return int(count / share * 1.2) + 8


def training_seeds(case: str, pool: int, first_seed: int, share: float,
                   make: Callable[[int, int], Task], part: str = "all",
                   cold_start_share: float = DEFAULT_COLD_START_SHARE,
                   keep: Callable[[Task], bool] | None = None) -> list[int]:
    """Seeds of the ``pool`` training tasks of ``case``: in order from ``first_seed``, held-out contents skipped,
    with ``part`` ``cold_start`` or ``rl`` also the contents of the other training part, and with ``keep`` also
    the tasks for which it returns False (``verl_ext/train_positions.py``).

    ``make(index, seed)`` builds the task that pool position ``index`` would get.
    """
    kept = kept_share(share, part, cold_start_share)
    wanted = ("cold_start", "rl") if part == "all" else (part,)
    seeds: list[int] = []
    seed = first_seed
    # about twice the draws a case of any size needs (a small case's contents can weigh more than their share)
    limit = first_seed + (max(4 * pool, int(2 * pool / kept)) + 1000) * (1 if keep is None else FILTER_DRAWS)
    while len(seeds) < pool:
        if seed >= limit:
            where = "outside the held-out share" if part == "all" else f"in training part {part!r}"
            if keep is not None:
                where += " that the train_positions filter keeps"
            raise ConfigError(f"case {case}: only {len(seeds)} of {pool} training tasks {where} (held_out_share "
                              f"{share}, cold_start_share {cold_start_share}) in {seed - first_seed} draws")
        task = make(len(seeds), seed)
        key = content_key(task)
        if (key is None or training_part(case, key, share, cold_start_share) in wanted) and (
                keep is None or keep(task)):
            seeds.append(seed)
        seed += 1
    return seeds


def validation_indices(case: str, count: int, first_index: int, share: float,
                       make: Callable[[int], Task], where: str) -> list[int]:
    """Indices of ``count`` validation tasks of ``case`` with distinct held-out contents, in order from ``first_index``.

    ``make(index)`` builds the task of ``index``. A case with fewer distinct held-out contents (kuhn_poker has 12
    information states in all) gets those it has, with a warning naming ``where``; none at all is a ConfigError.
    """
    indices: list[int] = []
    seen: set[str] = set()
    draws = DRAWS_PER_VAL_TASK * count + 1000
    for index in range(first_index, first_index + draws):
        if len(indices) == count:
            break
        key = content_key(make(index))
        if key is None:
            indices.append(index)
        elif key not in seen and is_held_out(case, key, share):
            seen.add(key)
            indices.append(index)
    if not indices:
        raise ConfigError(f"{where}={count}: case {case} has no held-out task in {draws} draws "
                          f"(held_out_share={share}): its tasks are too few; raise data.env.held_out_share")
    if len(indices) < count:
        warnings.warn(f"{where}={count}: case {case} has only {len(indices)} distinct held-out tasks in {draws} "
                      f"draws (held_out_share={share}); validating on those {len(indices)}", stacklevel=2)
    return indices
