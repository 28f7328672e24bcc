"""Does the reward favour a one-ply tactic, and does the policy play it? From a GRPO run's sample log.

Per case, opponent and window of steps, the training games that held a threat to block are split into those where
the policy blocked every threat and those where it missed one; the games with a win on the board, into those where
it took every win and those where it did not. Each part gets its share, win rate and mean reward.

Read it like this. A tactic that pays far more when played, yet is played in few games, has the signal but not the
samples. The sampled policy rarely plays the move, so GRPO's groups seldom hold the comparison. A tactic that pays
little more when played has no signal to learn from.

Example: the 2026-11-29 run, connect_four against MCTS(5), steps 61-93. Blocking every threat paid 0.857 (win rate
0.83). Missing one paid 0.070. Yet the policy blocked every threat in only 8 % of such games, and its per-turn block
rate fell from 0.30 to 0.16 over the run (docs/runs/2026-11-29-h200-boardgames-tactics-fixed/).

Reads the run's sample log (plain or gzipped); needs no GPU and no model:

    python bench/learning/tactic_pay.py runs/x/logs/grpo-*.samples.jsonl.gz [--window 30] [--out docs/runs/X/tactic_pay]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from verl_ext.group_stats import tactic_count

from game_log_report import report_main, training_games, window_start  # beside this script

# (tactic, the record's chance key, the key of the chances played right)
TACTICS = (("block", "block_chance", "blocked"), ("win", "win_chance", "win_taken"))
Games = dict[str, list[tuple[float, float]]]  # "played" / "missed" -> [(reward, won)]


def tally(path: Path, window: int) -> dict[tuple[str, str, str, int], Games]:
    """{(tactic, case, opponent, window start): {"played"|"missed": [(reward, won)]}} over the log's training
    games that held that tactic."""
    table: dict[tuple[str, str, str, int], Games] = defaultdict(lambda: defaultdict(list))
    for row in training_games(path):
        start = window_start(row, window)
        reward, won = float(row.get("score") or 0.0), float(row.get("win") or 0.0)
        for tactic, chance_key, played_key in TACTICS:
            chances = tactic_count(row.get(chance_key))
            if chances < 1:
                continue
            part = "played" if tactic_count(row.get(played_key)) >= chances else "missed"
            table[(tactic, str(row.get("case")), str(row.get("opponent")), start)][part].append((reward, won))
    return table


def _part(games: list[tuple[float, float]], total: int) -> dict[str, float | None]:
    if not games:
        return {"share": 0.0, "win_rate": None, "mean_reward": None}
    return {"share": len(games) / total, "win_rate": sum(w for _, w in games) / len(games),
            "mean_reward": sum(r for r, _ in games) / len(games)}


def rows_of(table: dict[tuple[str, str, str, int], Games], window: int) -> list[dict[str, Any]]:
    rows = []
    for (tactic, case, opponent, start), parts in sorted(table.items()):
        total = sum(len(v) for v in parts.values())
        row: dict[str, Any] = {"tactic": tactic, "case": case, "opponent": opponent,
                               "steps": f"{start}-{start + window - 1}", "games": total}
        for part in ("played", "missed"):
            row[part] = _part(parts.get(part, []), total)
        played, missed = row["played"]["mean_reward"], row["missed"]["mean_reward"]
        row["reward_gap"] = None if played is None or missed is None else played - missed
        rows.append(row)
    return rows


def _fmt(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.0f} %" if percent else f"{value:.3f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| tactic | case | opponent | steps | games with it | played in every chance: share, win rate, mean "
             "reward | missed: share, win rate, mean reward | reward gap |", "|---" * 8 + "|"]
    for row in rows:
        cells = [", ".join((_fmt(row[p]["share"], True), _fmt(row[p]["win_rate"], True),
                            _fmt(row[p]["mean_reward"]))) for p in ("played", "missed")]
        gap = "-" if row["reward_gap"] is None else f"{row['reward_gap']:+.3f}"
        lines.append(f"| {row['tactic']} | {row['case']} | {row['opponent']} | {row['steps']} | {row['games']} | "
                     + " | ".join(cells) + f" | {gap} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, __doc__, 30, lambda log, window: rows_of(tally(log, window), window), markdown,
                       "no training game with a one-ply tactic in the sample log (logs from before the "
                       "tactics counts have none)")


if __name__ == "__main__":
    raise SystemExit(main())
