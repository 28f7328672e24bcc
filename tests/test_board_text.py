"""openspiel.board_text: a grid a tokenizer reads cell by cell, the same positions, moves, scores and held-out split."""

import pytest

from verl_ext.envs.board_text import board_lines, grid_board, render_board
from verl_ext.envs.conformance import check_adapter, check_episodes
from verl_ext.envs import ConfigError, make_env
from verl_ext.envs.openspiel_env import OpenSpielAdapter, OpenSpielConfig
from verl_ext.held_out import content_key
from verl_ext.mixture import EnvMixture


def test_grid_spaces_cells_and_numbers_rows_and_columns():
    assert grid_board("o.o\nx.x\noxx") == "  0 1 2\n0 o . o\n1 x . x\n2 o x x"
    connect_four = ".......\n.......\n.......\n....x..\n....o..\n.xooxx.\n"
    assert grid_board(connect_four).split("\n")[0] == "  0 1 2 3 4 5 6"
    assert grid_board(connect_four).split("\n")[-1] == "5 . x o o x x ."


def test_lines_spell_out_every_column_and_every_diagonal_long_enough_to_win():
    text = "x.o\n.x.\no.."
    assert render_board(text, "lines", "tic_tac_toe") == "\n".join([
        grid_board(text), "Columns, top to bottom:", "column 0: x . o", "column 1: . x .", "column 2: o . .",
        "Diagonals of 3 or more cells, from their top end:", "(0,0)-(2,2): x x .", "(0,2)-(2,0): o x o"])
    connect_four = ".......\n.......\n.......\no...x..\no...o..\noxooxx.\n"
    lines = render_board(connect_four, "lines", "connect_four").split("\n")
    assert "column 0: . . . o o o" in lines  # three stacked: a vertical threat on one line
    diagonals = lines[lines.index("Diagonals of 4 or more cells, from their top end:") + 1:]
    assert len(diagonals) == 12 and "(0,0)-(5,5): . . . . o x" in diagonals and "(2,6)-(5,3): . . o o" in diagonals
    # a game without a known line length shows the diagonals of its shorter side's length
    assert board_lines("ab.\n.ba", None).split("\n")[-5:] == [
        "Diagonals of 2 or more cells, from their top end:", "(0,0)-(1,1): a b", "(0,1)-(1,2): b a",
        "(0,1)-(1,0): b .", "(0,2)-(1,1): . b"]
    assert render_board("one line", "lines") == "one line"
    # columns: the same without the diagonals
    assert render_board(connect_four, "columns", "connect_four").split("\n") == lines[:lines.index(
        "Diagonals of 4 or more cells, from their top end:")]


@pytest.mark.parametrize("text", ["one line", "ab\nabc", "a b\ncde", "x" * 11 + "\n" + "x" * 11,
                                  "\n".join(["ab"] * 11), ""])
def test_text_that_is_not_a_small_grid_is_shown_as_is(text):
    assert grid_board(text) is None
    assert render_board(text, "grid") == text
    assert render_board("o.o\nx.x\noxx", "raw") == "o.o\nx.x\noxx"


def _adapters(style: str = "grid", **extra):
    raw = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe", "connect_four"], **extra))
    drawn = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe", "connect_four"], board_text=style, **extra))
    return raw, drawn


@pytest.mark.parametrize("style", ["grid", "columns", "lines"])
def test_grid_and_lines_change_only_the_board_text(style):
    raw, grid = _adapters(style)
    for case in raw.cases():
        for seed in range(6):
            a, b = raw.make_task(case, seed, seed), grid.make_task(case, seed, seed)
            assert (a.state, a.legal_moves, a.ground_truth) == (b.state, b.legal_moves, b.ground_truth)
            assert a.messages != b.messages
            assert " . " in b.messages[0]["content"] or " x " in b.messages[0]["content"]
            reply = f"<answer>{a.legal_moves[0]}</answer>"
            assert raw.score(case, a.state, reply) == grid.score(case, b.state, reply)


@pytest.mark.parametrize("style", ["grid", "columns", "lines"])
def test_a_position_is_held_out_whatever_its_board_text(style):
    raw, grid = _adapters(style)
    for case in raw.cases():
        for seed in range(6):
            assert content_key(raw.make_task(case, seed, seed)) == content_key(grid.make_task(case, seed, seed))
    section = {"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 40}, "val_tasks_per_case": 10}
    grid_section = {**section, "openspiel": {**section["openspiel"], "board_text": style}}
    for split in ("train", "val"):
        assert [r.seed for r in EnvMixture(section).plan(split)] == \
            [r.seed for r in EnvMixture(grid_section).plan(split)]


def test_whole_games_show_the_grid_every_turn():
    _, grid = _adapters()
    episode = grid.start_episode("tic_tac_toe", seed=3, seat=0)
    first = episode.prompt()
    episode.play_random()
    episode.play_random()
    assert "  0 1 2\n0 " in first and "  0 1 2\n0 " in episode.prompt()


def test_unknown_board_text_names_the_key():
    with pytest.raises(ConfigError, match=r"data\.env\.openspiel\.board_text: unknown value 'ascii'"):
        make_env("openspiel", {"game_types": ["tic_tac_toe"], "board_text": "ascii"})


@pytest.mark.parametrize("style", ["grid", "columns", "lines"])
def test_drawn_boards_pass_the_conformance_suite(style):
    _, grid = _adapters(style)
    check_adapter(grid, tasks_per_case=3)
    for case in grid.cases():
        check_episodes(grid, case)
