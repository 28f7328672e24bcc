"""What each way a whole game ends pays in a GRPO run: a reward-hack check for shaped game rewards.

Per case and window of steps, the share of training games that ended as a win, a draw, a loss played out and a
forfeit (an illegal or unparseable reply after the retries), with the mean reward each got and the share of them
with a one-ply tactic missed (a win on the board not taken, a threat not blocked: what ``game.tactics_weight``
charges). A way of ending that pays more than another the policy can choose instead is a loophole: the 2026-11-28
tactics run paid a forfeit 0.30 against 0.05 for a loss played out, and its tic_tac_toe forfeits rose from 0 to 21 %
of the games over steps 61-90 (docs/runs/2026-11-28-h200-boardgames-tactics/). Reads the run's sample log (plain or
gzipped), no GPU, no model:

    python bench/learning/ending_pay.py runs/x/logs/grpo-*.samples.jsonl.gz [--window 10] [--out docs/runs/X/ending_pay]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from verl_ext.group_stats import tactic_count

from game_log_report import report_main, training_games, window_start  # beside this script

ENDINGS = ("win", "draw", "loss played out", "forfeit", "truncated")


def ending_of(row: dict[str, Any]) -> str:
    """How a sample's game ended (the reward's game metrics: a forfeit is also a loss)."""
    if row.get("truncated"):
        return "truncated"
    if row.get("forfeit"):
        return "forfeit"
    if row.get("win"):
        return "win"
    if row.get("draw"):
        return "draw"
    return "loss played out"


def missed_tactic(row: dict[str, Any]) -> bool:
    """Whether the game had a one-ply chance (the reward's tactics counts) that the policy did not play right."""
    chances = tactic_count(row.get("win_chance")) + tactic_count(row.get("block_chance"))
    return chances > tactic_count(row.get("win_taken")) + tactic_count(row.get("blocked"))


def tally(path: Path, window: int) -> dict[tuple[str, int], dict[str, list[tuple[float, bool]]]]:
    """{(case, window start): {ending: [(reward, missed a tactic)]}} over the training games of the log."""
    table: dict[tuple[str, int], dict[str, list[tuple[float, bool]]]] = defaultdict(lambda: defaultdict(list))
    for row in training_games(path):
        table[(str(row.get("case")), window_start(row, window))][ending_of(row)].append((float(row.get("score") or 0.0),
                                                                      missed_tactic(row)))
    return table


def rows_of(table: dict[tuple[str, int], dict[str, list[tuple[float, bool]]]],
            window: int) -> list[dict[str, Any]]:
    rows = []
    for (case, start), endings in sorted(table.items()):
        games = sum(len(v) for v in endings.values())
        row: dict[str, Any] = {"case": case, "steps": f"{start}-{start + window - 1}", "games": games}
        for ending in ENDINGS:
            got = endings.get(ending, [])
            row[ending] = {"share": len(got) / games,
                           "mean_reward": sum(r for r, _ in got) / len(got) if got else None,
                           "missed_tactic": sum(m for _, m in got) / len(got) if got else None}
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    header = ("| case | steps | games | " + " | ".join(f"{e}: share, mean reward, missed a tactic" for e in ENDINGS)
              + " |")
    lines = [header, "|---" * (3 + len(ENDINGS)) + "|"]
    for row in rows:
        cells = []
        for ending in ENDINGS:
            share, pay, missed = (row[ending][k] for k in ("share", "mean_reward", "missed_tactic"))
            cells.append(f"{100 * share:.1f} %, {'-' if pay is None else f'{pay:.3f}'}, "
                         f"{'-' if missed is None else f'{100 * missed:.0f} %'}")
        lines.append(f"| {row['case']} | {row['steps']} | {row['games']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, __doc__, 10, lambda log, window: rows_of(tally(log, window), window), markdown,
                       "no training games in the sample log")


if __name__ == "__main__":
    raise SystemExit(main())
