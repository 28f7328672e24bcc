"""bench/learning/val_passes.py: verl's validation passes per case, read from a run's sample log."""

from __future__ import annotations

import gzip
import json

import pytest

from bench_scripts import load_bench_script
from verl_ext.envs.answer import action_key, action_named_by, answer_id

val_passes = load_bench_script("val_passes")
CORNER = answer_id(action_key(0))  # the reward's id for OpenSpiel action 0, as a legal move's answer_key gives it


def _val(block: int, case: str, task_score: float, answer: float, **extra: float) -> dict:
    return {"split": "val", "env": "openspiel", "case": case, "block": block, "score": 0.1 + 0.9 * task_score,
            "task_score": task_score, "valid": 1.0 if answer else 0.0, "answer_id": answer, **extra}


def _write(path, rows, broken_line: bool = False) -> None:
    with gzip.open(path, "wt") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
        if broken_line:
            out.write('{"split": "val", "case": "tic_tac_toe", "blo')  # a run killed mid-write


def test_passes_give_engine_score_favourite_and_tactics_per_case(tmp_path, capsys):
    rows = [
        # pass 1 (step 0): the favourite (id 7) shows its text only in a training reply further down
        _val(1, "tic_tac_toe", 1.0, 7.0, win_chance=1.0, win_taken=1.0),
        _val(1, "tic_tac_toe", 0.5, 7.0, win_chance=1.0, win_taken=0.0),
        _val(1, "tic_tac_toe", 0.0, 0.0, block_chance=1.0, blocked=0.0),  # malformed: illegal, no answer
        _val(1, "connect_four", 0.8, 3.0),
        _val(2, "connect_four", 0.9, CORNER),  # a move whose reply text no kept row shows
        # pass 2 (step 20)
        _val(2, "tic_tac_toe", 1.0, 9.0, win_chance=1.0, win_taken=1.0),
        _val(2, "tic_tac_toe", 1.0, 9.0, block_chance=1.0, blocked=1.0),
        {"split": "train", "step": 3, "case": "tic_tac_toe", "answer_id": 7.0, "reply": "<answer>x(1,1)</answer>"},
        {"split": "train", "step": 3, "case": "connect_four", "answer_id": 7.0, "reply": "<answer>x6</answer>"},
    ]
    log = tmp_path / "run.samples.jsonl.gz"
    _write(log, rows, broken_line=True)
    out = tmp_path / "passes"
    assert val_passes.main([str(log), "--test-freq", "20", "--out", str(out)]) == 0

    result = json.loads(out.with_suffix(".json").read_text())
    assert result["paired_changes"] == []  # no seeds in these rows: nothing to pair
    records = result["passes"]
    by_key = {(r["step"], r["case"]): r for r in records}
    assert sorted(by_key) == [(0, "connect_four"), (0, "tic_tac_toe"), (20, "connect_four"), (20, "tic_tac_toe")]
    first = by_key[(0, "tic_tac_toe")]
    assert first["n"] == 3 and first["engine"]["mean"] == pytest.approx(0.5)
    assert first["legal"]["k"] == 2
    # the id names the answer per case: connect_four's id 7 is another move
    assert first["favourite"] == "<answer>x(1,1)</answer>" and first["favourite_share"] == pytest.approx(1.0)
    assert (first["took_win"]["k"], first["took_win"]["n"]) == (1, 2)
    assert (first["blocked"]["k"], first["blocked"]["n"]) == (0, 1)
    # the missed win (0.5) and the missed block (0.0) cost 0.5 and 1.0 of the pass's 3 positions
    assert first["lost_to_missed_wins"] == pytest.approx(0.5 / 3) and first["lost_to_missed_blocks"] == pytest.approx(1 / 3)
    second = by_key[(20, "tic_tac_toe")]
    assert second["favourite"] == "answer id 9.0"  # no kept reply shows its text, and no action hashes to 9
    assert by_key[(20, "connect_four")]["favourite"] == "action 0 (no reply kept)"
    assert second["took_win"]["rate"] == 1.0 and second["blocked"]["rate"] == 1.0
    assert by_key[(0, "connect_four")]["took_win"]["rate"] is None  # no chance to win: no rate
    # the engine score where a win or a block is on the board (0.5 over 3 rows here) and elsewhere (none)
    assert first["engine_tactical"]["mean"] == pytest.approx(0.5) and first["engine_quiet"]["mean"] is None
    quiet = by_key[(0, "connect_four")]
    assert quiet["engine_quiet"]["mean"] == pytest.approx(0.8) and quiet["engine_tactical"]["n"] == 0
    table = capsys.readouterr().out
    assert table == out.with_suffix(".md").read_text()
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the curves with their intervals
    assert "| 20 | tic_tac_toe | 2 | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] | - |" in table


def test_a_log_without_validation_rows_is_refused(tmp_path, capsys):
    log = tmp_path / "train_only.samples.jsonl.gz"
    _write(log, [{"split": "train", "step": 1, "case": "tic_tac_toe", "answer_id": 1.0, "reply": "x"}])
    with pytest.raises(SystemExit):
        val_passes.main([str(log), "--test-freq", "10"])
    assert "no validation rows" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        val_passes.main([str(log), "--test-freq", "0"])


def test_later_passes_are_paired_with_the_first_on_the_same_positions(tmp_path, capsys):
    # three positions (seeds 11, 12, 13) in each pass, logged in a different order each time
    first = [_val(1, "connect_four", score, 3.0, seed=seed) for seed, score in ((11, 0.5), (12, 1.0), (13, 0.2))]
    later = [_val(2, "connect_four", score, 3.0, seed=seed) for seed, score in ((13, 0.6), (11, 0.5), (12, 0.9))]
    log = tmp_path / "run.samples.jsonl.gz"
    _write(log, first + later)
    out = tmp_path / "passes"
    assert val_passes.main([str(log), "--test-freq", "10", "--out", str(out)]) == 0
    (change,) = json.loads(out.with_suffix(".json").read_text())["paired_changes"]
    assert (change["case"], change["from_step"], change["step"], change["positions"]) == ("connect_four", 0, 10, 3)
    assert change["change"]["mean"] == pytest.approx((0.4 + 0.0 - 0.1) / 3)
    assert (change["better"], change["worse"]) == (1, 1)
    assert "paired by task seed" in capsys.readouterr().out


def test_whole_game_passes_show_outcomes_and_the_opening_reply(tmp_path, capsys):
    """Whole-game validation rows (issue 45's runs): the score is the game's (win 1, draw 1/2, loss 0), the favourite
    is the opening reply rather than the whole conversation, the games' W/D/L close the row, and a later pass pairs
    with the one at --from-step by game seed."""
    game = "<answer>x(1,1)</answer>\nuser\nYou are playing Tic Tac Toe ...\nassistant\n<answer>x(0,0)</answer>"
    outcomes = {1.0: {"win": 1.0}, 0.5: {"draw": 1.0}, 0.0: {"loss": 1.0}}
    rows = [_val(block, "tic_tac_toe", score, 5.0, seed=seed, game=1.0, **outcomes[score])
            for block, scores in ((1, (0.0, 0.5, 1.0)), (2, (0.0, 0.0, 1.0)), (3, (1.0, 0.5, 1.0)))
            for seed, score in zip((7, 8, 9), scores)]
    rows[0]["reply"] = game
    log = tmp_path / "run.samples.jsonl.gz"
    _write(log, rows)
    out = tmp_path / "passes"
    assert val_passes.main([str(log), "--test-freq", "20", "--from-step", "20", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    first = result["passes"][0]
    assert first["favourite"] == "<answer>x(1,1)</answer>" and first["games"] == {"win": 1, "draw": 1, "loss": 1}
    (change,) = result["paired_changes"]
    assert (change["from_step"], change["step"], change["positions"]) == (20, 40, 3)
    assert change["change"]["mean"] == pytest.approx((1.0 + 0.5 + 0.0) / 3) and change["worse"] == 0
    table = capsys.readouterr().out
    assert "| 0 | tic_tac_toe games | 3 | 0.500" in table and "| 1/1/1 |" in table and "| 2/1/0 |" in table


def test_a_mixed_runs_games_and_single_moves_are_kept_apart(tmp_path):
    """TASK_MODE=mixed validates whole games and single moves of one game in one pass: each gets its own row."""
    rows = [_val(1, "tic_tac_toe", 1.0, 5.0, seed=1, game=1.0, win=1.0),
            _val(1, "tic_tac_toe", 0.0, 5.0, seed=2, game=1.0, loss=1.0),
            _val(1, "tic_tac_toe", 0.8, 5.0, seed=3), _val(1, "tic_tac_toe", 0.6, 5.0, seed=4)]
    log = tmp_path / "run.samples.jsonl.gz"
    _write(log, rows)
    out = tmp_path / "passes"
    assert val_passes.main([str(log), "--test-freq", "20", "--out", str(out)]) == 0
    by_case = {r["case"]: r for r in json.loads(out.with_suffix(".json").read_text())["passes"]}
    assert by_case["tic_tac_toe games"]["engine"]["mean"] == pytest.approx(0.5)
    assert by_case["tic_tac_toe games"]["games"] == {"win": 1, "draw": 0, "loss": 1}
    assert by_case["tic_tac_toe"]["engine"]["mean"] == pytest.approx(0.7) and by_case["tic_tac_toe"]["n"] == 2


def test_the_sample_log_records_which_task_each_reply_answered(tmp_path, monkeypatch):
    """The reward's sample log carries the row's seed and index (what pairing needs), from extra_info."""
    from verl_ext.mixture import EnvMixture
    from verl_ext.reward import compute_score

    log = tmp_path / "run.samples.jsonl"
    monkeypatch.setenv("VERL_EXT_SAMPLE_LOG", str(log))
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 2},
                          "val_tasks_per_case": 2})
    refs = mixture.plan("val")
    for i, ref in enumerate(refs):
        row = mixture.row(ref, "val", i)
        compute_score(row["data_source"], "<answer>x(1,1)</answer>", row["reward_model"]["ground_truth"],
                      row["extra_info"])
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["seed"], e["index"]) for e in logged] == [(ref.seed, i) for i, ref in enumerate(refs)]


def test_action_ids_name_their_action_and_nothing_else():
    assert [action_named_by(answer_id(action_key(a))) for a in (0, 3, 361)] == [0, 3, 361]
    assert action_named_by(answer_id("x3")) is None and action_named_by(0.0) is None
