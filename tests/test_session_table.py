"""bench/speed/session_table.py: one table of a speed session's runs, each against the TRL run that ran closest before it."""

from __future__ import annotations

import json

import pytest

from bench_scripts import load_bench_script

session_table = load_bench_script("session_table")


def steps(*seconds: float, update: float = 0.5) -> dict:
    return {"steps": [{"timing_s/step": 9.0}, *[{"timing_s/step": s, "timing_s/update_actor": update}
                                                 for s in seconds]]}


def trl_steps(*seconds: float) -> dict:
    return {"steps": [{"timing_s/step": 5.0}, *[{"timing_s/step": s} for s in seconds]], "startup_s": 30.0}


def write(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_each_run_is_compared_with_the_closest_trl_run_before_it(tmp_path):
    (tmp_path / "session.txt").write_text(
        "settings under test: SPEED_ENV='' SPEED_ARGS=''\n"
        "2026-11-25 22:53:00 smoke ours 16 freeze: ok, 172 s\n"
        "2026-11-25 22:54:00 smoke trl 16: ok, 61 s\n"
        "2026-11-25 22:56:00 smoke ours 16 nofreeze GC_FREEZE=0: ok, 141 s\n"
        "2026-11-25 22:56:00 smoke ours 16 nofreeze GC_FREEZE=0: ok, 141 s\n"  # `wait` repeats a finished step
        "2026-11-25 22:57:00 smoke compare - freeze: ok, 0 s\n"
        "2026-11-25 22:58:00 smoke trl 16 --no-gradient-checkpointing: ok, 52 s\n"
        "2026-11-25 22:59:00 smoke ours 16 nockpt GRADIENT_CHECKPOINTING=0: exit 1, 30 s\n")
    write(tmp_path / "smoke/freeze/ours.json", steps(1.0, 1.0, 1.6))
    write(tmp_path / "smoke/freeze/startup.json", {"launch_to_step1_start_s": 90.0})
    write(tmp_path / "smoke/nofreeze/ours.json", steps(1.2, 1.2, 1.2))
    write(tmp_path / "smoke/trl.20261125T225400.json", trl_steps(0.8, 0.8))
    write(tmp_path / "smoke/trl.20261125T225800.json", trl_steps(0.6, 0.6))
    runs = session_table.runs_of(tmp_path)
    assert [(r.what, r.label, r.setting) for r in runs] == [
        ("ours", "freeze", ""), ("trl", "TRL 1", ""), ("ours", "nofreeze", "GC_FREEZE=0"),
        ("trl", "TRL 2", "--no-gradient-checkpointing"), ("ours", "nockpt", "GRADIENT_CHECKPOINTING=0")]
    rows = session_table.table(runs).splitlines()
    freeze = next(r for r in rows if r.startswith("| freeze |"))
    assert "| 1 | 1.2 | 1.6 |" in freeze and "| 90 | 1.25 (TRL 1) |" in freeze  # no TRL before it: the first after
    assert next(r for r in rows if r.startswith("| nofreeze |")).endswith("| 1.50 (TRL 1) |")
    assert next(r for r in rows if r.startswith("| nockpt (exit 1) |")).count("no result") == 6
    assert next(r for r in rows if r.startswith("| TRL 2 |")).startswith("| TRL 2 | --no-gradient-checkpointing | 0.6 |")


def test_a_session_from_before_trl_runs_were_kept_has_the_last_run_only(tmp_path):
    (tmp_path / "session.txt").write_text("2026-11-25 22:53:00 smoke trl 8: ok, 61 s\n"
                                          "2026-11-25 22:54:00 smoke ours 8 auto: ok, 100 s\n"
                                          "2026-11-25 22:55:00 smoke trl 8: ok, 52 s\n")
    write(tmp_path / "smoke/trl.json", trl_steps(0.5, 0.5))
    write(tmp_path / "smoke/auto/ours.json", steps(1.0, 1.0))
    text = session_table.table(session_table.runs_of(tmp_path))
    assert "| TRL 1 (ok; its file was overwritten) |" in text
    assert "| auto |  | 1 |" in text and text.count("2.00 (TRL 2)") == 1


def test_a_folder_without_a_session_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        session_table.main([str(tmp_path)])
