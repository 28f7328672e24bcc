"""openspiel.board_text: a grid a tokenizer reads cell by cell, the same positions, moves, scores and held-out split."""

import pytest

from verl_ext.envs.board_text import grid_board, render_board
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


@pytest.mark.parametrize("text", ["one line", "ab\nabc", "a b\ncde", "x" * 11 + "\n" + "x" * 11,
                                  "\n".join(["ab"] * 11), ""])
def test_text_that_is_not_a_small_grid_is_shown_as_is(text):
    assert grid_board(text) is None
    assert render_board(text, "grid") == text
    assert render_board("o.o\nx.x\noxx", "raw") == "o.o\nx.x\noxx"


def _adapters(**extra):
    raw = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe", "connect_four"], **extra))
    grid = OpenSpielAdapter(OpenSpielConfig(game_types=["tic_tac_toe", "connect_four"], board_text="grid", **extra))
    return raw, grid


def test_grid_changes_only_the_board_text():
    raw, grid = _adapters()
    for case in raw.cases():
        for seed in range(6):
            a, b = raw.make_task(case, seed, seed), grid.make_task(case, seed, seed)
            assert (a.state, a.legal_moves, a.ground_truth) == (b.state, b.legal_moves, b.ground_truth)
            assert a.messages != b.messages
            assert " . " in b.messages[0]["content"] or " x " in b.messages[0]["content"]
            reply = f"<answer>{a.legal_moves[0]}</answer>"
            assert raw.score(case, a.state, reply) == grid.score(case, b.state, reply)


def test_a_position_is_held_out_whatever_its_board_text():
    raw, grid = _adapters()
    for case in raw.cases():
        for seed in range(6):
            assert content_key(raw.make_task(case, seed, seed)) == content_key(grid.make_task(case, seed, seed))
    section = {"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 40}, "val_tasks_per_case": 10}
    grid_section = {**section, "openspiel": {**section["openspiel"], "board_text": "grid"}}
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


def test_grid_boards_pass_the_conformance_suite():
    _, grid = _adapters()
    check_adapter(grid, tasks_per_case=3)
    for case in grid.cases():
        check_episodes(grid, case)
