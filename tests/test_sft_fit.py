"""bench/learning/sft_fit.py: it collects the tic_tac_toe positions an SFT export shows (single-move rows, the turns of
whole-game rows) with the teacher's move, asks a model for a move in each group and in the held-out positions, and
rates the answers against the teacher and against the exact value and one-ply tactics."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pyspiel
import pytest
from bench_scripts import load_bench_script

from verl_ext.mixture import EnvMixture

sft_fit = load_bench_script("sft_fit")
TTT = pyspiel.load_game("tic_tac_toe")
ADAPTER = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"]}}, where="env").adapters["openspiel"]


def play(moves: list[int]) -> pyspiel.State:
    state = TTT.new_initial_state()
    for action in moves:
        state.apply_action(action)
    return state


def turn(state: pyspiel.State, action: int) -> list[dict[str, str]]:
    player = state.current_player()
    return [{"role": "user", "content": ADAPTER.position_prompt("tic_tac_toe", state)},
            {"role": "assistant", "content": f"<answer>{state.action_to_string(player, action)}</answer>"}]


def write_rows(path, rows: list[list[dict[str, str]]]):
    pq.write_table(pa.table({"messages": rows}), path)
    return path


WIN = play([7, 1, 8, 4])  # x to move: (2,0) wins at once, (0,2) wins by force
BLOCK = play([0, 4, 1])  # o to move: x threatens (0,2)


def test_positions_are_grouped_by_the_rows_that_show_them(tmp_path):
    single = turn(WIN, 6)
    game = turn(BLOCK, 2) + turn(play([0, 4, 1, 2, 6]), 3)  # the game's second turn: o must block (1,0)
    both = turn(BLOCK, 5)  # BLOCK also comes as a single row (with another answer): it counts as a single row
    groups = sft_fit.rows_positions(write_rows(tmp_path / "rows.parquet", [single, game, both]))
    assert {p.teacher for p in groups["single rows"].values()} == {6, 5}
    assert [p.teacher for p in groups["game turns only"].values()] == [3]
    assert set(groups["single rows"]) == {".o./.o./.xx|0", "xx./.o./...|1"}
    # the game turn asked alone, and in context: after its row's first turn and the teacher's reply, as trained
    (turn_of_game,) = groups["game turns in context"].values()
    assert groups["game turns in context"] == groups["game turns only"]
    assert turn_of_game.chat() == [game[2]] and turn_of_game.chat(in_context=True) == game[:3]
    assert all(p.chat(in_context=True) == p.chat() for p in groups["single rows"].values())


def test_the_rates_compare_the_answers_with_the_teacher_the_value_and_the_tactics():
    positions = [sft_fit.Position(WIN.serialize(), 6, "win"), sft_fit.Position(BLOCK.serialize(), 2, "block")]
    rates = sft_fit.tally(positions, [2, 5])  # a forced win instead of the win at once; a move that misses the block
    assert rates["same as teacher"]["n"] == 0 and rates["kept the value"]["n"] == 1  # the forced win keeps it
    assert rates["teacher kept the value"]["rate"] == 1.0
    assert (rates["took the win"]["n"], rates["took the win"]["of"], rates["teacher took the win"]["n"]) == (0, 1, 1)
    assert (rates["blocked"]["n"], rates["blocked"]["of"], rates["teacher blocked"]["n"]) == (0, 1, 1)
    illegal = sft_fit.tally(positions[:1], [None])
    assert illegal["legal"]["n"] == 0 and illegal["kept the value"]["n"] == 0


class TeacherBackend:
    """Answers every prompt with the teacher's move of the rows (a model that fitted them), else the first legal
    move listed."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, chats, seeds):
        out = []
        for chat in chats:
            prompt = chat[-1]["content"]
            first = re.search(r"listed\): ([xo]\(\d,\d\))", prompt).group(1)
            out.append(f"<answer>{self.answers.get(prompt, first)}</answer>")
        return out


def test_a_model_that_fitted_its_rows_agrees_with_the_teacher_in_sample(tmp_path, monkeypatch):
    rows = [turn(WIN, 6), turn(BLOCK, 2) + turn(play([0, 4, 1, 2, 6]), 3)]
    answers = {row[i]["content"]: re.search(r"<answer>(.*)</answer>", row[i + 1]["content"]).group(1)
               for row in rows for i in range(0, len(row), 2)}
    monkeypatch.setattr(sft_fit, "TransformersBackend", lambda *args, **kwargs: TeacherBackend(answers))
    out = tmp_path / "fit"
    assert sft_fit.main(["--model", "unused", "--rows", str(write_rows(tmp_path / "rows.parquet", rows)),
                         "--per-group", "8", "--val-tasks", "16", "--tasks", "100", "--out", str(out)]) == 0
    results = json.loads(out.with_suffix(".json").read_text())
    assert list(results) == list(sft_fit.GROUPS)
    for group in ("single rows", "game turns only", "game turns in context"):
        assert results[group]["same as teacher"]["rate"] == 1.0, group
    assert results["game turns in context"]["positions"] == results["game turns only"]["positions"] == 2
    assert results["single rows"]["took the win"]["rate"] == 1.0
    assert results["held-out"]["positions"] == 8 and results["held-out"]["available"] == 16
    assert "| single rows | 1 | 100.0 [" in out.with_suffix(".md").read_text()


C4 = pyspiel.load_game("connect_four")
C4_ADAPTER = EnvMixture({"openspiel": {"game_types": ["connect_four"]}}, where="env").adapters["openspiel"]


def test_connect_four_positions_are_rebuilt_and_rated_without_an_exact_value(tmp_path):
    """x has three in column 0 and moves: column 0 wins at once. The board comes back from the prompt (any move
    order reaching it), the teacher's column is read through the env's move matching, and no exact value is rated
    (a connect_four tree cannot be searched to its end)."""
    state = C4.new_initial_state()
    for column in (0, 1, 0, 1, 0, 2):
        state.apply_action(column)
    player = state.current_player()
    row = [{"role": "user", "content": C4_ADAPTER.position_prompt("connect_four", state)},
           {"role": "assistant", "content": f"<answer>{state.action_to_string(player, 0)}</answer>"}]
    groups = sft_fit.rows_positions(write_rows(tmp_path / "rows.parquet", [row]), "connect_four")
    (position,) = groups["single rows"].values()
    rebuilt = C4.deserialize_state(position.state)
    assert str(rebuilt) == str(state) and rebuilt.current_player() == player and position.teacher == 0
    rates = sft_fit.tally([position], [3], "connect_four")
    assert (rates["took the win"]["n"], rates["took the win"]["of"], rates["teacher took the win"]["n"]) == (0, 1, 1)
    assert rates["kept the value"]["of"] == 0 and rates["kept the value"]["rate"] is None
    assert "| - |" in sft_fit.markdown({"single rows": rates})


def test_rows_without_a_position_of_the_case_are_refused_by_name(tmp_path, capsys):
    rows = write_rows(tmp_path / "rows.parquet", [turn(WIN, 6)])
    with pytest.raises(SystemExit):
        sft_fit.main(["--model", "unused", "--rows", str(rows), "--case", "connect_four"])
    assert f"no connect_four position in {rows}" in capsys.readouterr().err


def test_each_position_is_asked_with_the_prompt_its_rows_or_the_held_out_set_show(tmp_path):
    """A run on boards drawn with every line written out (openspiel.board_text=lines): the rows' positions keep
    their own prompts, and --board-text draws the held-out ones the same way (the same positions as on raw boards:
    the held-out split goes by position)."""
    lines = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "board_text": "lines"}},
                       where="env").adapters["openspiel"]
    row = [{"role": "user", "content": lines.position_prompt("tic_tac_toe", WIN)},
           {"role": "assistant", "content": "<answer>x(2,0)</answer>"}]
    (position,) = sft_fit.rows_positions(write_rows(tmp_path / "rows.parquet", [row]))["single rows"].values()
    assert position.prompt == row[0]["content"] and "Diagonals" in position.prompt and position.teacher == 6
    drawn = sft_fit.held_out_positions("tic_tac_toe", 0.2, 16, 100, "lines")
    raw = sft_fit.held_out_positions("tic_tac_toe", 0.2, 16, 100)
    assert list(drawn) == list(raw)
    assert all("Diagonals" in p.prompt for p in drawn.values())
    assert all("Diagonals" not in p.prompt for p in raw.values())
