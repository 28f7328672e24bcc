"""``verl-ext demo``: the whole env pipeline on a CPU in a few seconds.

Exports a small dataset, shows one prompt, and scores three scripted policies per case with the
training reward (``compute_score``): a random legal move, a deliberately malformed answer, and the
engine/solver reference answer.
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .export import build_rows, load_env_section, write_parquet
from .mixture import EnvMixture, is_game
from .reward import compute_score

DEFAULT_SETTINGS = [
    "openspiel.game_types=[tic_tac_toe,connect_four,hex,chess,leduc_poker]",
    "openspiel.num_tasks_per_case=8",
    "openspiel.reward_mode=engine",
    "openspiel.mcts_simulations=100",
    "logic.cases=[knights_knaves,mini_sudoku]",
    "logic.num_tasks_per_case=8",
]


def _random_answer(row: dict, task_moves: tuple[str, ...], rng: random.Random, answers: list[str]) -> str:
    if task_moves:
        return f"I pick one at random.\n<answer>{rng.choice(task_moves)}</answer>"
    return f"<answer>{rng.choice(answers)}</answer>"  # a random answer of the same puzzle family


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-ext demo", description=__doc__)
    parser.add_argument("--set", dest="overrides", action="append", default=None, metavar="KEY=VALUE")
    parser.add_argument("--out", default="outputs/demo", help="folder for the exported parquet files")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    console = Console(width=120)
    mixture = EnvMixture(load_env_section(None, args.overrides or DEFAULT_SETTINGS), where="env")
    out = Path(args.out)
    rows, _ = build_rows(mixture, "train", "rl", progress=False)
    write_parquet(rows, out / "train.parquet")
    val_rows, _ = build_rows(mixture, "val", "rl", progress=False)
    write_parquet(val_rows, out / "val.parquet")
    console.print(f"[bold]Exported[/] {len(rows)} train and {len(val_rows)} val rows to {out}/")
    console.rule("one prompt")
    console.print(rows[0]["prompt"][0]["content"], markup=False)
    console.rule("baselines, scored by verl_ext.reward.compute_score")

    rng = random.Random(args.seed)
    by_case: dict[str, list[tuple[dict, object]]] = {}
    for ref, row in zip(mixture.plan("val"), val_rows):
        task = mixture.build(ref)
        if not is_game(task):  # full-game rows are scored from a played game (docs/games.md), not one reply
            by_case.setdefault(row["data_source"], []).append((row, task))
    table = Table("case", "tasks", "random: score", "random: valid", "malformed: score", "reference: score")
    for source, items in by_case.items():
        answers = [task.ground_truth for _, task in items if task.ground_truth]
        adapter = mixture.adapters[items[0][1].env]
        scores: dict[str, list[dict]] = {"random": [], "malformed": [], "reference": []}
        for row, task in items:
            def score(text: str) -> dict:
                return compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
            scores["random"].append(score(_random_answer(row, task.legal_moves, rng, answers)))
            scores["malformed"].append(score("my move is " + (task.legal_moves or ("?",))[0]))
            reference = adapter.reference_answer(task)
            if reference is not None:
                scores["reference"].append(score(reference))

        def mean(name: str, key: str = "score") -> str:
            values = [s[key] for s in scores[name]]
            return f"{statistics.fmean(values):.3f}" if values else "-"
        table.add_row(source[:48], str(len(items)), mean("random"), mean("random", "valid"), mean("malformed"),
                      mean("reference"))
    console.print(table)
    return 0
