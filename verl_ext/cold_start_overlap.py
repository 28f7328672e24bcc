"""How much of a GRPO run trains on positions its cold start was fitted to, by content (``held_out.content_key``).

A cold start scores far better on its own SFT positions than on unseen ones (SmolLM2 after the lr 3e-4 SFT:
0.88 against 0.80 engine score). GRPO on exactly those positions therefore sees a training reward that rises as the
sampled policy sharpens towards answers it already knows, while the held-out score stays flat
(docs/runs/2026-11-27-h200-smollm2-grpo100/). This module rebuilds every single-move SFT row's task from its
``extra_info`` (env, case, index, seed and the env settings it was exported with), collects their contents per
case, and counts the run's training plan against them. ``data.env.train_part`` keeps the two apart
(``verl_ext/held_out.py``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from .envs import make_env
from .envs.config import ConfigError
from .held_out import content_key
from .mixture import EnvMixture

# At this share of the training prompts on cold-start positions the signal check prints its note.
NOTE_SHARE = 0.5


def cold_start_contents(parquet: Path) -> tuple[dict[str, set[str]], int]:
    """Per case, the contents of the single-move rows of an SFT parquet (``verl-ext export --format sft``), and
    how many rows were read. Whole-game rows have no content key and are left out."""
    import pyarrow.parquet as pq

    if not parquet.is_file():
        raise ConfigError(f"--cold-start-data: no such file {str(parquet)!r}")
    try:
        infos = pq.read_table(parquet, columns=["extra_info"]).column("extra_info").to_pylist()
    except Exception as err:  # not a parquet, no extra_info column
        raise ConfigError(f"--cold-start-data: cannot read the extra_info column of {str(parquet)!r}: {err}") from None
    adapters: dict[tuple[str, str], Any] = {}
    contents: dict[str, set[str]] = defaultdict(set)
    for row, info in enumerate(infos):
        try:
            env, config = str(info["env"]), str(info["env_config"])
            case, index, seed = str(info["case"]), int(info["index"]), int(info["seed"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"--cold-start-data: row {row} of {str(parquet)!r} has no env, env_config, case, index "
                              "and seed in extra_info: not an export of verl-ext") from None
        if info.get("mode") == "game":
            continue
        if (env, config) not in adapters:
            adapters[(env, config)] = make_env(env, json.loads(config), where=f"--cold-start-data row {row}")
        key = content_key(adapters[(env, config)].make_task(case, index, seed))
        if key is not None:
            contents[case].add(key)
    return dict(contents), len(infos)


def training_overlap(mixture: EnvMixture, contents: dict[str, set[str]]) -> dict[str, Any]:
    """Per case and overall: the training plan's single-move tasks and distinct positions, and how many of each
    the cold start was trained on."""
    tasks: dict[str, list[str]] = defaultdict(list)
    for ref in mixture.plan("train"):
        key = content_key(mixture.build(ref))
        if key is not None:
            tasks[ref.case].append(key)

    def counts(keys: list[str], seen: set[str]) -> dict[str, Any]:
        on_seen = sum(key in seen for key in keys)
        return {"tasks": len(keys), "tasks_on_cold_start_positions": on_seen,
                "share": on_seen / len(keys) if keys else None, "positions": len(set(keys)),
                "cold_start_positions": len(set(keys) & seen)}

    cases = {case: counts(keys, contents.get(case, set())) for case, keys in tasks.items()}
    total = sum(c["tasks"] for c in cases.values())
    on_seen = sum(c["tasks_on_cold_start_positions"] for c in cases.values())
    overall = {"tasks": total, "tasks_on_cold_start_positions": on_seen, "share": on_seen / total if total else None}
    return {"cases": cases, "overall": overall}


def overlap_note(overlap: dict[str, Any]) -> str | None:
    """One note when at least ``NOTE_SHARE`` of the training prompts are cold-start positions, else None."""
    share = overlap["overall"]["share"]
    if share is None or share < NOTE_SHARE:
        return None
    return (f"NOTE: {100 * share:.0f} % of GRPO's training prompts are positions the cold start was trained on. "
            "There the training reward rises as the policy repeats its SFT answers more surely, whether or not it "
            "plays unseen positions better: judge the run by its held-out validation, or train GRPO on other "
            "positions (recipe: COLD_START_CONTENTS=split; data.env.train_part=rl, docs/training.md).")
