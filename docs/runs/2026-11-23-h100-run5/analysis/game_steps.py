"""Per-step outcome rates of the full-game run, from its sample log (512 games a step: 64 prompts x 8).

    python docs/runs/2026-11-23-h100-run5/analysis/game_steps.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "game"
GAMES_PER_STEP = 512
FIELDS = ("score", "win", "draw", "loss", "forfeit", "model_turns", "model_tokens", "rejected_replies")


def mean(rows: list[dict], key: str, case: str | None = None) -> float:
    values = [row[key] for row in rows if case is None or row["case"] == case]
    return sum(values) / len(values)


def main() -> None:
    with gzip.open(HERE / "grpo.samples.jsonl.gz", "rt") as handle:
        train = [row for row in map(json.loads, handle) if row["split"] == "train"]
    metrics = {row["step"]: row["data"] for row in map(json.loads, open(HERE / "grpo.metrics.jsonl"))}
    print("| step | " + " | ".join(FIELDS) + " | forfeit ttt | forfeit c4 | step s | generation s |")
    print("|" + "---|" * (len(FIELDS) + 5))
    for start in range(0, len(train) - GAMES_PER_STEP + 1, GAMES_PER_STEP):
        step = start // GAMES_PER_STEP + 1
        rows = train[start:start + GAMES_PER_STEP]
        data = metrics.get(step, {})
        cells = [f"{mean(rows, key):.3f}" for key in FIELDS]
        cells += [f"{mean(rows, 'forfeit', case):.3f}" for case in ("tic_tac_toe", "connect_four")]
        if data:
            cells += [f"{data['timing_s/step']:.1f}", f"{data['timing_s/gen']:.1f}"]
        else:  # stopped after this step's rollout, before its update: games of the step-25 (merged) policy
            cells += ["stopped", "before update"]
        print(f"| {step} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
