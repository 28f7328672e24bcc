"""Per-step learning-signal and collapse metrics (verl_ext/group_stats.py, verl_ext/patches/step_signal.py) and their alarms
(verl_ext/signal_alarm.py).

The trainer test runs verl 0.9.1's own v1 trainer methods (``_compute_advantage``, ``_compute_metrics``) in a child
interpreter with the patch loaded as in a run (``VERL_USE_EXTERNAL_MODULES`` and verl's ``__init__``), on samples
built as verl's agent loop builds them (``AgentLoopOutput.as_dict`` and ``list_of_dict_to_tensordict``) and scored
by our ``compute_score`` on real tic_tac_toe rows. TransferQueue itself (Ray actors) is a dict-backed stand-in
with its ``kv_batch_get``/``kv_batch_put``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_train_scripts import dry_run, overrides_of, runtime_env_modules

from verl_ext import signal_alarm
from verl_ext.patches import step_signal
from verl_ext.envs.answer import NO_ANSWER_ID, answer_id
from verl_ext.group_stats import NO_ANSWER_ID as GROUP_NO_ANSWER_ID
from verl_ext.group_stats import Reply, case_name, step_metrics
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score
from verl_ext.signal_alarm import SignalAlarm

TESTS = Path(__file__).parent


def group(uid: str, rewards: list[float], answers: list[float | None], case: str = "tic_tac_toe") -> list[Reply]:
    return [Reply(group=uid, reward=r, answer=a, format_ok=float(a not in (None, 0.0)), valid=float(r >= 1.0),
                  case=case) for r, a in zip(rewards, answers)]


def test_groups_of_equal_rewards_have_no_signal_and_a_collapsed_group_has_zero_entropy():
    equal = group("a", [1.0] * 4, [7.0] * 4) + group("b", [0.0] * 4, [0.0] * 4)
    metrics = step_metrics(equal)
    assert metrics["signal/group_share"] == 0.0 and metrics["signal/groups"] == 2.0
    assert metrics["signal/reward_std_in_group"] == 0.0
    assert metrics["collapse/answer_entropy"] == 0.0 and metrics["collapse/favourite_share"] == 1.0
    assert metrics["collapse/distinct_answers"] == 1.0 and metrics["collapse/distinct_share"] == 0.25
    assert metrics["signal/format_rate"] == 0.5 and metrics["signal/valid_rate"] == 0.5

    spread = group("c", [1.0, 0.1, 0.0, 1.0], [1.0, 2.0, 0.0, 3.0])  # four answers (one is "no answer")
    metrics = step_metrics(equal + spread)
    assert metrics["signal/group_share"] == pytest.approx(1 / 3)
    assert metrics["collapse/answer_entropy"] == pytest.approx(math.log(4) / 3)
    assert metrics["collapse/favourite_share"] == pytest.approx((1 + 1 + 0.25) / 3)
    assert metrics["collapse/distinct_answers"] == pytest.approx(6 / 3)
    # per case over the batch: answer 7 in 4 of the 12 replies; "no answer" is never the favourite
    assert metrics["collapse/favourite_share/tic_tac_toe"] == pytest.approx(4 / 12)


def test_full_games_singletons_and_broken_rewards():
    games = group("g", [1.0, 0.0], [None, None])  # a full game's reply has no one answer: signal, no collapse
    assert "collapse/groups" not in step_metrics(games) and step_metrics(games)["signal/group_share"] == 1.0
    # verl's GRPO: a lone sample's advantage is its reward
    singles = group("s1", [0.0], [1.0]) + group("s2", [0.5], [1.0])
    assert step_metrics(singles)["signal/group_share"] == 0.5
    broken = group("n", [math.nan, 1.0, math.nan], [1.0, 1.0, 1.0]) + [Reply("m", 0.0, format_ok=math.inf)]
    metrics = step_metrics(broken)
    assert metrics["signal/group_share"] == 0.0 and metrics["signal/format_rate"] == 1.0  # NaN/inf left out
    assert step_metrics([]) == {}
    assert case_name("universal_poker(betting=nolimit,blind=100 50)") == "universal_poker_betting_nolimit_blind_100_50"
    assert case_name("\x00\n") == "unknown" and len(case_name("x" * 500)) == 48


def test_whole_games_count_their_opening_replies_where_the_policy_opened_the_game():
    from verl_ext.envs.answer import action_key
    from verl_ext.reward import NOT_AN_OPENING

    column3 = answer_id(action_key(3))
    opened = {"game": 1.0, "answer_id": column3}
    assert step_signal._answer(opened) == column3
    assert step_signal._answer({"game": 1.0, "answer_id": NOT_AN_OPENING}) is None  # another player moved first
    assert step_signal._answer({"game": 1.0, "answer_id": NO_ANSWER_ID}) == NO_ANSWER_ID  # a rejected opening
    # eight connect_four games of one deal, all opening in column 3: the run-5 collapse, now visible in game mode
    games = group("g", [1.0, 0.0] * 4, [column3] * 8, case="connect_four") + group("h", [1.0, 0.0], [None, None])
    metrics = step_metrics(games)
    assert metrics["collapse/groups"] == 1.0 and metrics["collapse/favourite_share"] == 1.0
    assert metrics["collapse/favourite_share/connect_four"] == 1.0 and metrics["signal/group_share"] == 1.0


def test_a_mixed_batch_keeps_its_single_moves_apart_from_the_games_fixed_openings():
    """TASK_MODE=mixed (docs/runs/2026-11-28-h200x2-boardgames-tactical-mix/): games opened alike from step 1
    (favourite share 1.0) pooled with single moves read 0.82-0.90 while the single moves' own stayed at 0.51-0.73,
    and the collapse alarm fired on the mix. Each kind now has its own metrics; batches of one kind are as before."""
    openings = [Reply(group=f"g{i}", reward=float(i % 2), answer=5.0, case="tic_tac_toe", opening=True)
                for i in range(8)] + [Reply(group=f"h{i}", reward=1.0, answer=5.0, case="tic_tac_toe", opening=True)
                                      for i in range(8)]
    moves = (group("m", [1.0, 0.0, 1.0, 0.0], [1.0, 2.0, 1.0, 3.0])
             + group("n", [1.0, 0.0, 0.0, 1.0], [4.0, 4.0, 6.0, 7.0]))
    metrics = step_metrics(openings + moves)
    # 16 opening groups of one reply each at 1.0, two move groups at 0.5: pooled 17/18
    assert metrics["collapse/favourite_share"] == pytest.approx((16 + 0.5 + 0.5) / 18)
    assert metrics["collapse/moves/favourite_share"] == 0.5 and metrics["collapse/moves/groups"] == 2.0
    assert metrics["collapse/moves/distinct_answers"] == 3.0
    assert metrics["collapse/moves/answer_entropy"] == pytest.approx(1.5 * math.log(2))
    assert metrics["collapse/openings/favourite_share"] == 1.0 and metrics["collapse/openings/groups"] == 16.0
    for one_kind in (openings, moves):
        assert not any(key.startswith(("collapse/moves/", "collapse/openings/")) for key in step_metrics(one_kind))

    # the alarm reads the single moves' own: no collapse while they vary, however high the pooled mean
    varied = SignalAlarm()
    for step in range(1, 8):
        lines, flags = varied.observe(step, {**metrics_of(0.7, entropy=0.4, favourite=0.9, distinct=1.2),
                                             "collapse/moves/favourite_share": 0.6,
                                             "collapse/moves/distinct_answers": 2.5,
                                             "collapse/moves/answer_entropy": 0.7})
        assert lines == [] and flags["collapse/alarm"] == 0.0
    # and a collapse of the single moves is called even while the pooled mean stays below the line
    collapsing = SignalAlarm()
    collapsing.observe(1, {**metrics_of(0.7, entropy=0.8, favourite=0.6, distinct=3.0),
                           "collapse/moves/favourite_share": 0.5, "collapse/moves/distinct_answers": 3.0,
                           "collapse/moves/answer_entropy": 1.0})
    seen = [collapsing.observe(step, {**metrics_of(0.7, entropy=0.8, favourite=0.7, distinct=3.0),
                                      "collapse/moves/favourite_share": 0.9, "collapse/moves/distinct_answers": 3.0,
                                      "collapse/moves/answer_entropy": 0.2})
            for step in range(2, 2 + signal_alarm.PATIENCE)]
    assert seen[-1][1]["collapse/alarm"] == 1.0
    assert "90% of a group's replies" in seen[-1][0][0]
    assert "answer entropy 0.200 nats < 0.25 x the first step's 1.000" in seen[-1][0][0]


def test_a_game_rows_reply_is_marked_as_an_opening_when_read_from_verls_batch():
    import torch

    batch = SimpleNamespace(keys=["u1_0_0", "u1_1_0", "u2_0_0"], tags=None)
    data = {"uid": ["u1", "u1", "u2"], "rm_scores": torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.5, 0.0]]),
            "extra_fields": [{"reward_extra_info": {"game": 1.0, "answer_id": 5.0, "score": 1.0}},
                             {"reward_extra_info": {"game": 1.0, "answer_id": 5.0, "score": 0.0}},
                             {"reward_extra_info": {"game": 0.0, "answer_id": 3.0, "score": 0.5}}],
            "extra_info": [{"case": "tic_tac_toe"}] * 3}
    replies = step_signal.replies_of(batch, data)
    assert [(r.group, r.reward, r.answer, r.opening) for r in replies] == [
        ("u1", 1.0, 5.0, True), ("u1", 0.0, 5.0, True), ("u2", 0.5, 3.0, False)]


def test_answer_ids_are_the_rewards_canonical_answers_and_hostile_replies_are_no_answer():
    assert GROUP_NO_ANSWER_ID == NO_ANSWER_ID == answer_id(None)
    assert answer_id("x(1,1)") == answer_id("x(1,1)") != answer_id("x(1,2)")
    for text in ("", "\ud800", "\x00" * 10, "a" * 100_000, "é"):
        value = answer_id(text)
        assert 1 <= value < 2 ** 24 and value == float(np.float32(value))  # exact in float32 too
    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 2, "reward_mode": "legal"},
                          "logic": {"cases": ["basic_arithmetic"], "num_tasks_per_case": 2}})
    for index, ref in enumerate(mixture.plan("train")):
        row, task = mixture.row(ref, "train", index), mixture.build(ref)

        def score(text: object) -> dict:
            return compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
        answer = task.legal_moves[0] if task.legal_moves else "12"
        adapter = mixture.adapters[ref.env]
        # a legal move counts as its OpenSpiel action (x(1,1) and o(1,1) are one cell); a puzzle answer as its text
        canonical = adapter.answer_key(ref.case, task.state, answer) if ref.env == "openspiel" else answer
        assert score(f"<answer>{answer}</answer>")["answer_id"] == score(f"<answer>  {answer} </answer>")["answer_id"] \
            == answer_id(canonical)  # the parser's whitespace rules: one canonical answer
        for hostile in (None, 42, "", "no tags", "<answer>a</answer><answer>b</answer>", "<answer>x</answer> more",
                        "<answer></answer>", "<answer>" + "9" * 50_000 + "</answer>"):
            result = score(hostile)
            assert result["answer_id"] == NO_ANSWER_ID and result["format_ok"] == 0.0
    broken = compute_score("openspiel/x", "<answer>e4</answer>", "", {"env": "nope", "case": "x", "state": ""})
    assert broken["failed"] == 1.0 and broken["answer_id"] == NO_ANSWER_ID


def metrics_of(share: float, entropy: float = 1.0, favourite: float = 0.3, distinct: float = 3.0,
               format_rate: float = 1.0) -> dict[str, float]:
    return {"signal/group_share": share, "signal/groups": 16.0, "signal/format_rate": format_rate,
            "signal/valid_rate": 0.5, "collapse/answer_entropy": entropy, "collapse/favourite_share": favourite,
            "collapse/distinct_answers": distinct}


def test_no_signal_warns_at_step_one_then_after_patience_and_once_per_repeat():
    alarm = SignalAlarm()
    lines, flags = alarm.observe(1, metrics_of(0.0))
    assert len(lines) == 1 and flags["signal/alarm"] == 1.0
    assert lines[0].startswith(f"{signal_alarm.MARK}: step 1: no learning signal: 100% of 16 groups have equal rewards "
                               "(format 100%, valid 50%)")
    assert "cold start (SFT), a different prompt or system prompt, easier tasks" in lines[0]
    printed = [step for step in range(2, 2 + signal_alarm.REPEAT_STEPS + 1) if alarm.observe(step, metrics_of(0.0))[0]]
    assert printed == [1 + signal_alarm.REPEAT_STEPS]  # rate-limited: once more after REPEAT_STEPS steps

    later = SignalAlarm()
    assert later.observe(1, metrics_of(0.5))[0] == []
    steps = [later.observe(step, metrics_of(0.05))[0] for step in range(2, 2 + signal_alarm.PATIENCE)]
    assert [bool(s) for s in steps] == [False] * (signal_alarm.PATIENCE - 1) + [True]
    assert f"for {signal_alarm.PATIENCE} steps" in steps[-1][0]
    assert later.observe(10, metrics_of(0.5)) == ([], {"signal/alarm": 0.0, "collapse/alarm": 0.0})
    assert [bool(later.observe(step, metrics_of(0.05))[0]) for step in (11, 12, 13)] == [False, False, True]


@pytest.mark.parametrize("collapsed, reason", [
    ({"entropy": 0.2}, "answer entropy 0.200 nats < 0.25 x the first step's 1.000"),
    ({"favourite": 0.85}, "85% of a group's replies name its favourite answer (> 80%)"),
    ({"distinct": 1.2}, "1.20 distinct answers per group (< 1.5)"),
])
def test_collapse_warns_once_after_patience_naming_the_threshold(collapsed, reason):
    alarm = SignalAlarm()
    assert alarm.observe(1, metrics_of(0.5)) == ([], {"signal/alarm": 0.0, "collapse/alarm": 0.0})
    seen = [alarm.observe(step, metrics_of(0.5, **collapsed)) for step in range(2, 8)]
    lines = [line for step_lines, _ in seen for line in step_lines]
    assert len(lines) == 1 and f"step {1 + signal_alarm.PATIENCE}: policy collapse" in lines[0] and reason in lines[0]
    assert "entropy_coeff" in lines[0] and [flags["collapse/alarm"] for _, flags in seen] == [0, 0, 1, 1, 1, 1]


def test_collapse_is_not_called_while_most_replies_are_malformed_or_without_a_baseline():
    alarm = SignalAlarm()
    for step in range(1, 6):  # "no answer" as everyone's favourite: the no-signal alarm's case, not collapse
        lines, flags = alarm.observe(step, metrics_of(0.0, entropy=0.0, favourite=1.0, distinct=1.0, format_rate=0.2))
        assert all("policy collapse" not in line for line in lines) and flags["collapse/alarm"] == 0.0
    flat = SignalAlarm()  # a first step of entropy ~0 is no baseline to fall from
    for step in range(1, 6):
        assert flat.observe(step, metrics_of(0.5, entropy=0.01))[0] == []


def test_a_starting_policy_already_fixed_is_said_once_and_is_no_collapse_until_it_varies():
    """The 2026-11-28 whole-game run (docs/runs/2026-11-28-h200x4-boardgames-filter-leduc/): an engine-taught cold
    start opens every game alike from step 1 (favourite share 1.0 on the empty board) while 60-90 % of its groups
    carry signal; that is the starting policy, not GRPO collapsing. A condition that stopped holding counts again."""
    alarm = SignalAlarm()
    fixed = metrics_of(0.7, entropy=0.0, favourite=1.0, distinct=1.0)
    lines, flags = alarm.observe(1, fixed)
    assert len(lines) == 1 and "step 1: the starting policy already meets the collapse threshold" in lines[0]
    assert "100% of a group's replies name its favourite answer" in lines[0] and "1.00 distinct answers" in lines[0]
    assert flags["collapse/alarm"] == 0.0
    later = [alarm.observe(step, fixed) for step in range(2, 10)]
    assert all(not step_lines and flags["collapse/alarm"] == 0.0 for step_lines, flags in later)
    alarm.observe(10, metrics_of(0.7, entropy=0.0, favourite=0.5, distinct=3.0))  # the openings vary: re-armed
    again = [alarm.observe(step, fixed) for step in range(11, 11 + signal_alarm.PATIENCE)]
    assert [flags["collapse/alarm"] for _, flags in again] == [0.0] * (signal_alarm.PATIENCE - 1) + [1.0]
    assert "policy collapse" in again[-1][0][0] and "100% of a group's replies" in again[-1][0][0]
    mixed = SignalAlarm()  # a start fixed in one respect still alarms on another that arises during the run
    mixed.observe(1, metrics_of(0.7, favourite=0.9))
    seen = [mixed.observe(step, metrics_of(0.7, favourite=0.9, distinct=1.2)) for step in range(2, 2 + signal_alarm.PATIENCE)]
    assert seen[-1][1]["collapse/alarm"] == 1.0 and "1.20 distinct answers" in seen[-1][0][0]
    assert "favourite answer" not in seen[-1][0][0]


def test_abort_only_in_abort_mode_only_on_the_first_step_and_only_at_about_zero(monkeypatch, capsys):
    for mode, share, step, expected in (("abort", 0.0, 1, True), ("abort", 0.01, 1, True), ("abort", 0.05, 1, False),
                                        ("warn", 0.0, 1, False), ("abort", 0.0, 2, False)):
        alarm = SignalAlarm(mode=mode)
        alarm.observe(1, metrics_of(share if step == 1 else 0.5))
        reason = alarm.should_abort(step, metrics_of(share))
        assert bool(reason) is expected, (mode, share, step)
        assert not expected or reason.startswith(f"SIGNAL_CHECK=abort: step 1 has no learning signal "
                                                 f"(signal/group_share {share:.3f} < 0.02)")
    monkeypatch.setenv(signal_alarm.MODE_VAR, "Abort ")
    assert step_signal.read_mode() == "abort"
    monkeypatch.setenv(signal_alarm.MODE_VAR, "stop")
    assert step_signal.read_mode() == "warn" and "VERL_EXT_SIGNAL_CHECK='stop' is not one of" in capsys.readouterr().err


def test_a_failing_batch_read_is_counted_and_printed_once_and_training_goes_on(capsys):
    class BrokenQueue:
        def kv_batch_get(self, **_):
            raise ConnectionError("TransferQueue went away")

    trainer, batch = SimpleNamespace(), SimpleNamespace(keys=["u_0_0"], tags=[{}], partition_id="train")
    for step in (1, 2):
        metrics = {"critic/score/mean": 0.0}
        assert step_signal.add_step_signal(trainer, BrokenQueue(), batch, metrics, step) == ""
        assert metrics["critic/score/mean"] == 0.0 and metrics["signal/errors"] >= 1.0
    err = capsys.readouterr().err
    assert err.count("the signal/collapse metrics failed") == 1 and "TransferQueue went away" in err


def test_a_verl_without_the_patched_method_is_left_alone_and_says_so(capsys):
    trainer_base = type(sys)("stand_in_trainer_base")
    trainer_base.PPOTrainer = type("PPOTrainer", (), {})
    assert step_signal.patch_trainer(trainer_base) is False
    assert "no signal/collapse metrics" in capsys.readouterr().err


TRAINER_STEPS = textwrap.dedent("""
    import json, os, sys, types
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.step_signal"
    import verl  # imports verl_ext.patches.step_signal, whose patch waits for verl's trainer
    import torch
    from transfer_queue.metadata import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.v1 import trainer_base
    from verl_ext.launch.preflight import compose
    from verl_ext.mixture import EnvMixture
    from verl_ext.reward import compute_score
    from verl_ext.signal_alarm import NoLearningSignal
    from tq_stand_in import StandInQueue

    print("PATCHED", getattr(trainer_base.PPOTrainer, "_verl_ext_step_signal", False))


    mixture = EnvMixture({"openspiel": {"game_types": ["tic_tac_toe"], "num_tasks_per_case": 8,
                                        "reward_mode": "legal"}})
    refs = mixture.plan("train")[:4]
    moves = [mixture.build(ref).legal_moves for ref in refs]
    queue = trainer_base.tq = StandInQueue()


    def put_step(step, groups):
        # one sample as AgentLoopWorkerTQ._agent_loop_postprocess puts it: as_dict() + the prompt's fields
        keys = []
        for g, (ref, texts) in enumerate(groups):
            row = mixture.row(ref, "train", g)
            for s, text in enumerate(texts):
                scored = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
                n = 2 + g + s  # lengths that differ, as TransferQueue's jagged fields need
                output = AgentLoopOutput(prompt_ids=list(range(4 + g + s)), response_ids=list(range(n)),
                                         response_mask=[1] * n, reward_score=scored["score"], num_turns=2,
                                         metrics=AgentLoopMetrics(), extra_fields={"reward_extra_info": scored})
                field = output.as_dict()
                field.update(uid=f"s{step}g{g}", session_id=s, extra_info=row["extra_info"],
                             data_source=row["data_source"])
                keys.append(f"s{step}g{g}_{s}_0")
                queue.rows[keys[-1]] = field
        return KVBatchMeta(keys=keys, tags=[{"min_global_steps": step - 1, "max_global_steps": step - 1}] * len(keys),
                           partition_id="train")


    def trainer(mode):
        os.environ["VERL_EXT_SIGNAL_CHECK"] = mode
        cls = trainer_base.get_trainer_cls("sync")
        t = cls.__new__(cls)  # verl's sync trainer, not initialised: what the two methods read
        t.config = compose("ppo_trainer", sys.argv[2:])
        t.use_critic, t._rollout_moe_lb_metrics_accumulator = False, None
        t.resource_pool_manager = types.SimpleNamespace(get_n_gpus=lambda: 1)
        t.logged = []
        t.logger = types.SimpleNamespace(log=lambda data, step: t.logged.append((step, dict(data))))
        return t


    def step(t, number, groups):
        batch, metrics = put_step(number, groups), {}
        t._compute_advantage(batch, metrics)
        t._compute_metrics(batch, metrics, {"step": 1.0, "gen": 0.5}, global_steps=number, epoch=0)
        print("METRICS", number, json.dumps({k: float(v) for k, v in metrics.items()
                                             if k.startswith(("signal/", "collapse/", "critic/score/mean", "response_length/"))}))

    answer = lambda text: f"<answer>{text}</answer>"
    mixed = [(refs[0], ["no tags"] * 4),  # malformed: equal rewards, one "no answer"
             (refs[1], [answer(moves[1][0])] * 4),  # one legal move: equal rewards, collapsed
             (refs[2], [answer(moves[2][1]), answer(moves[2][2]), answer("z9"), ""]),  # legal, legal, illegal, empty
             (refs[3], [answer("a") + answer("b"), answer("x\\x00"), answer("9" * 5000), answer(moves[3][0])])]
    collapsed = [(ref, [answer(m[0])] * 4) for ref, m in zip(refs, moves)]
    warned = trainer("warn")
    step(warned, 1, mixed)
    for number in range(2, 7):
        step(warned, number, collapsed)
    stopped = trainer("abort")
    try:
        step(stopped, 1, collapsed)
    except NoLearningSignal as err:
        print("STOPPED", err)
        print("LOGGED", json.dumps([(s, d.get("signal/group_share"), "critic/score/mean" in d)
                                    for s, d in stopped.logged]))
""")


def test_verls_trainer_adds_the_metrics_to_its_step_warns_once_and_aborts_when_asked():
    overrides = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke"))
    done = subprocess.run([sys.executable, "-c", TRAINER_STEPS, str(TESTS), *overrides], capture_output=True, text=True,
                          timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout.splitlines()
    assert "PATCHED True" in out  # installed by VERL_USE_EXTERNAL_MODULES, as in the run's TaskRunner
    steps = {int(line.split()[1]): json.loads(line.split(maxsplit=2)[2]) for line in out if line.startswith("METRICS ")}
    first = steps[1]
    assert first["critic/score/mean"] > 0  # verl's own metrics are still there
    assert first["signal/group_share"] == 0.5 and first["signal/groups"] == 4
    assert first["signal/format_rate"] == 0.5 and first["signal/valid_rate"] == pytest.approx(7 / 16)
    # per group: distinct 1, 1, 4, 2 (three hostile replies are one "no answer"); favourite 1, 1, 1/4, 3/4
    assert first["collapse/distinct_answers"] == 2.0 and first["collapse/favourite_share"] == 0.75
    entropy_d = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert first["collapse/answer_entropy"] == pytest.approx((math.log(4) + entropy_d) / 4)
    # per case, one cell whoever moves: the four x(0,2) replies and one o(0,2) name cell (0,2), 5 of 16 replies
    assert first["collapse/favourite_share/tic_tac_toe"] == pytest.approx(5 / 16)
    assert first["signal/alarm"] == 0.0 and first["collapse/alarm"] == 0.0
    # verl's clip_ratio counts the one 8-token reply (the step's longest) as clipped under a 64-token cap; none is
    assert first["response_length/max"] == 8 and first["response_length/clip_ratio"] == pytest.approx(1 / 16)
    assert first["signal/response_cap"] == 64 and first["signal/replies_at_cap"] == 0.0
    assert first["signal/cap_alarm"] == 0.0
    assert steps[4]["signal/group_share"] == 0.0 and steps[4]["collapse/answer_entropy"] == 0.0
    assert steps[4]["collapse/favourite_share"] == 1.0 and steps[4]["signal/alarm"] == 1.0
    assert [steps[n]["collapse/alarm"] for n in range(2, 7)] == [0, 0, 1, 1, 1]
    warnings = [line for line in out if line.startswith(signal_alarm.MARK)]
    # warn run: no signal and collapse, each once at step 4; abort run, whose first step is already all one answer:
    # no signal, and that its starting policy is fixed (no collapse of the run)
    assert len(warnings) == 4
    assert warnings[0].startswith(f"{signal_alarm.MARK}: step 4: no learning signal for 3 steps: 100% of 4 groups")
    assert warnings[1].startswith(f"{signal_alarm.MARK}: step 4: policy collapse for 3 steps: answer entropy 0.000")
    assert warnings[2].startswith(f"{signal_alarm.MARK}: step 1: no learning signal: 100% of 4 groups")
    assert warnings[3].startswith(f"{signal_alarm.MARK}: step 1: the starting policy already meets the collapse")
    stopped = next(line for line in out if line.startswith("STOPPED "))
    assert "SIGNAL_CHECK=abort: step 1 has no learning signal (signal/group_share 0.000 < 0.02)" in stopped
    assert json.loads(next(line for line in out if line.startswith("LOGGED "))[7:]) == [[1, 0.0, True]]


def test_replies_at_cap_are_verls_clip_ratio_only_when_the_longest_reply_reached_the_cap():
    verl_metrics = {"response_length/max": 13.0, "response_length/clip_ratio": 0.45}
    assert step_signal.cap_metrics(verl_metrics, 32) == {"signal/response_cap": 32.0, "signal/replies_at_cap": 0.0}
    at_cap = {"response_length/max": 32.0, "response_length/clip_ratio": 0.25}
    assert step_signal.cap_metrics(at_cap, 32)["signal/replies_at_cap"] == 0.25
    assert step_signal.cap_metrics(verl_metrics, None) == {} and step_signal.cap_metrics({}, 32) == {}
    # the rollout's own budget first; data.max_response_length when the rollout has none; None without either
    config = {"actor_rollout_ref": {"rollout": {"response_length": 48}}, "data": {"max_response_length": 32}}
    assert step_signal.response_cap(SimpleNamespace(config=config)) == 48
    config["actor_rollout_ref"]["rollout"]["response_length"] = None
    assert step_signal.response_cap(SimpleNamespace(config=config)) == 32
    assert step_signal.response_cap(SimpleNamespace(config=None)) is None
    assert step_signal.response_cap(object()) is None


def test_train_scripts_load_the_module_unless_off_and_pass_abort():
    def env_vars(**env: str) -> dict:
        from omegaconf import OmegaConf

        from verl_ext.launch.preflight import compose
        cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
        return OmegaConf.to_container(cfg.ray_kwargs.ray_init.get("runtime_env") or {}).get("env_vars") or {}

    default, abort, off = env_vars(), env_vars(SIGNAL_CHECK="abort"), env_vars(SIGNAL_CHECK="off")
    assert "verl_ext.patches.step_signal" in default["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert signal_alarm.MODE_VAR not in default and abort[signal_alarm.MODE_VAR] == "abort"
    assert "step_signal" not in off.get("VERL_USE_EXTERNAL_MODULES", "")
    assert runtime_env_modules(VERL_USE_EXTERNAL_MODULES="my.mod", SIGNAL_CHECK="warn", ROLLOUT_WORKER_START="spawn",
                               OLD_LOG_PROB_PASS="always", GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all",
                               GRPO_TIED_GROUPS="verl") == "my.mod,verl_ext.patches.step_signal"
    bad = subprocess.run(["bash", str(TESTS.parent / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, "SIGNAL_CHECK": "loud"})
    assert bad.returncode == 2 and "SIGNAL_CHECK must be one of: warn abort off; got 'loud'" in bad.stderr


def test_replies_cut_at_the_cap_warn_after_patience_naming_the_cap():
    alarm = SignalAlarm()
    seen = [alarm.observe(step, {"signal/group_share": 0.5, "signal/replies_at_cap": share,
                                 "signal/response_cap": 512.0})
            for step, share in enumerate([0.48, 0.48, 0.1, 0.48, 0.48, 0.48, 0.3], start=1)]
    assert [flags["signal/cap_alarm"] for _, flags in seen] == [0, 0, 0, 0, 0, 1, 1]  # 3 steps running, reset at 0.1
    lines = [line for step_lines, _ in seen for line in step_lines]
    assert len(lines) == 1 and lines[0].startswith(
        f"{signal_alarm.MARK}: step 6: 48% of replies reached the 512-token response cap for 3 steps")
    assert "MAX_RESPONSE_LENGTH" in lines[0]
    # no cap metrics (verl without its length metrics): no flag, no line
    assert SignalAlarm().observe(1, {"signal/group_share": 0.5}) == ([], {"signal/alarm": 0.0})


def test_the_patch_reads_the_config_without_importing_the_envs():
    """Every verl process loads this patch; importing ``verl_ext.envs`` there would register the env adapters and
    import OpenSpiel only to read a config key (``verl_ext.config_path`` keeps the path walk apart)."""
    probe = subprocess.run([sys.executable, "-c", "import sys, verl_ext.patches.step_signal; "
                            "print(sorted(m for m in ('pyspiel', 'verl_ext.envs') if m in sys.modules))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]"
