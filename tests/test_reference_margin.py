"""``openspiel.reference_margin``: a teacher that draws its move among the engine's good moves, so that a cold start
fitted to its rows still varies (docs/learning.md, "A teacher that varies its moves"). Every drawn move is one the
engine reward pays at least 1 - margin, a win on the board is never passed up, the draws are reproducible, and 0
keeps the engine's one best move."""

from __future__ import annotations

import random
import shlex
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pyspiel
import pytest
from test_card_runs import recipe_environ

from verl_ext.envs.config import ConfigError
from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.openspiel_env import OpenSpielAdapter, OpenSpielConfig
from verl_ext.envs.tactics import one_ply
from verl_ext.export import main as export_main
from verl_ext.games.demonstration import demonstration_messages, engine_move

REPO = Path(__file__).resolve().parents[1]


def engine(margin: float | dict[str, float] = 0.0, **overrides) -> OpenSpielAdapter:
    config = OpenSpielConfig(game_types=["tic_tac_toe", "connect_four"], reward_mode="engine",
                             reference_margin=margin, **overrides)
    config.validate("openspiel")
    return OpenSpielAdapter(config)


def random_states(case: str, count: int, seed: int = 0) -> list[pyspiel.State]:
    game, rng, states = pyspiel.load_game(case), random.Random(seed), []
    while len(states) < count:
        state = game.new_initial_state()
        for _ in range(rng.randrange(0, 6)):
            state.apply_action(rng.choice(state.legal_actions()))
            if state.is_terminal():
                break
        if not state.is_terminal():
            states.append(state)
    return states


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.1", float("nan"), None, True])
def test_a_margin_outside_zero_to_one_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"openspiel\.reference_margin: must be a number in \[0, 1\]"):
        OpenSpielConfig(game_types=["tic_tac_toe"], reference_margin=value).validate("openspiel")
    with pytest.raises(ConfigError, match=r"openspiel\.reference_margin\.connect_four: must be a number in \[0, 1\]"):
        OpenSpielConfig(reference_margin={"tic_tac_toe": 0.1, "connect_four": value}).validate("openspiel")


def test_a_margin_per_game_names_the_runs_cases_and_leaves_the_others_to_the_engine():
    from verl_ext.envs.config import from_mapping

    with pytest.raises(ConfigError, match=r"env\.openspiel\.reference_margin: 'hex' is not one of this run's cases"):
        OpenSpielAdapter(from_mapping(OpenSpielConfig, {"game_types": ["tic_tac_toe"], "reference_margin": {"hex": 0.1}},
                                      "env.openspiel"), where="env.openspiel")
    adapter = engine({"tic_tac_toe": 0.1})
    assert (adapter.reference_margin_of("tic_tac_toe"), adapter.reference_margin_of("connect_four")) == (0.1, 0.0)
    for case, spread in (("tic_tac_toe", True), ("connect_four", False)):
        state = pyspiel.load_game(case).new_initial_state()
        moves = {adapter.reference_move(case, state, seed) for seed in range(40)}
        assert (len(moves) > 1) == spread, case


@pytest.mark.parametrize("case", ["tic_tac_toe", "connect_four"])
def test_good_moves_are_within_the_margin_keep_the_exact_value_and_never_pass_up_a_win(case):
    """Within ``margin`` of the engine's best value; where the exact search reaches (tic_tac_toe) only moves that
    keep the game's value, the engine's favourite of those when none within the margin does; a win on the board:
    the winning moves only, however wide the margin."""
    adapter = engine()
    for state in random_states(case, 25):
        serial = state.serialize()
        position = adapter._position(case, serial)
        values = adapter._analysis(case, serial, position)
        top = max(values.values())
        keeping = best_actions(case, state)
        assert (keeping is not None) == (case == "tic_tac_toe")
        tactics = one_ply(case, serial)
        wins = set(tactics.winning) if tactics is not None else set()
        for margin in (0.0, 0.1, 1.0):
            good = adapter.good_moves(case, serial, margin)
            actions = {position.moves[m] for m in good}
            assert good == sorted(good, key=position.moves.__getitem__)
            if wins:
                assert actions == wins
                continue
            within = {a for a, v in values.items() if v >= top - margin}
            if keeping is None:
                assert actions == within
            else:
                assert actions == (within & keeping or {max(keeping, key=lambda a: (values[a], -a))})


def test_the_empty_board_spreads_over_the_moves_valued_near_the_best_and_repeats_per_seed():
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    spread = engine(0.1)
    draws = Counter(spread.reference_move("tic_tac_toe", state, seed) for seed in range(400))
    good = spread.good_moves("tic_tac_toe", state.serialize(), 0.1)
    assert set(draws) == set(good) and len(good) >= 2
    assert min(draws.values()) > 400 / len(good) / 2  # uniform among them, roughly
    assert [spread.reference_move("tic_tac_toe", state, 7) for _ in range(3)] == [spread.reference_move(
        "tic_tac_toe", state, 7)] * 3
    # margin 0 (the default): the engine's best move whatever the seed
    assert {engine().reference_move("tic_tac_toe", state, seed) for seed in range(50)} == {
        engine().best_move("tic_tac_toe", state.serialize())}


def test_whole_game_demonstrations_of_one_position_differ_between_rows_and_repeat_for_a_row():
    """Each turn of a demonstration draws with the game's seed and move number: rows (seeds) that reach the same
    position are taught different good moves; the same row is the same game on every export."""
    settings = {"game": {"opponent": "random"}, "task_mode": "game"}
    spread = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe"], reward_mode="engine",
                                              reference_margin=0.1, **settings))
    fixed = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe"], reward_mode="engine", **settings))
    first = Counter()
    for seed in range(40):
        messages = demonstration_messages(spread, "tic_tac_toe", seed, 0, engine_move)
        assert messages == demonstration_messages(spread, "tic_tac_toe", seed, 0, engine_move)
        first[messages[1]["content"]] += 1
    assert len(first) >= 2
    assert len({demonstration_messages(fixed, "tic_tac_toe", seed, 0, engine_move)[1]["content"]
                for seed in range(40)}) == 1


def test_export_with_a_margin_pays_every_answer_within_it_and_the_recipe_passes_it(tmp_path):
    from verl_ext.reward import compute_score

    args = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "openspiel.num_tasks_per_case=60",
            "--set", "openspiel.reward_mode=engine", "--set", "openspiel.reference_margin=0.1", "--format", "sft",
            "--no-progress"]
    serial, parallel = tmp_path / "serial.parquet", tmp_path / "parallel.parquet"
    assert export_main([*args, "--out", str(serial)]) == 0
    assert export_main([*args, "--jobs", "2", "--out", str(parallel)]) == 0
    assert serial.read_bytes() == parallel.read_bytes()
    rows = pq.read_table(serial).to_pylist()
    scores = [compute_score(r["data_source"], r["response"], "", r["extra_info"]) for r in rows]
    format_share = 0.1
    connect_four = [s for s, r in zip(scores, rows, strict=True) if r["extra_info"]["case"] == "connect_four"]
    assert all(s["score"] >= format_share + (1 - format_share) * 0.9 - 1e-9 for s in connect_four)
    assert sum(s["score"] < 1.0 for s in scores) > 0  # not the engine's best move everywhere
    adapter = engine()
    for row in rows:
        if row["extra_info"]["case"] == "tic_tac_toe":  # every answer keeps the exact value
            state = pyspiel.load_game("tic_tac_toe").deserialize_state(row["extra_info"]["state"])
            move = row["response"].removeprefix("<answer>").removesuffix("</answer>")
            assert adapter._position("tic_tac_toe", state.serialize()).moves[move] in best_actions("tic_tac_toe", state)

    recipe = ["bash", "train/recipes/recipe.sh", "--dry-run", "export"]
    env = {**recipe_environ("blank"), "RUN_DIR": str(tmp_path / "run"), "GAME_TYPES": "tic_tac_toe",
           "LOGIC_CASES": "", "COLD_START": "reference"}
    done = subprocess.run(recipe, cwd=REPO, env={**env, "SFT_REFERENCE_MARGIN": "0.1"}, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "openspiel.reference_margin=0.1" in done.stdout
    done = subprocess.run(recipe, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "reference_margin" not in done.stdout
    for value, message in (("-1", "must be a number in [0, 1]"), ("0.1x", "must be a number in [0, 1]")):
        done = subprocess.run(recipe, cwd=REPO, env={**env, "SFT_REFERENCE_MARGIN": value}, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 2 and message in done.stderr and value in done.stderr
    per_game = "{tic_tac_toe: 0.1, connect_four: 0.05}"
    done = subprocess.run(recipe, cwd=REPO, env={**env, "SFT_REFERENCE_MARGIN": per_game}, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    exports = [shlex.split(line) for line in done.stdout.splitlines() if " export " in line]
    assert len(exports) == 2 and all(f"openspiel.reference_margin={per_game}" in argv for argv in exports)
    done = subprocess.run(recipe, cwd=REPO, env={**env, "SFT_REFERENCE_MARGIN": "0.1", "COLD_START": "rules"},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "needs COLD_START=reference" in done.stderr


def test_the_export_takes_a_margin_per_game_from_the_command_line(tmp_path):
    """``--set 'openspiel.reference_margin={tic_tac_toe: 0.2}'``: tic_tac_toe's answers spread, connect_four's stay
    the engine's best move (every one paid in full by the engine reward)."""
    from verl_ext.reward import compute_score

    out = tmp_path / "sft.parquet"
    assert export_main(["--set", "openspiel.game_types=[tic_tac_toe,connect_four]",
                        "--set", "openspiel.num_tasks_per_case=40", "--set", "openspiel.reward_mode=engine",
                        "--set", "openspiel.reference_margin={tic_tac_toe: 0.2}", "--format", "sft", "--no-progress",
                        "--out", str(out)]) == 0
    scores: dict[str, list[float]] = {"tic_tac_toe": [], "connect_four": []}
    for row in pq.read_table(out).to_pylist():
        scores[row["extra_info"]["case"]].append(
            compute_score(row["data_source"], row["response"], "", row["extra_info"])["score"])
    assert all(score == 1.0 for score in scores["connect_four"]) and len(scores["connect_four"]) == 40
    assert min(scores["tic_tac_toe"]) < 1.0
