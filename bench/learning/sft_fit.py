"""Did a cold start learn its teacher's moves (tic_tac_toe, connect_four), and do they carry to positions it never saw?

The board-game cold starts imitate the engine (MCTS(300)), whose moves keep tic_tac_toe's exact value in ~95 % of
their turns, yet the cold starts keep it in ~65 % of theirs in the arena and block threats at a random mover's rate
(docs/runs/2026-11-30-h200x2-ttt-lines/). Too little training (the SFT rows not fitted) and no generalisation (fitted,
but only those positions) call for different cold starts: more epochs or a higher learning rate, against more rows or
other rows. This script tells them apart without a GPU:

- it reads the SFT rows of the run (``verl-ext export --format sft``, deterministic: rebuild them on the CPU with the
  recipe's export command, e.g. ``recipe.sh --dry-run export``, and the code the cold start was made with), and
  collects every position of ``--case`` they show with the teacher's answer: the single-move rows (the prompt trained
  on) and each turn of the whole-game rows;
- it asks the model (greedy, the transformers backend of ``verl-ext eval``) for a move in up to ``--per-group``
  positions of each group, each with the prompt its rows show it with (a game turn's message alone, as a single-move
  chat; the board drawn in the run's ``openspiel.board_text``), and in the run's held-out positions (never trained
  on), with their own prompts;
- per group: the share of answers equal to the teacher's, that kept the exact value (OpenSpiel's alpha-beta search,
  ``verl_ext/envs/exact_values.py``; tic_tac_toe only, a connect_four tree is too large), that took a win on the
  board, that blocked a threat (``envs/tactics.one_ply``), with 95 % Wilson intervals, beside the teacher's own rates
  on the same positions.

    python bench/learning/sft_fit.py --model /tmp/bgcold/sft_hf --rows sft_train.parquet [--case connect_four] \\
        [--per-group 200] [--held-out-share 0.2 --val-tasks 256 --tasks 2400] [--board-text raw] \\
        [--out docs/runs/X/sft_fit]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

# beside this script
from block_lines import history_of
from game_log_report import board_rows
from value_turns import state_of

from verl_ext.envs.board_text import BOARD_TEXTS
from verl_ext.envs.exact_values import best_actions, exact_problem_of
from verl_ext.envs.openspiel_rules import legal_move_actions, load_game, match_move
from verl_ext.envs.tactics import one_ply
from verl_ext.evaluation.backends import GenerationSettings, TransformersBackend
from verl_ext.evaluation.single_move import heldout_tasks
from verl_ext.evaluation.stats import wilson_interval
from verl_ext.mixture import EnvMixture

# "game turns in context": the game turns again, each asked after its row's earlier turns (the teacher's replies),
# as whole-game training and the arena show them; "game turns only" asks the same turn as a single-move chat
GROUPS = ("single rows", "game turns only", "game turns in context", "held-out")
BOARDS = {"tic_tac_toe": (3, 3), "connect_four": (6, 7)}  # rows, columns of the board a prompt shows
_SEAT = re.compile(r"as player (\d) of 2")
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


@dataclass(frozen=True)
class Position:
    """A decision of the game: the serialized OpenSpiel state, the teacher's move there (its action; None when the
    teacher's answer names no legal move), the prompt that shows it and, for a game turn, the row's messages before
    it (its earlier turns with the teacher's replies)."""

    state: str
    teacher: int | None
    prompt: str
    context: tuple[tuple[str, str], ...] = ()

    def chat(self, in_context: bool = False) -> list[dict[str, str]]:
        """The chat that asks for this move: the prompt alone, or after the row's earlier messages."""
        earlier = [{"role": role, "content": content} for role, content in self.context] if in_context else []
        return [*earlier, {"role": "user", "content": self.prompt}]


def action_of(state: Any, move: str | None) -> int | None:
    """The legal action that ``move`` names as the env matches a reply's answer (``match_move``), else None."""
    if move is None:
        return None
    moves = legal_move_actions(state)
    named = match_move(moves, move.strip())
    return moves[named] if named is not None else None


def state_from_board(case: str, board: list[str], seat: int) -> Any:
    """The OpenSpiel state of ``case`` with ``board`` (rows top first) and ``seat`` to move, or None when no game
    reaches it (any move order serves: the teacher and the tactics depend on the board alone)."""
    if case == "tic_tac_toe":
        return state_of(board, seat)
    order = history_of(board, seat)
    if order is None:
        return None
    state = load_game(case).new_initial_state()
    for column in order:
        if state.is_terminal():
            return None
        state.apply_action(column)
    return None if state.is_terminal() or state.current_player() != seat else state


def rows_positions(path: Path, case: str = "tic_tac_toe") -> dict[str, dict[str, Position]]:
    """{"single rows" | "game turns only" | "game turns in context": {board key: Position}} from an SFT parquet's rows
    of ``case``: a row of one user turn is a single-move row; every user turn of a longer row is a game turn (the last
    two groups hold the same turns, which carry their row's earlier messages). A position shown both ways counts as a
    single row (its exact prompt was trained on)."""
    found: dict[str, dict[str, Position]] = {"single rows": {}, "game turns only": {}}
    for row in pq.read_table(path, columns=["messages"]).to_pylist():
        messages = list(row["messages"])
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        group = "single rows" if len(users) == 1 else "game turns only"
        for i in users:
            text = messages[i]["content"]
            board, seat = board_rows(text, *BOARDS[case]), _SEAT.search(text)
            if board is None or seat is None or i + 1 >= len(messages):
                continue
            key = "/".join(board) + f"|{seat.group(1)}"
            if key in found[group]:  # the first showing of a position stands
                continue
            state = state_from_board(case, board, int(seat.group(1)))
            if state is None:
                continue
            answer = _ANSWER.search(messages[i + 1]["content"])
            context = tuple((m["role"], m["content"]) for m in messages[:i]) if group == "game turns only" else ()
            found[group][key] = Position(state.serialize(), action_of(state, answer.group(1) if answer else None),
                                         text, context)
    for key in found["single rows"]:
        found["game turns only"].pop(key, None)
    return found | {"game turns in context": found["game turns only"]}


def held_out_positions(case: str, share: float, val_tasks: int, tasks: int,
                       board_text: str = "raw") -> dict[str, Position]:
    """The run's held-out positions of ``case`` (``verl-ext eval``'s single suite) with the engine's move and their
    prompt."""
    mixture = EnvMixture({"openspiel": {"game_types": [case], "seed": 0, "num_tasks_per_case": tasks,
                                        "board_text": board_text},
                          "held_out_share": share, "val_tasks_per_case": val_tasks}, where="env")
    adapter = mixture.adapters["openspiel"]
    found = {}
    for task in heldout_tasks(mixture, "openspiel"):
        state = load_game(case).deserialize_state(task.state)
        move = adapter.reference_move(case, state, task.seed)
        found[task.state] = Position(task.state, action_of(state, move), task.messages[-1]["content"])
    return found


def tally(positions: list[Position], answers: list[int | None], case: str = "tic_tac_toe") -> dict[str, Any]:
    """The rates of one group, the model's and the teacher's, each with its Wilson interval (no exact value where
    ``case`` cannot be searched to its end: those rates have no positions)."""
    counts: Counter[str] = Counter()
    exact = exact_problem_of(case) is None
    for position, answer in zip(positions, answers):
        tactics = one_ply(case, position.state)
        counts["positions"] += 1
        counts["legal"] += answer is not None
        counts["same as teacher"] += answer is not None and answer == position.teacher
        if exact:
            best = best_actions(case, load_game(case).deserialize_state(position.state))
            counts["valued"] += 1
            counts["kept the value"] += answer in best
            counts["teacher kept the value"] += position.teacher in best
        if tactics is not None and tactics.win_available:
            counts["win chances"] += 1
            counts["took the win"] += answer in tactics.winning
            counts["teacher took the win"] += position.teacher in tactics.winning
        elif tactics is not None and tactics.must_block:
            counts["block chances"] += 1
            counts["blocked"] += answer is not None and answer not in tactics.losing
            counts["teacher blocked"] += position.teacher is not None and position.teacher not in tactics.losing
    out: dict[str, Any] = {"positions": counts["positions"]}
    for name, base in (("legal", "positions"), ("same as teacher", "positions"), ("kept the value", "valued"),
                       ("teacher kept the value", "valued"), ("took the win", "win chances"),
                       ("teacher took the win", "win chances"), ("blocked", "block chances"),
                       ("teacher blocked", "block chances")):
        low, high = wilson_interval(counts[name], counts[base]) if counts[base] else (None, None)
        out[name] = {"n": counts[name], "of": counts[base],
                     "rate": counts[name] / counts[base] if counts[base] else None, "low": low, "high": high}
    return out


def markdown(results: dict[str, dict[str, Any]]) -> str:
    def cell(entry: dict[str, Any]) -> str:
        if entry["rate"] is None:
            return "-"
        return f"{100 * entry['rate']:.1f} [{100 * entry['low']:.1f}, {100 * entry['high']:.1f}] ({entry['of']})"

    keys = ("same as teacher", "kept the value", "teacher kept the value", "took the win", "teacher took the win",
            "blocked", "teacher blocked")
    lines = ["| group | positions | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    for group, result in results.items():
        lines.append(f"| {group} | {result['positions']} | " + " | ".join(cell(result[k]) for k in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the cold start (a Hugging Face folder)")
    parser.add_argument("--rows", type=Path, required=True, help="the run's SFT rows (verl-ext export --format sft)")
    parser.add_argument("--case", choices=sorted(BOARDS), default="tic_tac_toe")
    parser.add_argument("--per-group", type=int, default=200, help="positions asked per group (a seeded sample)")
    parser.add_argument("--held-out-share", type=float, default=0.2)
    parser.add_argument("--val-tasks", type=int, default=256, help="held-out positions per case (val_tasks_per_case)")
    parser.add_argument("--tasks", type=int, default=2400, help="openspiel.num_tasks_per_case of the run")
    parser.add_argument("--board-text", choices=BOARD_TEXTS, default="raw",
                        help="openspiel.board_text of the run (how the held-out prompts draw the board)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.per_group <= 0:
        parser.error(f"--per-group: must be > 0, got {args.per_group}")

    groups = rows_positions(args.rows, args.case)
    if not groups["single rows"] and not groups["game turns only"]:
        parser.error(f"--rows: no {args.case} position in {args.rows} (rows of another game, or not SFT rows?)")
    groups["held-out"] = held_out_positions(args.case, args.held_out_share, args.val_tasks, args.tasks,
                                            args.board_text)
    seen = {p.state for group in ("single rows", "game turns only") for p in groups[group].values()}
    shown = sum(p.state in seen for p in groups["held-out"].values())
    if shown:  # whole games are split by seed, not by position: a held-out position can come up in a game row
        print(f"note: {shown} of {len(groups['held-out'])} held-out positions are shown in {args.rows}",
              file=sys.stderr)
    rng = random.Random(args.seed)
    backend = TransformersBackend(args.model, None, GenerationSettings(max_new_tokens=16, batch_size=args.batch_size,
                                                                       dtype="float32"))
    results: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[Position]] = {}
    for group in GROUPS:
        keys = sorted(groups[group])
        in_context = group == "game turns in context"
        if in_context:  # the same turns as "game turns only", paired (and the held-out sample drawn as before)
            sample = samples["game turns only"]
        else:
            sample = [groups[group][k] for k in rng.sample(keys, min(args.per_group, len(keys)))]
        samples[group] = sample
        replies = backend.generate([p.chat(in_context) for p in sample], [args.seed] * len(sample))
        answers = []
        for position, reply in zip(sample, replies):
            match = _ANSWER.search(reply)
            answers.append(action_of(load_game(args.case).deserialize_state(position.state),
                                     match.group(1) if match else None))
        results[group] = tally(sample, answers, args.case) | {"available": len(keys)}
        print(f"{group}: {len(sample)} of {len(keys)} positions asked", file=sys.stderr)
    table = markdown(results)
    print(table, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
