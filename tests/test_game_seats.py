"""``game.seat_weights``: which seat the trained policy plays in whole-game rows. Default: the seat alternates with the
task index; with weights it is drawn from the row's seed (so a GRPO group shares it), in the asked proportions, and
the preview prompt, the demonstration and the game all follow it; bad weights name the key and the value."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs.game_settings import GameSettings
from verl_ext.games import RECORD_FIELD
from verl_ext.games.match import Match, MatchRules
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

KEY = "data.env.openspiel.game.seat_weights"


def _rows(game: dict, tasks: int = 400, cases: tuple[str, ...] = ("tic_tac_toe",)) -> list[dict]:
    mixture = EnvMixture({"openspiel": {"game_types": list(cases), "task_mode": "game", "num_tasks_per_case": tasks,
                                        "game": game}})
    return [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]


def test_without_weights_the_seat_alternates_with_the_task_index():
    rows = _rows({}, tasks=40)
    assert [row["extra_info"]["seat"] for row in rows] == [row["extra_info"]["task_id"] % 2 for row in rows]


def test_weights_draw_the_seat_from_the_seed_in_the_asked_proportions():
    rows = _rows({"seat_weights": [1, 3]})
    seats = Counter(row["extra_info"]["seat"] for row in rows)
    assert 0.69 < seats[1] / len(rows) < 0.81  # 3 of 4 expected; 400 rows
    again = _rows({"seat_weights": "1,3"})  # the string form of a shell variable
    assert [row["extra_info"]["seat"] for row in rows] == [row["extra_info"]["seat"] for row in again]
    settings = GameSettings(seat_weights=[1.0, 3.0])
    assert all(settings.seat_for(row["extra_info"]["seed"], 0, 2) == row["extra_info"]["seat"] for row in rows)
    assert {_rows({"seat_weights": [0, 1]}, tasks=40)[i]["extra_info"]["seat"] for i in range(40)} == {1}


def test_the_preview_prompt_names_the_drawn_seat():
    for row in _rows({"seat_weights": [1, 1]}, tasks=20):
        assert f"as player {row['extra_info']['seat']} of 2" in row["prompt"][0]["content"]


def test_the_game_and_the_sample_log_follow_the_drawn_seat(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(tmp_path / "run.samples.jsonl"))
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "task_mode": "game", "num_tasks_per_case": 8,
                                        "game": {"seat_weights": [1, 3]}}})
    adapter, seats = mixture.adapters["openspiel"], []
    for i, ref in enumerate(mixture.plan("train")):
        row = mixture.row(ref, "train", i)
        info = row["extra_info"]
        match = Match(adapter.start_episode(info["case"], info["seed"], info["seat"]), adapter.game_settings
                      .opponent_for(info["seed"]), MatchRules())
        while (turn := match.next_request()) is not None:
            match.submit(f"<answer>{turn.legal_moves[0]}</answer>")
        assert match.record.seat == info["seat"]
        assert compute_score(row["data_source"], "", "", {**info, RECORD_FIELD: match.record.to_dict()})["failed"] == 0
        seats.append(info["seat"])
    logged = [json.loads(line) for line in (tmp_path / "run.samples.jsonl").read_text().splitlines()]
    assert [line["seat"] for line in logged] == seats and set(seats) == {0, 1}


@pytest.mark.parametrize("weights, message", [
    ([1, -1], "finite weights >= 0"),
    ([0, 0], "positive sum"),
    (["one", 3], "numbers, one per seat"),
    ([1, float("nan")], "finite weights"),
    ([1, 2, 3], "case 'tic_tac_toe' has 2 players and the list has 3"),
])
def test_bad_weights_name_the_key_and_the_value(weights, message):
    with pytest.raises(ConfigError, match="seat_weights") as error:
        make_env("openspiel", {"game_types": ["tic_tac_toe"], "task_mode": "game", "game": {"seat_weights": weights}},
                 where="data.env.openspiel")
    assert message in str(error.value) and KEY in str(error.value)
