"""`verl-ext signal` on full-game rows (verl_ext/evaluation/signal_games.py): n games per row of the same deal,
played by the training game loop and scored by the training reward; groups of identical games; the budgets."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from verl_ext.evaluation.signal_check import main as signal_main
from verl_ext.evaluation.signal_check import training_rows
from verl_ext.evaluation.signal_games import GameBudgets, is_game_row, play_groups
from verl_ext.evaluation.signal_report import GroupTally, markdown, no_signal_warning
from verl_ext.tiny_model import build_qwen2

LEGAL = re.compile(r"Legal moves[^:]*: (.+?)(?:\n|$)")
RUN_BUDGETS = GameBudgets(response_length=3584, prompt_length=512)  # the train script's for board games


def section(opponent: str = "random", **game: Any) -> dict[str, Any]:
    return {"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 8, "task_mode": "game",
                          "reward_mode": "engine", "game": {"opponent": opponent, **game}}}


def legal_moves(chat: list[dict[str, str]]) -> list[str]:
    """The legal moves listed in the chat's last user message (the position prompt or a correction)."""
    found = LEGAL.findall(chat[-1]["content"])
    assert found, chat[-1]["content"]
    return [m.strip().rstrip(".") for m in found[-1].split(", ")]


class ScriptedBackend:
    """Answers every turn with a legal move: the first listed (``first``) or one drawn from the call's seed
    (``sampled``, as a sampling policy whose games differ); ``filler`` tokens of text before the answer."""

    name = "scripted"

    def __init__(self, tokenizer: Any, mode: str, filler: int = 0) -> None:
        self.tokenizer, self.mode, self.filler = tokenizer, mode, filler
        self.calls: list[tuple[int, int | None]] = []

    def generate(self, chats, seeds, max_new_tokens=None):
        self.calls.append((len(chats), max_new_tokens))
        replies = []
        for chat, seed in zip(chats, seeds):
            moves = legal_moves(chat)
            move = moves[0] if self.mode == "first" else random.Random(seed).choice(moves)
            replies.append("Yes " * self.filler + f"<answer>{move}</answer>")
        return replies

    def close(self) -> None:
        pass


def groups_of(tokenizer, mode: str, env: dict[str, Any], prompts: int = 4, n: int = 4,
              budgets: GameBudgets = RUN_BUDGETS, filler: int = 0):
    rows = training_rows(env, prompts)
    backend = ScriptedBackend(tokenizer, mode, filler)
    return rows, play_groups(backend, tokenizer, rows, n, seed=0, budgets=budgets, progress=False), backend


def test_a_policy_that_always_names_the_same_move_plays_one_game_n_times(tokenizer):
    rows, groups, _ = groups_of(tokenizer, "first", section())
    assert all(is_game_row(row) for row in rows) and [len(g) for g in groups] == [4] * 4
    tally = GroupTally()
    for group in groups:
        assert len({game.moves for game in group}) == 1  # same deal, same bot seed, same replies
        assert len({game.score for game in group}) == 1
        tally.add(group, 3584)
    summary = tally.summary(0.95)
    assert summary["identical_games"]["k"] == 4 and summary["groups_with_signal"]["k"] == 0
    assert summary["valid"]["rate"] == 1.0 and summary["reward_failures"] == 0  # the reward trusted every record
    warning = no_signal_warning(summary, threshold=0.1, max_new_tokens=3584)
    assert warning is not None and "higher rollout temperature" in warning and "SFT_REFERENCE_MARGIN" in warning


def test_sampled_moves_give_different_games_and_signal(tokenizer):
    _, groups, _ = groups_of(tokenizer, "sampled", section(), prompts=6, n=6)
    tally = GroupTally()
    for group in groups:
        tally.add(group, 3584)
        assert all(0.0 <= game.score <= 1.0 and game.tokens and game.tokens > 0 for game in group)
        assert all(game.reply.count("<answer>") == len(game.reply.split("\n--- next turn ---\n")) for game in group)
    summary = tally.summary(0.95)
    assert summary["identical_games"]["k"] < 6 and summary["groups_with_signal"]["k"] >= 1
    assert summary["reward_failures"] == 0


def test_the_games_are_the_rows_deal_and_score_as_the_reward_scores_them(tokenizer):
    """Every game of a group starts from the row's seed and seat against the opponent the seed draws; its score is
    ``compute_score`` of its record (the reward refuses a record whose opponent is not the row's)."""
    env = section("random:0.5,mcts:5:0.5")
    rows, groups, _ = groups_of(tokenizer, "first", env, prompts=3, n=2)
    assert [row["extra_info"]["seat"] for row in rows] == [0, 0, 1]
    for row, group in zip(rows, groups):
        # as the first mover the policy opens with x; as the second the bot has opened and the policy plays o
        assert group[0].moves[0] == ("x(0,0)" if row["extra_info"]["seat"] == 0 else "o(0,0)") or \
            (row["extra_info"]["seat"] == 1 and group[0].moves[0].startswith("o("))
        assert all(not game.failed for game in group)


def test_a_games_budget_stops_it_as_the_agent_loop_does(tokenizer):
    """A response budget too small for a whole game: the game stops as truncated (scored with truncated_reward, 0
    here) instead of running past it; a reply longer than what is left is cut to it and judged."""
    _, groups, backend = groups_of(tokenizer, "first", section(), prompts=2, n=2,
                                      budgets=GameBudgets(response_length=60, prompt_length=512))
    for group in groups:
        for game in group:
            assert game.tokens is not None and game.tokens <= 60
            assert game.score == 0.0 and len(game.moves) <= 2
    assert all(cap is not None and cap <= 256 for _, cap in backend.calls)
    _, cut, _ = groups_of(tokenizer, "first", section(max_tokens_per_turn=6), prompts=1, n=2, filler=10)
    assert all(not game.valid and set(game.moves) == {""} for game in cut[0])  # cut before its answer: forfeit


def test_self_play_opponents_reply_through_the_same_backend(tokenizer):
    _, groups, _ = groups_of(tokenizer, "sampled", section("self"), prompts=2, n=2)
    for group in groups:
        for game in group:
            assert len(game.moves) >= 5  # both seats' answers: a tic_tac_toe game has at least five moves
            assert not game.failed


# ----------------------------------------------------------------------------------------- the CLI, a tiny model
@pytest.fixture(scope="module")
def tiny_model(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen2(tmp_path_factory.mktemp("signal_games") / "model", "tiny", tokenizer_dir, seed=0,
                       dtype="float32")


def test_the_cli_plays_whole_games_for_game_rows(tiny_model, tmp_path, capsys):
    out = tmp_path / "out"
    code = signal_main(["--model", str(tiny_model), "--set", "openspiel.game_types=[tic_tac_toe]",
                        "--set", "openspiel.num_tasks_per_case=4", "--set", "openspiel.task_mode=game",
                        "--set", "openspiel.game.max_tokens_per_turn=8", "--prompts", "2", "--n", "2",
                        "--max-new-tokens", "400", "--backend", "transformers", "--no-progress", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "signal.json").read_text())
    assert report["settings"]["game_rows"] == 2 and report["overall"]["groups"] == 2
    assert report["overall"]["identical_games"]["n"] == 2
    assert set(report["cases"]) == {"openspiel-game/tic_tac_toe"}
    text = (out / "signal.md").read_text()
    assert "2 of the 2 prompts are whole games" in text and "were the very same game" in text
    assert markdown(report).startswith("# Signal check")
    assert "| **overall** | 2 |" in capsys.readouterr().out


def test_mixed_rows_check_single_moves_and_whole_games_in_one_report(tiny_model, tmp_path):
    out = tmp_path / "out"
    assert signal_main(["--model", str(tiny_model), "--set", "openspiel.game_types=[tic_tac_toe]",
                        "--set", "openspiel.num_tasks_per_case=8", "--set", "openspiel.task_mode=mixed",
                        "--set", "openspiel.game.max_tokens_per_turn=8", "--prompts", "8", "--n", "2",
                        "--max-new-tokens", "300", "--backend", "transformers", "--no-progress",
                        "--out", str(out)]) == 0
    report = json.loads((out / "signal.json").read_text())
    assert 0 < report["settings"]["game_rows"] < 8 and report["overall"]["groups"] == 8
    assert set(report["cases"]) == {"openspiel-game/tic_tac_toe", "openspiel/tic_tac_toe"}
    # single moves alone are no games: the identical-games share counts the game groups only
    assert report["overall"]["identical_games"]["n"] == report["settings"]["game_rows"]


def test_the_train_scripts_check_alone_plays_the_runs_games_and_starts_nothing(tiny_model, tmp_path):
    """SIGNAL_PRECHECK=only (the recipe's signal stage for whole games): the check with the run's own overrides,
    its report in SIGNAL_PRECHECK_OUT, and no Ray, no rollout engine, no run."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUN_PROFILE", "GAME_TYPES", "TASK_MODE"))}
    env.update(PYTHON=sys.executable, SIGNAL_PRECHECK="only", SIGNAL_PRECHECK_OUT=str(tmp_path / "signal"),
               SIGNAL_PRECHECK_PROMPTS="1", SIGNAL_PRECHECK_BACKEND="transformers", TASK_MODE="game",
               GAME_TYPES="tic_tac_toe", MODEL_PATH=str(tiny_model), ROLLOUT_N="2", MAX_REPLY_LENGTH="4",
               MAX_RESPONSE_LENGTH="300", LOG_DIR=str(tmp_path / "logs"), RUN_PROFILE="smoke")
    run = subprocess.run(["bash", str(repo / "train/scripts/openspiel-ppo.sh"),
                          "actor_rollout_ref.rollout.temperature=1.3"], capture_output=True, text=True, env=env,
                         cwd=repo, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "signal" / "signal.json").read_text())
    assert report["settings"]["game_rows"] == 1 and report["settings"]["temperature"] == 1.3
    assert report["settings"]["n"] == 2 and report["settings"]["max_new_tokens"] == 300
    assert report["env"]["openspiel"]["game"]["max_tokens_per_turn"] == 4
    assert "logging to" not in run.stdout  # what launch prints as it starts a run
    assert "signal pre-check (SIGNAL_PRECHECK=only)" in run.stdout
