"""Where a whole-game GRPO run's signal comes from: per case, opponent (and seat), the GRPO groups whose rewards differ.

A group is one training prompt's replies (same step, case, opponent and seed). A group whose games all end alike
(all lost to a strong bot, all won against a weak one) has advantage 0 and teaches nothing, so the share of groups
with signal per opponent says which part of an opponent mixture the run learns from. "Differ" is
``verl_ext.group_stats.rewards_differ``, the definition behind the step metric ``signal/group_share``. Reads the
run's sample log (``VERL_EXT_SAMPLE_LOG``; plain or gzipped), no GPU, no model:

    python bench/learning/game_groups.py runs/x/logs/grpo-*.samples.jsonl.gz [--window 10] [--by-seat] \\
        [--out docs/runs/X/game_groups]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_ext.evaluation.stats import proportion
from verl_ext.group_stats import rewards_differ
from verl_ext.sample_view import log_lines


@dataclass
class GroupTally:
    """Groups of one (case, opponent, step window): how many, how many with differing rewards, their mean reward."""

    groups: int = 0
    with_signal: int = 0
    reward_sum: float = 0.0
    games: int = 0
    sizes: set[int] = field(default_factory=set)

    def add(self, scores: list[float]) -> None:
        self.groups += 1
        self.with_signal += int(rewards_differ(scores))
        self.reward_sum += sum(scores)
        self.games += len(scores)
        self.sizes.add(len(scores))


def seat_of(row: dict[str, Any]) -> str:
    """The policy's seat in a game row: the logged ``seat``, else (logs before 2026-11-29 midday, whose seats
    alternated with the row) the row ``index``'s parity, else "-"."""
    if isinstance(row.get("seat"), int):
        return str(row["seat"])
    return str(row["index"] % 2) if isinstance(row.get("index"), int) else "-"


def training_groups(path: Path, by_seat: bool = False) -> dict[tuple[int, str, str, Any], list[float]]:
    """Each training group's rewards, keyed by (step, case, opponent, seed); ``by_seat``: the opponent label also
    names the policy's seat ("random, seat 1"). Lines that are not JSON are skipped."""
    groups: dict[tuple[int, str, str, Any], list[float]] = defaultdict(list)
    for line in log_lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or row.get("split") != "train" or "score" not in row or "step" not in row:
            continue
        opponent = str(row.get("opponent") or "-") + (f", seat {seat_of(row)}" if by_seat else "")
        key = (int(row["step"]), str(row.get("case")), opponent, row.get("seed"))
        groups[key].append(float(row["score"]))
    return groups


def tally(groups: dict[tuple[int, str, str, Any], list[float]], window: int) -> dict[tuple[str, str, int], GroupTally]:
    """Groups per (case, opponent, first step of the window); window 0 puts every step in one window (step 0)."""
    out: dict[tuple[str, str, int], GroupTally] = defaultdict(GroupTally)
    for (step, case, opponent, _seed), scores in groups.items():
        start = 0 if window <= 0 else ((step - 1) // window) * window + 1
        out[(case, opponent, start)].add(scores)
    return out


def table(tallies: dict[tuple[str, str, int], GroupTally], window: int) -> str:
    """Markdown: groups with signal (Wilson 95 %) and mean reward per case, opponent and window."""
    lines = ["| case | opponent | steps | groups | with signal [95 %] | mean reward |", "|---|---|---|---|---|---|"]
    for (case, opponent, start), t in sorted(tallies.items()):
        share = proportion(t.with_signal, t.groups)
        steps = "all" if window <= 0 else f"{start}-{start + window - 1}"
        lines.append(f"| {case} | {opponent} | {steps} | {t.groups} | {100 * share['rate']:.0f} % "
                     f"[{100 * share['ci_low']:.0f}, {100 * share['ci_high']:.0f}] | {t.reward_sum / t.games:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the run's <run>.samples.jsonl (or .jsonl.gz)")
    parser.add_argument("--window", type=int, default=0, help="steps per row (0: the whole run in one row)")
    parser.add_argument("--by-seat", action="store_true", help="one row per opponent and seat of the policy")
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        parser.error(f"log: no such file {args.log}")
    groups = training_groups(args.log, args.by_seat)
    if not groups:
        parser.error(f"log: {args.log} has no training rows with a step and a score")
    tallies = tally(groups, args.window)
    text = table(tallies, args.window)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text + "\n")
        rows = [{"case": c, "opponent": o, "first_step": s, "groups": t.groups, "with_signal": t.with_signal,
                 "mean_reward": t.reward_sum / t.games, "group_sizes": sorted(t.sizes)}
                for (c, o, s), t in sorted(tallies.items())]
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
