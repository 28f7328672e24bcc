"""The sample log keeps a few replies per step (bounded, cut, hostile bytes survive); `verl-ext samples` shows them."""

from __future__ import annotations

import gzip
import io
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from verl_ext import cli, sample_log, sample_steps, sample_view
from verl_ext.reward import compute_score
from verl_ext.sample_text import cut, printable

RESULT = {"score": 0.5, "format_ok": 1.0, "valid": 1.0}


@pytest.fixture
def log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "run.samples.jsonl"
    monkeypatch.setenv(sample_log.ENV_VAR, str(path))
    monkeypatch.setenv(sample_log.PER_STEP_VAR, "4")
    monkeypatch.setenv(sample_log.TEXTS_VAR, "2")
    for var in (sample_log.CHARS_VAR, sample_log.OFFSET_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sample_log, "_disabled", False)
    monkeypatch.setattr(sample_log, "_steps_disabled", False)
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_replies_per_step_are_kept_and_every_line_knows_its_step(log):
    for i in range(12):
        sample_log.record({"split": "train", "env": "logic", "case": "chain_sum"}, RESULT, f"reply {i}")
    entries = lines(log)
    assert [e["step"] for e in entries] == [1] * 4 + [2] * 4 + [3] * 4
    # two of a step's four, every second arrival, from an offset that turns with the step
    assert [e.get("reply") for e in entries] == [None, "reply 1", None, "reply 3", "reply 4", None, "reply 6", None,
                                                 None, "reply 9", None, "reply 11"]
    assert entries[1]["reply_chars"] == 7 and entries[1]["reply_cut"] == 0 and entries[1]["score"] == 0.5


def test_the_texts_of_a_step_are_shared_among_its_cases(log, monkeypatch):
    """The first 8 samples of a step used to keep their text: in a board-game run those were tic_tac_toe games,
    which end first, and connect_four showed 24 games in 93 steps
    (docs/runs/2026-11-29-h200-boardgames-tactics-fixed/)."""
    monkeypatch.setenv(sample_log.PER_STEP_VAR, "8")
    monkeypatch.setenv(sample_log.TEXTS_VAR, "4")
    order = ["tic_tac_toe"] * 6 + ["connect_four"] * 2 + ["tic_tac_toe"] * 5 + ["connect_four"] * 3
    for i, case in enumerate(order):
        sample_log.record({"split": "train", "case": case}, RESULT, f"{case} {i}")
    kept = [(e["step"], e["case"]) for e in lines(log) if "reply" in e]
    # step 1: tic_tac_toe alone has the 4 (every second of its expected 8 arrivals: 3 of its 6 came), then
    # connect_four gets 4 // 2 of its expected 4 (1 of its 2 came). Step 2 expects each case's step-1 count:
    # tic_tac_toe every third of 6 from offset 2 (1 of its 5 came), connect_four every one of 2 (2 of its 3)
    assert kept == [(1, "tic_tac_toe")] * 3 + [(1, "connect_four")] + [(2, "tic_tac_toe")] \
        + [(2, "connect_four")] * 2


def test_kept_games_are_not_the_shortest_of_the_step(log, monkeypatch):
    """Whole games are scored as they end. Keeping a step's first arrivals kept its shortest games: on the H200
    the kept connect_four games averaged 7.0 moves against 11.8 for all, and 65 % of the kept tic_tac_toe games
    were losses against 24 % (docs/runs/2026-11-29-h200-boardgames-tactics-continued/)."""
    monkeypatch.setenv(sample_log.PER_STEP_VAR, "64")
    monkeypatch.setenv(sample_log.TEXTS_VAR, "8")
    every, kept = [], []
    for step in range(20):
        lengths = sorted((step * 13 + i * 29) % 40 + 5 for i in range(64))  # arrive shortest first
        for moves in lengths:
            sample_log.record({"split": "train", "case": "connect_four"}, RESULT, f"moves {moves}")
            every.append(moves)
    kept = [int(e["reply"].split()[1]) for e in lines(log) if "reply" in e]
    assert all(sum(1 for e in lines(log) if e.get("step") == s and "reply" in e) == 8 for s in range(1, 21))
    first_arrivals = sum(sorted(every[s * 64:s * 64 + 8]) == every[s * 64:s * 64 + 8] for s in range(20))
    assert first_arrivals == 20  # the test's premise: each step's first 8 are its shortest
    mean = sum(every) / len(every)
    assert abs(sum(kept) / len(kept) - mean) < 0.1 * mean
    assert sum(kept) / len(kept) > 2 * (sum(sum(every[s * 64:s * 64 + 8]) for s in range(20)) / 160)


def test_validation_passes_after_the_first_spread_their_texts_over_the_pass(log, monkeypatch):
    """A validation pass's size is not known to the scripts; from the second pass on, the pass before tells it."""
    monkeypatch.setenv(sample_log.TEXTS_VAR, "2")
    now = 0.0  # a pass: samples less than sample_steps.GAP_S apart
    monkeypatch.setattr(sample_log.time, "time", lambda: now)
    for pass_start in (0.0, 1000.0, 2000.0):
        now = pass_start
        for i in range(10):
            sample_log.record({"split": "val", "case": "tic_tac_toe"}, RESULT, f"game {i}")
    kept = [(e["block"], e["reply"]) for e in lines(log) if "reply" in e]
    assert kept[:2] == [(1, "game 0"), (1, "game 1")]  # the first pass: its size unknown, its first arrivals
    assert [text for block, text in kept if block == 2] == ["game 2", "game 7"]  # every 5th of 10, from 2 % 5
    assert [text for block, text in kept if block == 3] == ["game 3", "game 8"]


def test_more_cases_than_texts_take_turns_and_keep_the_step_bounded(log, monkeypatch):
    monkeypatch.setenv(sample_log.PER_STEP_VAR, "6")  # the fixture keeps 2 texts a step
    for i in range(6 * 5):
        sample_log.record({"split": "train", "case": f"task{i % 6}"}, RESULT, str(i))
    kept = [(e["step"], e["case"]) for e in lines(log) if "reply" in e]
    later = [case for step, case in kept if step >= 2]
    assert all(sum(step == s for step, _ in kept) <= 2 for s in range(2, 6))
    assert {f"task{i}" for i in range(6)} <= set(later)  # every case shows within cases / texts steps


def test_the_side_file_stays_small_with_thousands_of_case_names(tmp_path):
    count_path = str(tmp_path / "run.samples.jsonl.count")
    for i in range(3000):
        position = sample_steps.claim(count_path, "train", 0.0, 100, f"case-{i}-" + "x" * 500)
    assert position.cases == sample_steps.MAX_CASES and position.case_index == 0
    assert len(Path(count_path).read_bytes()) < 65536
    assert sample_steps.claim(count_path, "train", 0.0, 100, "case-2999-" + "x" * 500).block == 31


def test_a_resumed_run_numbers_steps_after_its_checkpoint(log, monkeypatch):
    monkeypatch.setenv(sample_log.OFFSET_VAR, "50")
    for i in range(5):
        sample_log.record({"split": "train"}, RESULT, "x")
    assert [e["step"] for e in lines(log)] == [51, 51, 51, 51, 52]


def test_texts_off_and_validation_passes_split_by_a_pause(log, monkeypatch):
    monkeypatch.setenv(sample_log.TEXTS_VAR, "0")
    sample_log.record({"split": "train"}, RESULT, "hidden")
    monkeypatch.setenv(sample_log.TEXTS_VAR, "1")
    monkeypatch.setattr(sample_steps, "GAP_S", 0.0)  # every validation sample starts a pass
    sample_log.record({"split": "val"}, RESULT, "first pass")
    sample_log.record({"split": "val"}, RESULT, "second pass")
    train, *val = lines(log)
    assert "reply" not in train and "step" in train
    assert [(e["block"], e["reply"]) for e in val] == [(1, "first pass"), (2, "second pass")]
    assert all("step" not in e for e in val)


def test_long_replies_are_cut_with_a_marker_and_games_keep_the_tail(log, monkeypatch):
    monkeypatch.setenv(sample_log.CHARS_VAR, "100")
    monkeypatch.setenv(sample_log.TEXTS_VAR, "4")  # every sample of the fixture's 4-sample steps keeps its text
    sample_log.record({"split": "train"}, RESULT, "a" * 5000 + "<answer>e4</answer>")
    sample_log.record({"split": "train", "mode": "game"}, RESULT, "start " + "b" * 5000 + " FORFEIT")
    single, game = lines(log)
    assert single["reply_chars"] == 5019 and single["reply_cut"] == 4919
    assert "[... 4919 chars cut ...]" in single["reply"] and single["reply"].endswith("<answer>e4</answer>")
    assert game["reply"].endswith(" FORFEIT") and game["reply"].index("[...") <= 21  # 80 % of it is the tail


@pytest.mark.parametrize("reply", [
    "x" * 5_000_000, b"\xff\xfe\x00 bad bytes \xc3", "lone \ud800 surrogate", None, ["a", {"b": 1}], 12.5,
    "\x1b[2J\x1b]0;pwned\x07 [bold red]markup[/] \u202eevil", "😀" * 3000,
])
def test_hostile_replies_never_break_the_reward_or_the_log(log, reply, monkeypatch):
    monkeypatch.setenv(sample_log.TEXTS_VAR, "4")  # every sample of the fixture's 4-sample steps keeps its text
    scored = compute_score("d", reply, None, {"split": "train", "env": "no_such_env", "case": "c"})
    assert scored["failed"] == 1.0 and scored["score"] == 0.0
    (entry,) = lines(log)
    assert isinstance(entry["reply"], str) and len(entry["reply"]) <= 2000 + 40
    assert not sample_log._disabled


def _worker(path: str, count: int) -> None:
    os.environ.update({sample_log.ENV_VAR: path, sample_log.PER_STEP_VAR: "10", sample_log.TEXTS_VAR: "3"})
    for i in range(count):
        sample_log.record({"split": "train"}, RESULT, f"{os.getpid()}-{i}")


def test_reward_workers_in_separate_processes_share_one_count(tmp_path):
    path = tmp_path / "run.samples.jsonl"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_worker, args=(str(path), 25)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    entries = lines(path)
    assert len(entries) == 100
    for step in range(1, 11):
        in_step = [e for e in entries if e["step"] == step]
        assert len(in_step) == 10 and sum("reply" in e for e in in_step) == 3


def test_threads_of_one_reward_worker_share_one_count(tmp_path):
    """verl's reward workers score from several threads; flock does not separate threads that share a
    descriptor, and on the H100 their interleaved writes left a side file that no longer parsed (steps and
    texts went off). Every claim must be counted once, whatever the threads' interleaving."""
    import threading

    count_path = str(tmp_path / "run.samples.jsonl.count")
    positions: list[sample_steps.Position] = []

    def claim_many() -> None:
        for _ in range(200):
            positions.append(sample_steps.claim(count_path, "train", 0.0, 10))

    threads = [threading.Thread(target=claim_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted((p.block, p.index) for p in positions) == [(b, i) for b in range(1, 161) for i in range(10)]
    assert json.loads(Path(count_path).read_text())["train"][0] == 1600


def test_a_side_file_with_trailing_bytes_still_counts(tmp_path):
    count_path = tmp_path / "run.samples.jsonl.count"
    count_path.write_text('{"val": [1, 1, 0, 5.0]}}')  # what the H100 run left behind
    assert sample_steps.claim(str(count_path), "val", 6.0, None) == sample_steps.Position(1, 1)
    assert json.loads(count_path.read_text())["val"][0] == 2


def test_cut_and_printable():
    assert cut("abcdef", 10) == ("abcdef", 0)
    assert cut("abcdefghij", 4) == ("ab\n[... 6 chars cut ...]\nij", 6)
    assert printable("ok\tfine\n\x1b[31m\u202e") == "ok\tfine\n\\x1b[31m\\u202e"


def write_log(path: Path) -> None:
    entries = [{"split": "train", "step": s, "block": s, "env": "openspiel", "case": "tic_tac_toe", "score": 0.25 * i,
                "format_ok": 1.0, "valid": 0.0, "reply": f"step {s} reply {i} [bold]x[/bold] \x1b[2J",
                "reply_chars": 40, "reply_cut": 0} for s in (1, 2, 3) for i in range(3)]
    entries.append({"split": "val", "block": 1, "env": "logic", "case": "leg_counting", "score": 1.0,
                    "reply": "<answer>4</answer>", "reply_chars": 18, "reply_cut": 0})
    entries.append({"split": "train", "step": 3, "score": 0.0})  # no reply kept: not shown
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + '{"split": "train", "reply": "cut off')


def test_viewer_shows_a_step_the_last_step_and_validation(tmp_path, capsys):
    path = tmp_path / "run.samples.jsonl"
    write_log(path)
    assert cli.main(["samples", str(path), "--step", "2", "--n", "2"]) == 0
    out, err = capsys.readouterr()
    assert "step 2: 2 replies" in out and "step 2 reply 1" in out and "step 2 reply 2" not in out
    assert "step 1 reply" not in out and "openspiel/tic_tac_toe  score 0.25  format 1  valid 0" in out
    assert "[bold]x[/bold]" in out and "\\x1b[2J" in out and "\x1b[2J" not in out  # markup and escapes as text
    assert "skipped 1 line" in err
    assert sample_view.main([str(path), "--last"]) == 0
    out = capsys.readouterr().out
    assert "step 3: 3 replies" in out and "step 2" not in out
    assert sample_view.main([str(path), "--split", "val"]) == 0
    assert "val pass 1: 1 reply" in capsys.readouterr().out


def test_viewer_reads_gzip_and_names_what_is_missing(tmp_path, capsys):
    path = tmp_path / "run.samples.jsonl"
    write_log(path)
    packed = tmp_path / "run.samples.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert sample_view.main([str(packed), "--step", "9"]) == 1
    err = capsys.readouterr().err
    assert "no kept replies for step 9" in err and "steps with replies: 1-3" in err
    assert sample_view.main([str(packed), "--step", "3"]) == 0 and "step 3 reply 0" in capsys.readouterr().out
    assert sample_view.main([str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_viewer_survives_garbage(tmp_path, capsys):
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(os.urandom(20000) + b'\n{"reply": 5, "split": "train", "step": "x", "score": "NaN"}\n'
                     + b'["reply"]\n{"reply": "\\udfff\\u0000", "split": "train", "step": 1e400}\n')
    assert sample_view.main([str(path), "--split", "all"]) == 0
    out = capsys.readouterr().out
    assert "\\x00" in out and "train block 0" in out


def test_show_writes_plain_text_to_a_stream():
    buffer = io.StringIO()
    sample_view.show([(("step", 1), [{"reply": "hello", "env": "e", "case": "c"}])], 100, buffer)
    assert "hello" in buffer.getvalue() and "e/c" in buffer.getvalue()


def _steps_env(tmp_path: Path, *overrides: str, **env: str) -> list[str]:
    """VERL_EXT_SAMPLES_PER_STEP and VERL_EXT_SAMPLE_STEP_OFFSET as lib/common.sh's sample_log_steps exports them."""
    import subprocess

    script = ('source train/scripts/lib/common.sh; split_flags "$@"; sample_log_steps; '
              'echo "${VERL_EXT_SAMPLES_PER_STEP:-} ${VERL_EXT_SAMPLE_STEP_OFFSET:-}"')
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VERL_EXT_SAMPLE")}
    environ.update(TRAIN_BATCH_SIZE="16", ROLLOUT_N="4", CHECKPOINT_DIR=str(tmp_path), **env)
    out = subprocess.run(["bash", "-c", script, "bash", *overrides], capture_output=True, text=True, check=True,
                         env=environ, cwd=Path(__file__).resolve().parents[1]).stdout
    return out.split(" ")


def test_scripts_export_the_step_size_and_the_resumed_step(tmp_path):
    assert _steps_env(tmp_path) == ["64", "\n"]
    assert _steps_env(tmp_path, "data.train_batch_size=8", "actor_rollout_ref.rollout.n=2")[0] == "16"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("40\n")
    assert _steps_env(tmp_path) == ["64", "40\n"]
    assert _steps_env(tmp_path, "trainer.resume_mode=disable") == ["64", "\n"]
    assert _steps_env(tmp_path, VERL_EXT_SAMPLES_PER_STEP="7")[0] == "7"
