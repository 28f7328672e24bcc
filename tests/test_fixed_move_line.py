"""The fixed-move line of `verl-ext eval`'s single-move suite: what always playing one move scores on the held-out
positions, and each model's favourite move (a collapsed policy's signature)."""

from __future__ import annotations

import json

import pytest

from verl_ext.envs import make_env
from verl_ext.evaluation.cli import main as eval_main

ENV_ARGS = ["--set", "openspiel.game_types=[tic_tac_toe,connect_four]", "--set", "val_tasks_per_case=8",
            "--set", "openspiel.mcts_simulations=20"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("fixed_move")
    argv = [*ENV_ARGS, "--suites", "single", "--models", "first=scripted:first", "random=scripted:random",
            "--no-progress", "--out", str(out)]
    assert eval_main(argv) == 0
    data = json.loads((out / "results.json").read_text())
    data["markdown"] = (out / "results.md").read_text()
    return data


def test_task_scores_are_what_score_pays() -> None:
    adapter = make_env("openspiel", {"game_types": ["connect_four"], "reward_mode": "engine",
                                     "mcts_simulations": 20})
    task = adapter.make_task("connect_four", 0, 11)
    scores = adapter.task_scores("connect_four", task.state)
    for move, action in adapter.move_actions("connect_four", task.state).items():
        paid = adapter.score("connect_four", task.state, f"<answer>{move}</answer>").task_score
        assert scores[action] == pytest.approx(paid)
    assert max(scores.values()) == pytest.approx(1.0)  # the engine's own move


def test_fixed_moves_average_to_the_random_mover(results) -> None:
    baselines = results["single_move_baseline"]
    assert set(baselines) == {"tic_tac_toe", "connect_four"}
    for case, line in baselines.items():
        assert line["positions"] == 8
        scores = [entry["score"] for entry in line["fixed_moves"].values()]
        # where a move is illegal it counts the random mover's score there, so the fixed moves average out to it
        assert sum(scores) / len(scores) == pytest.approx(line["random_mover"])
        assert line["best_fixed_score"] == max(scores) <= 1.0
        assert all(0.0 < entry["legal_share"] <= 1.0 for entry in line["fixed_moves"].values())
    # one action is one entry whoever moves: the same column for x and o
    assert len(baselines["connect_four"]["fixed_moves"]) == 7
    assert all(label.count("/") == 1 and "x" in label for label in baselines["connect_four"]["fixed_moves"])


def test_models_report_their_favourite_move(results) -> None:
    random_case = results["models"]["random"]["single_move"]["cases"]["connect_four"]
    assert 0.0 < random_case["favourite"]["share"] < 1.0
    first = results["models"]["first"]["single_move"]["cases"]["connect_four"]
    assert first["favourite"]["move"] in results["single_move_baseline"]["connect_four"]["fixed_moves"]
    assert "favourite" not in results["models"]["first"]["single_move"]["overall"]
    md = results["markdown"]
    assert "first: favourite" in md and "Fixed-move line" in md and "random mover" in md


def test_engine_scores_come_with_their_interval(results) -> None:
    """The engine score is a mean of per-position values in [0, 1]: its normal interval goes into the JSON and
    the table, so that two models are compared beyond noise (a scripted player that always plays the same legal
    move scores differently per position: a real spread)."""
    for name in ("first", "random"):
        case = results["models"][name]["single_move"]["cases"]["connect_four"]
        ci = case["engine_score_ci"]
        assert ci["n"] == 8 and ci["mean"] == pytest.approx(case["engine_score"])
        assert ci["ci_low"] < case["engine_score"] < ci["ci_high"]
        cell = f"{case['engine_score']:.3f} [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]"
        assert cell in results["markdown"]
    assert "[its normal interval]" in results["markdown"]


def test_training_positions_are_the_exported_rows_in_sample(tmp_path) -> None:
    """--positions training: the first val_tasks_per_case distinct positions of the training plan, which are
    the positions an SFT export of the same settings holds (whatever its size), none of them held out; the
    fixed-move line is taken on those positions and the report says they are in sample."""
    from verl_ext.evaluation.single_move import heldout_tasks, training_tasks
    from verl_ext.held_out import content_key
    from verl_ext.mixture import EnvMixture

    section = {"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 60},
               "val_tasks_per_case": 8}
    mixture = EnvMixture(section)
    tasks = training_tasks(mixture, "openspiel")
    per_case = {case: [t for t in tasks if t.case == case] for case in ("tic_tac_toe", "connect_four")}
    assert all(len(case_tasks) == 8 for case_tasks in per_case.values())
    keys = {(t.case, content_key(t)) for t in tasks}
    assert len(keys) == 16  # distinct positions
    assert not keys & {(t.case, content_key(t)) for t in heldout_tasks(mixture, "openspiel")}
    bigger = EnvMixture({**section, "openspiel": {**section["openspiel"], "num_tasks_per_case": 500}})
    rows = {(t.case, content_key(t)) for t in map(bigger.build, bigger.plan("train"))}
    assert keys <= rows  # an export of 500 rows per case trains on every one of them

    out = tmp_path / "train"
    argv = [*ENV_ARGS, "--set", "openspiel.num_tasks_per_case=60", "--suites", "single", "--positions", "training",
            "--models", "first=scripted:first", "--no-progress", "--out", str(out)]
    assert eval_main(argv) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["settings"]["positions"] == "training"
    assert data["models"]["first"]["single_move"]["cases"]["tic_tac_toe"]["n"] == 8
    assert data["single_move_baseline"]["tic_tac_toe"]["positions"] == 8
    markdown = (out / "results.md").read_text()
    assert "## Single-move tasks on training positions (in sample, not held out)" in markdown
    held = tmp_path / "held"
    assert eval_main([*ENV_ARGS, "--suites", "single", "--models", "first=scripted:first", "--no-progress",
                      "--out", str(held)]) == 0
    assert json.loads((held / "results.json").read_text())["settings"]["positions"] == "held-out"
    assert "## Held-out single-move tasks" in (held / "results.md").read_text()
