"""verl_ext/cold_start_overlap.py: how many of a GRPO run's training prompts are positions its cold start was trained
on, from a real SFT export, with and without data.env.train_part keeping them apart."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ext.cold_start_overlap import NOTE_SHARE, cold_start_contents, overlap_note, training_overlap
from verl_ext.envs.config import ConfigError
from verl_ext.export import build_rows, write_parquet
from verl_ext.mixture import EnvMixture


def _section(**extra) -> dict:
    return {"openspiel": {"game_types": ["tic_tac_toe", "connect_four"], "num_tasks_per_case": 120},
            "held_out_share": 0.2, **extra}


def _export(tmp_path: Path, **extra) -> Path:
    rows, _ = build_rows(EnvMixture(_section(**extra)), "train", "sft", answers="rules")
    out = tmp_path / "sft_train.parquet"
    write_parquet(rows, out)
    return out


def test_a_shared_plan_trains_grpo_only_on_cold_start_positions(tmp_path):
    contents, rows = cold_start_contents(_export(tmp_path))
    assert rows == 240 and set(contents) == {"tic_tac_toe", "connect_four"}
    overlap = training_overlap(EnvMixture(_section()), contents)
    assert overlap["overall"] == {"tasks": 240, "tasks_on_cold_start_positions": 240, "share": 1.0}
    for case in overlap["cases"].values():
        assert case["positions"] == case["cold_start_positions"] <= case["tasks"] == 120
    note = overlap_note(overlap)
    assert note is not None and "100 % of GRPO's training prompts" in note and "COLD_START_CONTENTS=split" in note


def test_split_parts_share_no_position(tmp_path):
    contents, _ = cold_start_contents(_export(tmp_path, train_part="cold_start"))
    rl = training_overlap(EnvMixture(_section(train_part="rl")), contents)
    assert rl["overall"]["share"] == 0.0 and overlap_note(rl) is None
    own = training_overlap(EnvMixture(_section(train_part="cold_start")), contents)
    assert own["overall"]["share"] == 1.0 and overlap_note(own) is not None
    everything = training_overlap(EnvMixture(_section()), contents)  # all: both parts, some on the cold start's
    assert 0.0 < everything["overall"]["share"] < 1.0
    assert (overlap_note(everything) is None) == (everything["overall"]["share"] < NOTE_SHARE)


def test_whole_game_rows_have_no_position_and_are_left_out(tmp_path):
    contents, rows = cold_start_contents(_export(tmp_path, openspiel={
        "game_types": ["tic_tac_toe"], "num_tasks_per_case": 40, "task_mode": "mixed", "game_share": 0.5}))
    assert rows == 40 and 0 < len(contents["tic_tac_toe"]) < 40


def test_a_file_that_is_not_an_export_is_named(tmp_path):
    with pytest.raises(ConfigError, match="--cold-start-data: no such file"):
        cold_start_contents(tmp_path / "missing.parquet")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"extra_info": [{"case": "tic_tac_toe"}]}), other)
    with pytest.raises(ConfigError, match="row 0 .* has no env, env_config, case, index and seed"):
        cold_start_contents(other)
    broken = tmp_path / "broken.parquet"
    broken.write_text("not parquet")
    with pytest.raises(ConfigError, match="cannot read the extra_info column"):
        cold_start_contents(broken)
