"""The task plan shared by the dataset, the export CLI and evaluation: which (env, case, index) per row.

Settings live under ``data.env`` (set with ``+data.env.<env>.<key>=...`` Hydra overrides)::

    data.env.openspiel: {game_types: [hex], num_tasks_per_case: 100, reward_mode: legal, ...}
    data.env.openspiel: {task_mode: game, game: {opponent: random}}   # full games (docs/games.md)
    data.env.logic:     {cases: [knights_knaves, mini_sudoku]}
    data.env.weights:   {openspiel: 3, logic: 1}       # optional mixture weights per env
    data.env.size:      2000                            # optional train rows (default: sum of pools)
    data.env.val_tasks_per_case: 16                     # held-out tasks per case
    data.env.held_out_share: 0.1                        # share of task contents never trained on (held_out.py)
    data.env.train_part: rl                             # train on one part of the training contents (all | cold_start | rl)
    data.env.cold_start_share: 0.5                      # the cold start's part of the training contents
    data.env.train_positions: tactical                  # single-move training positions: all | tactical (train_positions.py)
    data.env.system_prompt: "You play board games."     # optional system message, every env (envs/system_prompt.py)
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .envs import EnvAdapter, Task, env_names, make_env
from .envs.config import ConfigError, to_plain
from .envs.system_prompt import KEY as SYSTEM_PROMPT_KEY
from .envs.system_prompt import check_system_prompt, system_prompt_of, with_system_prompt
from .games import GAME_AGENT_NAME, SINGLE_TURN_AGENT_NAME
from .held_out import (DEFAULT_COLD_START_SHARE, DEFAULT_HELD_OUT_SHARE, check_cold_start_share, check_share,
                       check_train_part, expected_training_draws, expected_validation_draws, training_seeds,
                       validation_indices)
from .train_positions import check_train_positions, position_filter

SPLITS = ("train", "val")
# Validation tasks use indices from here on, so their seeds never meet a training task's.
VAL_INDEX_OFFSET = 1_000_000
MIXTURE_KEYS = ("weights", "size", "val_tasks_per_case", "held_out_share", "train_part", "cold_start_share",
                "train_positions", SYSTEM_PROMPT_KEY)


@dataclass(frozen=True)
class TaskRef:
    """Where a row comes from: the adapter builds task ``index`` of ``case`` from ``seed``."""

    env: str
    case: str
    index: int
    seed: int


def parse_split(data_files: Any) -> str:
    """verl passes ``data.train_files`` / ``data.val_files`` here; we expect ``env://train`` / ``env://val``."""
    files = to_plain(data_files)
    if isinstance(files, str):
        files = [files]
    if isinstance(files, list) and len(files) == 1 and isinstance(files[0], str):
        value = files[0].strip()
        if value.startswith("env://") and value[len("env://"):] in SPLITS:
            return value[len("env://"):]
    raise ConfigError(
        f"data.train_files/data.val_files: DynamicEnvDataset builds tasks on the fly and expects 'env://train' "
        f"or 'env://val', got {data_files!r}. (To train on exported parquet, use verl's default RLHFDataset.)")


def _apportion(total: int, weights: list[float]) -> list[int]:
    """Largest-remainder split of ``total`` rows in proportion to ``weights``."""
    mass = sum(weights)
    exact = [total * w / mass for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


class EnvMixture:
    """The configured adapters plus the deterministic row plan for each split."""

    def __init__(self, env_section: Mapping[str, Any] | None, where: str = "data.env") -> None:
        section = to_plain(env_section or {})
        if not isinstance(section, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {section!r}")
        unknown = [k for k in section if k not in MIXTURE_KEYS and k not in env_names()]
        if unknown:
            raise ConfigError(f"{where}: unknown key or env {unknown[0]!r} (envs: {', '.join(env_names())}; "
                              f"mixture keys: {', '.join(MIXTURE_KEYS)})")
        env_settings = {k: (v or {}) for k, v in section.items() if k in env_names()}
        system_prompt = check_system_prompt(section.get(SYSTEM_PROMPT_KEY), f"{where}.{SYSTEM_PROMPT_KEY}")
        if system_prompt is not None:  # every env's default; an env's own key wins (it travels in env_config)
            env_settings = {k: ({SYSTEM_PROMPT_KEY: system_prompt, **v} if isinstance(v, Mapping) else v)
                            for k, v in env_settings.items()}
        if not env_settings:
            raise ConfigError(f"{where}: no env configured; add e.g. '+{where}.openspiel.game_types=[hex]' "
                              f"(envs: {', '.join(env_names())})")
        self.settings: dict[str, dict[str, Any]] = env_settings
        self.adapters: dict[str, EnvAdapter] = {
            name: make_env(name, settings, where=f"{where}.{name}") for name, settings in env_settings.items()}
        self.weights = self._weights(section.get("weights"), where)
        self.size = self._positive_int(section.get("size"), f"{where}.size")
        self.val_tasks_per_case = self._positive_int(section.get("val_tasks_per_case", 16),
                                                     f"{where}.val_tasks_per_case")
        self.held_out_share = check_share(section.get("held_out_share", DEFAULT_HELD_OUT_SHARE),
                                          f"{where}.held_out_share")
        self.train_part = check_train_part(section.get("train_part", "all"), f"{where}.train_part")
        self.cold_start_share = check_cold_start_share(section.get("cold_start_share", DEFAULT_COLD_START_SHARE),
                                                       f"{where}.cold_start_share")
        self.train_positions = check_train_positions(section.get("train_positions", "all"), self.adapters,
                                                     f"{where}.train_positions")
        self._where = where
        self._plans: dict[str, list[TaskRef]] = {}

    @staticmethod
    def _positive_int(value: Any, where: str) -> int | None:
        if value is None:
            return None
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a positive integer, got {value!r}") from None
        if number <= 0 or str(number) != str(value).strip():
            raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
        return number

    def _weights(self, weights: Any, where: str) -> dict[str, float]:
        weights = weights or {}
        if not isinstance(weights, Mapping):
            raise ConfigError(f"{where}.weights: expected a mapping env -> weight, got {weights!r}")
        result = {}
        for name in self.adapters:
            value = weights.get(name, 1.0)
            try:
                result[name] = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{where}.weights.{name}: expected a number, got {value!r}") from None
            if result[name] <= 0:
                raise ConfigError(f"{where}.weights.{name}: must be > 0, got {value!r}")
        extra = [k for k in weights if k not in self.adapters]
        if extra:
            raise ConfigError(f"{where}.weights.{extra[0]}: no such env configured (configured: "
                              f"{', '.join(self.adapters)})")
        return result

    def env_config_json(self, env: str) -> str:
        """The settings an env was built from, as canonical JSON (travels in ``extra_info``)."""
        return json.dumps(self.settings[env], sort_keys=True, separators=(",", ":"))

    def seed(self, env: str, index: int) -> int:
        return int(getattr(self.adapters[env].config, "seed", 0)) + index

    def plan(self, split: str) -> list[TaskRef]:
        """Rows of ``split`` in a fixed order (verl's sampler shuffles them); train and val never share a content."""
        if split not in SPLITS:
            raise ConfigError(f"split: expected one of {SPLITS}, got {split!r}")
        if split not in self._plans:
            self._plans[split] = self._val_plan() if split == "val" else self._train_plan()
        return list(self._plans[split])

    def _cases(self) -> list[tuple[str, str]]:
        return [(env, case) for env, adapter in self.adapters.items() for case in adapter.cases()]

    def _val_plan(self) -> list[TaskRef]:
        refs = []
        for env, case in self._cases():
            adapter = self.adapters[env]
            if (prefetch := getattr(adapter, "prefetch", None)) is not None:
                draws = expected_validation_draws(self.val_tasks_per_case, self.held_out_share)
                prefetch(case, [self.seed(env, VAL_INDEX_OFFSET + i) for i in range(draws)])
            indices = validation_indices(
                case, self.val_tasks_per_case, VAL_INDEX_OFFSET, self.held_out_share,
                lambda index, a=adapter, e=env, c=case: a.make_task(c, index, self.seed(e, index)),
                f"{self._where}.val_tasks_per_case")
            refs += [TaskRef(env, case, index, self.seed(env, index)) for index in indices]
        return refs

    def _train_plan(self) -> list[TaskRef]:
        cases = self._cases()
        pools = [self.adapters[env].num_tasks(case) for env, case in cases]
        per_env = {env: sum(1 for e, _ in cases if e == env) for env in self.adapters}
        case_weights = [self.weights[env] / per_env[env] for env, _ in cases]
        total = self.size or sum(pools)
        if self.size is None and len(set(self.weights.values())) == 1 and len(set(pools)) == 1:
            counts = pools
        else:
            counts = _apportion(total, case_weights)
        refs = []
        for (env, case), pool, count in zip(cases, pools, counts):
            adapter = self.adapters[env]
            if (prefetch := getattr(adapter, "prefetch", None)) is not None:
                draws = expected_training_draws(min(pool, count), self.held_out_share, self.train_part,
                                                self.cold_start_share)
                prefetch(case, range(self.seed(env, 0), self.seed(env, 0) + draws))
            seeds = training_seeds(case, min(pool, count), self.seed(env, 0), self.held_out_share,
                                   lambda index, seed, a=adapter, c=case: a.make_task(c, index, seed),
                                   self.train_part, self.cold_start_share,
                                   position_filter(self.train_positions, env))
            # More rows than the pool holds repeat tasks (up-weighting), never invent new ones.
            refs += [TaskRef(env, case, j % len(seeds), seeds[j % len(seeds)]) for j in range(count)]
        return refs

    def build(self, ref: TaskRef) -> Task:
        """The task of ``ref``, its messages led by the env's system prompt when one is set."""
        adapter = self.adapters[ref.env]
        task = adapter.make_task(ref.case, ref.index, ref.seed)
        system_prompt = system_prompt_of(adapter)
        if system_prompt is None:
            return task
        return dataclasses.replace(task, messages=with_system_prompt(task.messages, system_prompt))

    @property
    def has_games(self) -> bool:
        """Whether any row is a full game (then every row names its verl agent loop)."""
        return any(getattr(adapter.config, "task_mode", "move") != "move" for adapter in self.adapters.values())

    def row(self, ref: TaskRef, split: str, row_index: int) -> dict[str, Any]:
        """A row in verl's RL format (``raw_prompt`` is added by the dataset, ``prompt`` by export)."""
        task = self.build(ref)
        row = task_row(task, split, row_index, self.env_config_json(ref.env), with_agent_name=self.has_games)
        precompute = getattr(self.adapters[ref.env], "move_values", None)
        if precompute is not None and (values := precompute(task)) is not None:
            row["extra_info"]["move_values"] = values  # the reward's per-move table, computed here, ahead
        return row


def is_game(task: Task) -> bool:
    """Whether ``task`` is a full game (played by the game agent loop) rather than one prompt and one reply."""
    return task.info.get("mode") == "game"


def task_row(task: Task, split: str, row_index: int, env_config: str,
             with_agent_name: bool = False) -> dict[str, Any]:
    """The verl RL row of one task: what the agent loop and the reward path read.

    Game rows carry ``agent_name`` (verl's agent loop for the row) and ``mode``/``seat`` in ``extra_info``.
    When a batch can mix game and single-move rows, every row needs ``agent_name`` (verl's collate_fn stacks
    each key over the rows that have it), so ``with_agent_name`` gives single-move rows verl's single-turn loop.
    """
    row = {
        "data_source": f"{task.env}/{task.case}",
        "prompt": [dict(m) for m in task.messages],
        "ability": task.env,
        "reward_model": {"style": "rule", "ground_truth": task.ground_truth},
        "extra_info": {
            "env": task.env,
            "case": task.case,
            "task_id": task.task_id,
            "seed": task.seed,
            "split": split,
            "index": row_index,
            "state": task.state,
            "env_config": env_config,
        },
    }
    if is_game(task):
        row["data_source"] = f"{task.env}-game/{task.case}"  # verl groups validation metrics by data source
        row["extra_info"].update(mode="game", seat=int(task.info["seat"]))
        row["agent_name"] = GAME_AGENT_NAME
    elif with_agent_name:
        row["agent_name"] = SINGLE_TURN_AGENT_NAME
    return row


def subsample(refs: list[TaskRef], max_samples: int, seed: int) -> list[TaskRef]:
    """A seeded random subset of ``max_samples`` rows (all rows if ``max_samples`` <= 0)."""
    if max_samples is None or max_samples <= 0 or max_samples >= len(refs):
        return refs
    picked = sorted(random.Random(seed).sample(range(len(refs)), max_samples))
    return [refs[i] for i in picked]


def config_dict(adapter: EnvAdapter) -> dict[str, Any]:
    """The full resolved config of an adapter (defaults included), for logs and docs."""
    return dataclasses.asdict(adapter.config)  # type: ignore[call-overload]
