"""verl's held-out validation passes of a GRPO run, per case, from its sample log (no GPU, no model).

verl validates greedily on the held-out prompts before training and every ``trainer.test_freq`` steps; the
metrics file keeps only each case's mean reward (format shaping included). The sample log keeps every validation
reply with its pass number (``block``), so this reads per pass and case: the engine score (``task_score``, illegal
= 0: the number ``verl-ext eval`` reports) with its normal 95 % interval, the legal rate, the favourite reply's
share, the engine score on the positions with a one-ply tactic and on the rest, and the one-ply tactics (where a
win is on the board, the share of replies that take it; where the opponent threatens one, the share that block it)
with Wilson intervals. Whole-game rows (``TASK_MODE=game`` or ``mixed``) count alike: their score is the game's (win 1,
draw 1/2, loss 0), they count as their own case ("tic_tac_toe games": a mixed run keeps them apart from its single
moves), their favourite is the opening reply, and a last column gives the games' wins / draws / losses.
When the log records each task's seed
(since 2026-11-27), it also pairs every later pass with the first on the same positions: the change in engine
score with its interval, and how many positions got better or worse. ``--baseline`` pairs each pass with the same
pass of another run (an arm against the run beside it, from the same cold start).

    python bench/learning/val_passes.py runs/x/logs/grpo-*.samples.jsonl --test-freq 20 \\
        --out docs/runs/X/val_passes [--baseline runs/y/logs/grpo-*.samples.jsonl]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from verl_ext.envs.answer import action_named_by
from verl_ext.evaluation.paired import paired_summary
from verl_ext.evaluation.report import change_text, rate_text, score_text, wdl_text
from verl_ext.evaluation.stats import mean_interval, proportion
from verl_ext.group_stats import tactic_count
from verl_ext.sample_view import log_lines


def read_val_rows(path: Path) -> tuple[list[dict[str, Any]], dict[tuple[Any, Any], str]]:
    """Validation rows (``split == "val"``) of a sample log in file order, and the reply text of every
    (case, answer id) that a kept reply (training ones too) shows: the id names the canonical answer (the action),
    so "x3" and "o3" share one. Lines that are not JSON are skipped."""
    rows, texts = [], {}
    for line in log_lines(path):
        if '"val"' not in line and '"reply"' not in line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        if "reply" in row:
            texts.setdefault((row.get("case"), row.get("answer_id")), str(row["reply"]))
        if row.get("split") == "val":
            rows.append(row)
    return rows, texts


def answer_text(case: str, answer: Any, texts: dict[tuple[Any, Any], str]) -> str:
    """How a table shows answer id ``answer`` of ``case``: a kept reply with that answer, else the game action it
    names (the log keeps the text of a few replies only), else the id itself."""
    if (case, answer) in texts:
        return texts[(case, answer)]
    action = action_named_by(answer) if isinstance(answer, (int, float)) else None
    return f"action {action} (no reply kept)" if action is not None else f"answer id {answer}"


def row_case(row: dict[str, Any]) -> str:
    """The case a validation row counts under: its game, with " games" for a whole game, so that a mixed run's
    passes (``TASK_MODE=mixed``) keep whole games and single moves apart."""
    return f"{row.get('case')} games" if row.get("game") else str(row.get("case"))


def summarise(rows: list[dict[str, Any]], test_freq: int, texts: dict[tuple[Any, Any], str]) -> list[dict[str, Any]]:
    """One record per (validation pass, case): step, n, engine score, legal rate, favourite, tactics."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(int(row.get("block") or 0), row_case(row))].append(row)
    records = []
    for (block, case), group in sorted(groups.items()):
        # the log keeps the text of a few replies only; every row has its answer's id
        replies = Counter(r.get("answer_id") for r in group if r.get("valid"))
        favourite_id, count = replies.most_common(1)[0] if replies else (None, 0)
        favourite = answer_text(str(group[0].get("case")), favourite_id, texts)
        games = [r for r in group if r.get("game")]
        if games:  # a whole game's reply holds every turn: its answer id names the opening one
            opening, end, _ = favourite.partition("</answer>")
            favourite = opening + end
        wins = [r for r in group if r.get("win_chance")]
        blocks = [r for r in group if r.get("block_chance")]
        quiet = [r for r in group if not r.get("win_chance") and not r.get("block_chance")]
        records.append({
            "pass": block, "step": (block - 1) * test_freq if block else None, "case": case, "n": len(group),
            "engine": mean_interval([float(r.get("task_score") or 0.0) for r in group]),
            # where a win or a block is on the board (what train_positions=tactical trains on), and elsewhere
            "engine_tactical": mean_interval([float(r.get("task_score") or 0.0) for r in wins + blocks]),
            "engine_quiet": mean_interval([float(r.get("task_score") or 0.0) for r in quiet]),
            "legal": proportion(sum(1 for r in group if r.get("valid")), len(group)),
            "favourite": favourite, "favourite_share": count / max(1, sum(replies.values())),
            # a single move's tactics are 0/1 flags, a whole game's counts over its turns (since 2026-11-28 night)
            "took_win": _tactic_share(group, "win_chance", "win_taken"),
            "blocked": _tactic_share(group, "block_chance", "blocked"),
            # the engine score the pass loses on wins not taken and threats not blocked, over all its positions:
            # what taking every win / making every block would add at most (another move may be worth as much)
            "lost_to_missed_wins": _lost(wins, "win_taken", len(group)),
            "lost_to_missed_blocks": _lost(blocks, "blocked", len(group)),
            "games": {outcome: sum(1 for r in games if r.get(outcome)) for outcome in ("win", "draw", "loss")},
        })
    return records


def _scores_by_pass(rows: list[dict[str, Any]]) -> dict[tuple[int, str], dict[int, float]]:
    """{(pass, case): {task seed: engine score}} of the rows that record their seed (since 2026-11-27)."""
    by_pass: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    for row in rows:
        seed = row.get("seed")
        if isinstance(seed, int):
            by_pass[(int(row.get("block") or 0), row_case(row))][seed] = float(row.get("task_score") or 0.0)
    return by_pass


def _paired(mine: dict[int, float], theirs: dict[int, float]) -> dict[str, Any] | None:
    common = sorted(mine.keys() & theirs.keys())
    return paired_summary([mine[s] for s in common], [theirs[s] for s in common]) if common else None


def _tactic_share(rows: list[dict[str, Any]], chance: str, done: str) -> dict[str, Any]:
    """Of the chances (a single move's flag, a game's turns) the share played right, with its Wilson interval."""
    pairs = [(tactic_count(r.get(chance)), tactic_count(r.get(done))) for r in rows]
    return proportion(sum(min(c, d) for c, d in pairs), sum(c for c, _ in pairs))


def _lost(rows: list[dict[str, Any]], taken: str, n: int) -> float:
    return sum(1.0 - float(r.get("task_score") or 0.0) for r in rows if not r.get(taken)) / max(1, n)


def paired_changes(rows: list[dict[str, Any]], records: list[dict[str, Any]],
                   from_step: int | None = None) -> list[dict[str, Any]]:
    """Per case and later pass, the change in engine score from the first pass (or the pass at ``from_step``:
    issue 45 compares step 100 with step 20) on the same positions (matched by
    the task ``seed`` the sample log records since 2026-11-27): mean difference with its normal 95 % interval, and
    how many positions got better or worse. A paired difference is far tighter than two passes' own intervals.
    Empty when the log has no seeds (older runs)."""
    by_pass = _scores_by_pass(rows)
    changes = []
    for case in sorted({r["case"] for r in records}):
        step_of = {r["pass"]: r["step"] for r in records if r["case"] == case}
        passes = sorted(step_of)
        start = next((p for p in passes if step_of[p] == from_step), None) if from_step is not None else passes[0]
        if start is None:
            continue
        for later in (p for p in passes if p > start):
            pair = _paired(by_pass.get((later, case), {}), by_pass.get((start, case), {}))
            if pair:
                changes.append({"case": case, "step": step_of[later], "from_step": step_of[start], **pair})
    return changes


def paired_with_baseline(rows: list[dict[str, Any]], base_rows: list[dict[str, Any]],
                         records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and pass, this run's engine score minus a baseline run's at the same pass, on the positions both
    validated (by task seed): how an arm compares with the run beside it, position by position. Passes or cases
    the baseline lacks are left out."""
    mine, theirs = _scores_by_pass(rows), _scores_by_pass(base_rows)
    changes = []
    for r in records:
        pair = _paired(mine.get((r["pass"], r["case"]), {}), theirs.get((r["pass"], r["case"]), {}))
        if pair:
            changes.append({"case": r["case"], "step": r["step"], **pair})
    return sorted(changes, key=lambda c: (c["case"], c["step"]))


def changes_to_markdown(changes: list[dict[str, Any]], against: str = "the first pass") -> str:
    """A table of paired changes (from the first pass, or against another run)."""
    lines = [f"| step | case | positions | engine score change from {against} [95 %] | better | worse |",
             "|---" * 6 + "|"]
    for c in changes:
        lines.append(f"| {c['step']} | {c['case']} | {c['positions']} | {change_text(c['change'])} | {c['better']} | "
                     f"{c['worse']} |")
    return "\n".join(lines) + "\n"


def _rate(p: dict[str, Any]) -> str:
    """A rate with its interval and how many chances it counts."""
    return "-" if p["rate"] is None else f"{rate_text(p)} ({p['n']})"


def _outcomes(games: dict[str, int]) -> str:
    """Whole games' wins / draws / losses, or - where the pass validated single moves only."""
    return wdl_text(games) if sum(games.values()) else "-"


def to_markdown(records: list[dict[str, Any]]) -> str:
    """A table with one row per (pass, case)."""
    lines = ["| step | case | n | engine score [95 %] | on positions with a win or a block | elsewhere | legal % | "
             "favourite answer (share of legal replies) | took the win % [95 %] (chances) | "
             "blocked % [95 %] (threats) | score lost to missed wins / blocks | games W/D/L |", "|---" * 12 + "|"]
    for r in records:
        lines.append(f"| {r['step']} | {r['case']} | {r['n']} | {score_text(r['engine'])} | "
                     f"{score_text(r['engine_tactical'])} | {score_text(r['engine_quiet'])} | "
                     f"{100 * r['legal']['rate']:.1f} | `{r['favourite']}` "
                     f"({100 * r['favourite_share']:.0f} %) | {_rate(r['took_win'])} | {_rate(r['blocked'])} | "
                     f"{r['lost_to_missed_wins']:.3f} / {r['lost_to_missed_blocks']:.3f} | {_outcomes(r['games'])} |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], path: Path) -> None:
    """Per case over the passes: the engine score with its interval, and wins taken / threats blocked with theirs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in records})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for case in cases:
        rows = [r for r in records if r["case"] == case]
        steps = [r["step"] for r in rows]
        means = [r["engine"]["mean"] for r in rows]
        low = [m - (r["engine"]["ci_low"] if r["engine"]["ci_low"] is not None else m) for m, r in zip(means, rows)]
        high = [(r["engine"]["ci_high"] if r["engine"]["ci_high"] is not None else m) - m for m, r in zip(means, rows)]
        axes[0].errorbar(steps, means, yerr=[low, high], marker="o", capsize=3, label=case)
        for key, style in (("took_win", "-"), ("blocked", ":")):
            kept = [(r["step"], r[key]) for r in rows if r[key]["rate"] is not None]
            if kept:
                rates = [p["rate"] for _, p in kept]
                axes[1].errorbar([step for step, _ in kept], rates,
                                 yerr=[[rate - p["ci_low"] for rate, (_, p) in zip(rates, kept)],
                                       [p["ci_high"] - rate for rate, (_, p) in zip(rates, kept)]],
                                 marker="o", capsize=3, linestyle=style,
                                 label=f"{case}: {'took the win' if key == 'took_win' else 'blocked'}")
    axes[0].set_title("held-out engine score (greedy) [95 %]")
    axes[1].set_title("held-out one-ply tactics [95 % Wilson]")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a case without tactics draws nothing in the second panel
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the run's <run>.samples.jsonl (or .jsonl.gz)")
    parser.add_argument("--test-freq", type=int, required=True, help="the run's trainer.test_freq (pass k = step (k-1) x this)")
    parser.add_argument("--out", type=Path, help="write OUT.json, OUT.md and OUT.png as well as printing the table")
    parser.add_argument("--from-step", type=int,
                        help="pair later passes with the pass at this step (default: the first pass, step 0)")
    parser.add_argument("--baseline", type=Path,
                        help="another run's sample log on the same held-out positions (the run beside this one): "
                             "adds this run's paired change against it at each pass")
    args = parser.parse_args(argv)
    if args.test_freq < 1:
        parser.error(f"--test-freq must be >= 1, got {args.test_freq}")
    rows, texts = read_val_rows(args.log)
    records = summarise(rows, args.test_freq, texts)
    if not records:
        parser.error(f"{args.log}: no validation rows (split 'val')")
    if args.from_step is not None and not any(r["step"] == args.from_step for r in records):
        parser.error(f"--from-step {args.from_step}: no validation pass at that step "
                     f"(passes at {sorted({r['step'] for r in records})})")
    changes = paired_changes(rows, records, args.from_step)
    table = to_markdown(records)
    if changes:
        start = "the first pass" if args.from_step is None else f"step {args.from_step}"
        table += "\nThe same positions, paired by task seed:\n\n" + changes_to_markdown(changes, start)
    against: list[dict[str, Any]] = []
    if args.baseline:
        base_rows, _ = read_val_rows(args.baseline)
        against = paired_with_baseline(rows, base_rows, records)
        if not against:
            parser.error(f"{args.baseline}: no validation pass shares a case, a pass and task seeds with {args.log}")
        table += (f"\nAgainst `{args.baseline.name}` at the same pass, paired by task seed:\n\n"
                  + changes_to_markdown(against, "the baseline run"))
    print(table, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({"passes": records, "paired_changes": changes,
                                                             "against_baseline": against},
                                                            indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table)
        plot(records, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
