"""reasoning-gym procedural puzzles as tasks, scored by each dataset's own ``score_answer``."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .answer import parse_answer
from .base import ScoreResult, Task
from .caching import OnceLRU
from .config import ConfigError
from .parallel_entries import create_dataset, generate_entries, worker_count

# Generation cost matters (tasks are built on access, and rebuilt at reward time on a cache miss):
# futoshiki takes ~0.6 s per puzzle on one core, so it is left out of the defaults (see docs/bench_envs.md).
DEFAULT_CASES: tuple[str, ...] = (
    "knights_knaves",
    "zebra_puzzles",
    "mini_sudoku",
    "syllogism",
    "self_reference",
    "circuit_logic",
)
# A probe answer no puzzle accepts; whatever credit a dataset gives it is the floor we subtract.
_JUNK_ANSWER = "?"


@dataclass
class LogicConfig:
    """Settings of the ``logic`` env (``data.env.logic.*``).

    ``cases`` is a list of reasoning-gym dataset names or a mapping name -> dataset config dict.
    """

    cases: Any = None
    num_tasks_per_case: int = 100
    # reasoning-gym's partial credit is often string similarity ("Yes/No" earns 0.5 on syllogism), which a
    # policy learns to exploit; by default only answers the dataset scores as fully correct earn reward.
    partial_credit: bool = False
    seed: int = 0
    format_weight: float = 0.1
    max_response_chars: int = 32768
    max_answer_chars: int = 4096
    cache_size: int = 4096
    # processes that generate a pool's puzzles ahead of the held-out split (0: as many as the CPUs, up to 16,
    # when one core would take over ~10 s; 1: one at a time, on access)
    generation_workers: int = 0

    def validate(self, where: str) -> None:
        for key in ("num_tasks_per_case", "max_response_chars", "max_answer_chars", "cache_size"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{where}.{key}: must be > 0, got {getattr(self, key)!r}")
        if self.generation_workers < 0:
            raise ConfigError(f"{where}.generation_workers: expected an integer >= 0 (0: automatic, 1: no worker "
                              f"processes), got {self.generation_workers!r}")
        if not 0.0 <= self.format_weight < 1.0:
            raise ConfigError(f"{where}.format_weight: must be in [0, 1), got {self.format_weight!r}")


def _as_json(options: dict[str, Any]) -> str | None:
    """``options`` as JSON for a worker process, or None when JSON would not give them back unchanged."""
    try:
        text = json.dumps(options, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == options else None


def _looks_hedged(answer: str, reference: str) -> bool:
    """Much longer than the reference, or more lines: several answers in one (partial-credit mode)."""
    if not reference:
        return False
    return len(answer) > max(2 * len(reference), len(reference) + 16) or answer.count("\n") > reference.count("\n")


class LogicAdapter:
    """One case per reasoning-gym dataset (with its config); the answer goes in ``<answer>`` tags."""

    name: ClassVar[str] = "logic"
    config_cls: ClassVar[type] = LogicConfig

    def __init__(self, config: LogicConfig, where: str = "data.env.logic") -> None:
        self.config = config
        self._datasets, self._options = self._build_datasets(config.cases, where)
        self._entries: OnceLRU[dict[str, Any]] = OnceLRU(config.cache_size)
        self._floors: OnceLRU[float] = OnceLRU(config.cache_size)

    @staticmethod
    def _build_datasets(cases: Any, where: str) -> tuple[dict[str, Any], dict[str, str | None]]:
        # Imported here so game-only runs need no reasoning-gym (it imports all of its 100+ datasets).
        from reasoning_gym.factory import DATASETS

        if cases is None:
            cases = list(DEFAULT_CASES)
        if isinstance(cases, str):
            cases = [c.strip() for c in cases.split(",") if c.strip()]
        items = list(cases.items()) if isinstance(cases, dict) else [(name, {}) for name in cases]
        if not items:
            raise ConfigError(f"{where}.cases: is empty; name at least one reasoning-gym dataset")
        datasets: dict[str, Any] = {}
        options_json: dict[str, str | None] = {}
        for name, options in items:
            if name not in DATASETS:
                raise ConfigError(f"{where}.cases: unknown reasoning-gym dataset {name!r} "
                                  f"(e.g. {', '.join(DEFAULT_CASES)}; {len(DATASETS)} exist)")
            if options is not None and not isinstance(options, dict):
                raise ConfigError(f"{where}.cases.{name}: expected a dict of dataset options, got {options!r}")
            try:
                datasets[name] = create_dataset(name, options or {})
            except Exception as err:  # reasoning-gym raises TypeError/AssertionError for bad options
                raise ConfigError(f"{where}.cases.{name}: invalid options {options!r}: {err}") from None
            options_json[name] = _as_json(options or {})
        return datasets, options_json

    def cases(self) -> list[str]:
        return list(self._datasets)

    def num_tasks(self, case: str) -> int:
        return self.config.num_tasks_per_case

    def _entry(self, case: str, seed: int) -> dict[str, Any]:
        return self._entries.get_or_compute((case, seed), lambda: self._datasets[case][seed])

    def prefetch(self, case: str, seeds: Sequence[int]) -> int:
        """Generate the puzzles of ``seeds`` ahead, in worker processes when one core would take over ~10 s
        (``generation_workers``); the mixture calls this before it reads a pool's contents. Returns the number of
        processes used (0: nothing was missing; 1: the puzzles are left to be made on access, as without it)."""
        missing = [seed for seed in dict.fromkeys(seeds) if (case, seed) not in self._entries]
        missing = missing[:self.config.cache_size]  # more would evict the first before they are read
        if not missing:
            return 0
        start = time.perf_counter()
        self._entry(case, missing[0])
        rest = missing[1:]
        workers = worker_count(self.config.generation_workers, (time.perf_counter() - start) * len(rest), len(rest))
        options = self._options[case]
        if workers <= 1 or options is None:
            return 1
        entries = generate_entries(case, options, rest, workers)
        if entries is None:
            return 1
        for seed, entry in zip(rest, entries):
            self._entries.put((case, seed), entry)
        return workers

    def make_task(self, case: str, index: int, seed: int) -> Task:
        entry = self._entry(case, seed)
        answer = entry.get("answer")
        prompt = (
            f"{entry['question'].rstrip()}\n\n"
            "Think it through if you like, then end your reply with your final answer in the form "
            "<answer>YOUR ANSWER</answer> (exactly one answer block, nothing after it)."
        )
        return Task(
            env=self.name,
            case=case,
            task_id=index,
            seed=seed,
            messages=({"role": "user", "content": prompt},),
            state=json.dumps({"seed": seed}),
            ground_truth="" if answer is None else str(answer),
            info={"dataset": case},
        )

    def score(self, case: str, state: str, response: str) -> ScoreResult:
        cfg = self.config
        parsed = parse_answer(response, max_response_chars=cfg.max_response_chars,
                              max_answer_chars=cfg.max_answer_chars, single_line=False)
        if not parsed.format_ok:
            return ScoreResult(0.0, False, False, 0.0, None, parsed.reason)
        seed = int(json.loads(state)["seed"])
        entry = self._entry(case, seed)
        dataset = self._datasets[case]
        raw = float(dataset.score_answer(parsed.text, entry))
        if not cfg.partial_credit:
            task_score = 1.0 if raw >= 1.0 - 1e-9 else 0.0
        elif _looks_hedged(parsed.text, str(entry.get("answer") or "")):
            task_score = 0.0
        else:
            # Some datasets pay a little for any non-empty answer; only credit above that floor counts.
            floor = self._floors.get_or_compute((case, seed),
                                                lambda: float(dataset.score_answer(_JUNK_ANSWER, entry)))
            task_score = min(1.0, max(0.0, raw)) if raw > floor else 0.0
        valid = task_score > 0.0
        total = cfg.format_weight + (1.0 - cfg.format_weight) * task_score
        return ScoreResult(total, True, valid, task_score, parsed.text, "ok" if valid else "wrong_answer",
                           {"raw_dataset_score": raw})

    def reference_answer(self, task: Task) -> str | None:
        # Open-ended datasets (e.g. propositional_logic) have no single reference answer.
        return f"<answer>{task.ground_truth}</answer>" if task.ground_truth.strip() else None
