"""Credit per move in whole games (``game.move_credit``, verl_ext/patches/move_credit.py): the game record values
each of the policy's replies in tic_tac_toe (none in connect_four), the patch finds the replies as runs of 1s in the
response mask and adds a normalised per-reply advantage within each GRPO group, and in verl's own v1 trainer
(``PPOTrainer._compute_advantage`` with TransferQueue stood in by a dict) rows without credit keep verl's numbers
bit for bit while credited replies move apart, a bad record changes nothing and training never stops over it. A
trainer whose config sets no ``game.move_credit`` above 0 decides so once and never reads the records."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

from verl_ext.envs import make_env
from verl_ext.envs.config import ConfigError, from_mapping
from verl_ext.envs.episode import parse_opponent
from verl_ext.envs.game_settings import GameSettings
from verl_ext.games import RECORD_FIELD
from verl_ext.games.match import Match, MatchRules, credit_target_met
from verl_ext.patches import move_credit
from verl_ext.patches.move_credit import (MARK, CreditPlan, credit_config, credit_of, move_advantages, plan_of,
                                          reply_spans)

from test_train_scripts import dry_run, overrides_of

TESTS = Path(__file__).resolve().parent


def test_replies_are_the_runs_of_ones_in_the_response_mask():
    assert reply_spans([0, 1, 1, 0, 0, 1, 0, 1, 1]) == [(1, 3), (5, 6), (7, 9)]
    assert reply_spans([1, 1]) == [(0, 2)] and reply_spans([0, 0]) == [] and reply_spans([]) == []


def _play(case: str, replies: list[str], seed: int = 3) -> Match:
    env = make_env("openspiel", {"cases": [case], "task_mode": "game"})
    match = Match(env.start_episode(case, seed, 0), parse_opponent("random", "opponent"),
                  MatchRules.from_settings(GameSettings()))  # one retry after a rejected reply
    for reply in replies:
        if match.next_request() is None:
            break
        legal = match.episode.legal_moves()
        match.submit(reply if reply != "FIRST" else f"<answer>{legal[0]}</answer>")
    return match


def test_the_record_values_every_reply_in_tic_tac_toe_rejected_ones_as_zero_and_none_in_connect_four():
    match = _play("tic_tac_toe", ["no answer", "FIRST", "FIRST", "FIRST"])
    record = match.record
    assert record.model_turns == 4 and record.rejected == 1
    assert len(record.reply_values) == record.model_turns and record.reply_values[0] == 0
    assert set(record.reply_values) <= {0, 1}
    # an accepted reply earns credit only where it also kept the value (credit_target_met), so never more often
    assert sum(record.reply_values[1:]) <= record.values_kept and record.value_turns == 3
    # a fresh game: the first legal move at the empty board keeps the value (every opening draws with best play)
    assert _play("tic_tac_toe", ["FIRST"]).record.reply_values == [1]
    assert _play("connect_four", ["FIRST", "FIRST"]).record.reply_values == []
    assert record.to_dict()["reply_values"] == record.reply_values and record.to_dict()["move_credit"] == 0.0


def _position(history: list[int]):
    """A tic_tac_toe episode after ``history`` (actions: cell = 3 x row + column, x first)."""
    episode = make_env("openspiel", {"cases": ["tic_tac_toe"], "task_mode": "game"}).start_episode("tic_tac_toe", 0, 0)
    for turn, cell in enumerate(history):
        episode.play(f"{'xo'[turn % 2]}({cell // 3},{cell % 3})")
    return episode


def _met(episode, move: str) -> bool:
    return credit_target_met(episode.move_keeps_value(move), episode.move_tactics(move))


def test_the_credit_target_takes_a_win_on_the_board_over_keeping_a_forced_win_for_later():
    # x: (0,0) (0,2) (1,1); o: (0,1) (1,0) (1,2); x to move wins at (2,0) or (2,2), and x(2,1) keeps the win too
    episode = _position([0, 1, 2, 3, 4, 5])
    assert episode.move_keeps_value("x(2,1)") is True
    assert _met(episode, "x(2,0)") and _met(episode, "x(2,2)")
    assert not _met(episode, "x(2,1)")


def test_the_credit_target_in_a_lost_position_pays_the_block_of_a_single_threat_only():
    # x: (0,0) (1,0); o: (0,1); o to move has lost under best play (every move keeps the value), x threatens (2,0)
    episode = _position([0, 1, 3])
    assert all(episode.move_keeps_value(move) for move in episode.legal_moves())
    assert [move for move in episode.legal_moves() if _met(episode, move)] == ["o(2,0)"]


def test_the_credit_target_is_the_value_where_a_position_has_no_tactic_and_never_without_the_value():
    episode = _position([])
    assert all(_met(episode, move) for move in episode.legal_moves())  # every opening draws
    assert not credit_target_met(False, None) and not credit_target_met(False, {"win_chance": 1.0, "win_taken": 1.0})
    assert credit_target_met(True, None) and not _met(episode, None)


@pytest.mark.parametrize("value", [-0.1, 10.5, float("nan"), float("inf"), "lots"])
def test_a_move_credit_outside_0_to_10_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"data\.env\.openspiel\.game\.move_credit"):
        settings = from_mapping(GameSettings, {"move_credit": value}, "data.env.openspiel.game")
        settings.validate("data.env.openspiel.game")


@pytest.mark.parametrize("record", [
    None, "a string", {"move_credit": 1.0}, {"move_credit": 1.0, "reply_values": []},
    {"move_credit": 0.0, "reply_values": [1, 0]}, {"move_credit": True, "reply_values": [1, 0]},
    {"move_credit": float("nan"), "reply_values": [1]}, {"move_credit": 1e9, "reply_values": [1]},
    {"move_credit": 1.0, "reply_values": [1, 2]}, {"move_credit": 1.0, "reply_values": [True]},
    {"move_credit": 1.0, "reply_values": "1,0"}, {"move_credit": 1.0, "reply_values": [1] * 10_000},
])
def test_a_record_that_is_not_well_formed_or_asks_for_nothing_gets_no_credit(record):
    assert credit_of(record) == (0.0, None)


def test_each_reply_gets_its_value_normalised_over_its_groups_replies():
    # group a: rows 0 and 1 (replies 1,0 and 1,1,1), group b: all replies kept (no signal), row 3: no credit asked
    mask = torch.tensor([[1, 1, 0, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 1, 0, 0], [1, 0, 1, 0, 0, 0, 0, 0],
                         [1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 0, 0, 0, 0]])
    plan = CreditPlan(["a", "a", "b", "a", "b"], [1.0, 1.0, 0.5, 0.0, 0.5], [[1, 0], [1, 1, 1], [1, 1], None, [1, 1]])
    added, metrics = move_advantages(mask, plan)
    values = [1, 0, 1, 1, 1]
    mean, std = sum(values) / 5, math.sqrt(sum((v - 0.8) ** 2 for v in values) / 4)
    kept, lost = (1 - mean) / (std + 1e-6), (0 - mean) / (std + 1e-6)
    assert added[0].tolist() == pytest.approx([kept, kept, 0, lost, 0, 0, 0, 0])
    assert added[1].tolist() == pytest.approx([kept, 0, kept, kept, 0, kept, 0, 0])
    assert added[2:].abs().sum() == 0  # group b agrees everywhere; row 3 asked for nothing
    assert metrics == {"move_credit/replies": 5.0, "move_credit/groups": 2.0, "move_credit/groups_with_signal": 1.0,
                       "move_credit/misaligned": 0.0}
    # the credit of a group sums to 0 over its replies (each reply weighted alike)
    assert sum(added[0, s:e].mean() for s, e in reply_spans(mask[0].tolist())) + \
        sum(added[1, s:e].mean() for s, e in reply_spans(mask[1].tolist())) == pytest.approx(0.0, abs=1e-5)


def test_a_row_whose_replies_do_not_match_its_values_is_left_alone_and_counted():
    mask = torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    plan = CreditPlan(["g", "g", "g"], [1.0, 1.0, 1.0], [[1, 0, 1], [0], [1]])  # row 0: 2 replies, 3 values
    added, metrics = move_advantages(mask, plan)
    assert added[0].abs().sum() == 0 and metrics["move_credit/misaligned"] == 1.0
    assert added[1, 0] < 0 < added[2, 0]


def test_a_batch_without_records_asking_for_credit_has_no_plan():
    assert plan_of(["u", "v"], [{}, {RECORD_FIELD: {"move_credit": 0.0, "reply_values": [1, 0]}}]) is None
    assert plan_of(["u"], ["not a mapping"]) is None
    plan = plan_of(["u", "v"], [{}, {RECORD_FIELD: {"move_credit": 2.0, "reply_values": [1, 0]}}])
    assert plan == CreditPlan(["u", "v"], [0.0, 2.0], [None, [1, 0]])


def test_a_verl_without_the_patched_method_is_left_alone_and_says_so(capsys):
    trainer_base = type(sys)("stand_in_trainer_base")
    trainer_base.PPOTrainer = type("PPOTrainer", (), {})
    assert move_credit.patch_trainer(trainer_base) is False
    assert "game.move_credit has no effect" in capsys.readouterr().err


SAID_OFF = f"{MARK}: off (no data.env.<env>.game.move_credit above 0): verl's advantages, no TransferQueue read"
SAID_ON = (f"{MARK}: on for openspiel (game.move_credit 1): each step reads the batch's game records from "
           "TransferQueue")


def _env(game: object) -> dict:
    return {"data": {"env": {"openspiel": {"task_mode": "game", "game": game}}}}


@pytest.mark.parametrize("config, weights", [
    (None, {}), ({}, {}), ({"data": {}}, {}), ({"data": {"env": "openspiel"}}, {}), ({"data": {"env": None}}, {}),
    ({"data": {"env": {"openspiel": {"game_types": ["tic_tac_toe"]}, "weights": {"openspiel": 3},
                       "system_prompt": "You play."}}}, {}),
    (_env(None), {}), (_env({}), {}), (_env({"move_credit": 0}), {}), (_env({"move_credit": "lots"}), {}),
    (_env({"move_credit": 11.0}), {}), (_env({"move_credit": True, "opponent": "random"}), {}), (_env("1.0"), {}),
    (_env({"move_credit": 1.5}), {"openspiel": 1.5}), (_env({"move_credit": "2"}), {"openspiel": 2.0}),
    (SimpleNamespace(data=SimpleNamespace(env={"openspiel": {"game": {"move_credit": 0.5}}})), {"openspiel": 0.5}),
])
def test_the_config_asks_for_credit_only_where_an_envs_game_sets_move_credit_above_0(config, weights):
    decided = credit_config(config)
    assert decided.weights == weights and decided.on == bool(weights)


def test_the_decision_reads_verls_omegaconf_config_and_names_what_it_could_not_read():
    from omegaconf import OmegaConf

    config = OmegaConf.create(_env({"move_credit": 1.0, "opponent": "random"}))
    OmegaConf.set_struct(config, True)  # as verl's: an absent key is no error for .get
    assert credit_config(config).weights == {"openspiel": 1.0}
    refused = credit_config(_env({"move_credit": "lots"}))
    assert not refused.on and "data.env.openspiel.game.move_credit" in refused.describe()
    unresolved = credit_config(OmegaConf.create(_env({"move_credit": "${oc.env:VERL_EXT_NO_SUCH_VARIABLE}"})))
    assert not unresolved.on and "not read: data.env" in unresolved.describe()


class _RecordingQueue:
    """The records of two rows of one group whose reply values differ; ``reads``: each read's fields."""

    def __init__(self) -> None:
        self.reads: list[list[str]] = []

    def kv_batch_get(self, keys, partition_id, select_fields):
        self.reads.append(list(select_fields))
        records = [{"move_credit": 1.0, "reply_values": [1, 0]}, {"move_credit": 1.0, "reply_values": [1]}]
        return {"uid": ["g", "g"], "extra_fields": [{RECORD_FIELD: r} for r in records]}


def _stand_in_verl(queue: _RecordingQueue) -> ModuleType:
    """A trainer_base with verl's names whose ``_compute_advantage`` makes advantages 0 through the module's
    ``compute_advantage_for_multi_trajectories`` (which the patch wraps)."""
    module = ModuleType("stand_in_trainer_base")
    module.tq = queue
    module.compute_advantage_for_multi_trajectories = lambda data: data

    class PPOTrainer:
        def _compute_advantage(self, batch, metrics):
            mask = torch.tensor([[1, 0, 1], [1, 1, 0]])
            data = SimpleNamespace(batch={"response_mask": mask, "advantages": torch.zeros(mask.shape)})
            return module.compute_advantage_for_multi_trajectories(data).batch["advantages"]

    module.PPOTrainer = PPOTrainer
    return module


def test_a_trainer_decides_once_and_reads_no_records_while_its_config_asks_for_no_credit(capsys):
    queue = _RecordingQueue()
    verl = _stand_in_verl(queue)
    assert move_credit.patch_trainer(verl)
    batch = SimpleNamespace(keys=["a", "b"], partition_id="train")
    off, on = verl.PPOTrainer(), verl.PPOTrainer()
    off.config, on.config = _env({"move_credit": 0.0}), _env({"move_credit": 1.0})
    metrics: dict = {}
    first_off = off._compute_advantage(batch, metrics)
    off.config = on.config  # the decision is the trainer's: a later config is not read again
    assert off._compute_advantage(batch, metrics).abs().sum() == 0 == first_off.abs().sum()
    assert queue.reads == [] and metrics == {}
    first_on = on._compute_advantage(batch, metrics)
    on.config = None
    assert torch.equal(on._compute_advantage(batch, metrics), first_on) and first_on[0, 2] < 0 < first_on[0, 0]
    assert queue.reads == [["uid", "extra_fields"]] * 2 and metrics["move_credit/replies"] == 3.0
    assert capsys.readouterr().err.splitlines() == [SAID_OFF, SAID_ON]


TRAINER_STEP = textwrap.dedent("""
    import json, os, sys, types
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.move_credit"
    import verl  # imports verl_ext.patches.move_credit, whose patch waits for verl's trainer
    from transfer_queue.metadata import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.v1 import trainer_base
    from verl_ext.games import RECORD_FIELD
    from verl_ext.launch.preflight import compose
    from tq_stand_in import StandInQueue

    print("PATCHED", getattr(trainer_base.PPOTrainer, "_verl_ext_move_credit", False))


    configs = {}
    for case in json.loads(sys.argv[1]):
        extra = tuple(case["overrides"])
        if extra not in configs:
            configs[extra] = compose("ppo_trainer", sys.argv[2:] + list(extra))
        cls = trainer_base.get_trainer_cls("sync")
        trainer = cls.__new__(cls)  # verl's sync trainer, not initialised: what _compute_advantage reads
        trainer.config = configs[extra]
        queue = trainer_base.tq = StandInQueue(("extra_fields",) if case["broken"] else ())
        keys = []
        for row in case["rows"]:
            mask = row["mask"]
            output = AgentLoopOutput(prompt_ids=[5, 6, 7], response_ids=list(range(10, 10 + len(mask))),
                                     response_mask=mask, reward_score=row["reward"], num_turns=3,
                                     metrics=AgentLoopMetrics(), extra_fields={RECORD_FIELD: row["record"]})
            field = output.as_dict()
            field.update(uid=row["uid"], session_id=0, extra_info={}, data_source="openspiel")
            keys.append(row["uid"] + "_" + str(len(keys)) + "_0")
            queue.rows[keys[-1]] = field
        batch = KVBatchMeta(keys=keys, tags=[{}] * len(keys), partition_id="train")
        metrics = {}
        trainer._compute_advantage(batch, metrics)
        advantages = [[round(float(x), 6) for x in queue.rows[k]["advantages"].tolist()] for k in keys]
        record_reads = sum("extra_fields" in fields for fields in queue.reads)
        print("CASE", json.dumps({"advantages": advantages, "record_reads": record_reads,
                                  "metrics": {k: v for k, v in metrics.items() if k.startswith("move_credit/")}}))
""")
CREDIT = ["+data.env.openspiel.game.move_credit=1.0"]


def _rows(weight: float) -> list[dict]:
    """Two groups of two games: g1's games differ in outcome and in their replies' values, g2's only in values."""
    def record(values: list[int]) -> dict:
        return {"case": "tic_tac_toe", "reply_values": values, "move_credit": weight}
    return [
        {"uid": "g1", "reward": 1.0, "mask": [1, 1, 0, 0, 1, 0, 1], "record": record([1, 1, 1])},
        {"uid": "g1", "reward": 0.0, "mask": [1, 0, 0, 1, 1], "record": record([1, 0])},
        {"uid": "g2", "reward": 0.5, "mask": [1, 0, 1], "record": record([0, 1])},
        {"uid": "g2", "reward": 0.5, "mask": [1, 1, 0, 1], "record": record([1, 1])},
    ]


def test_verls_trainer_keeps_its_advantages_without_credit_and_moves_replies_apart_with_it():
    overrides = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", TASK_MODE="game"))
    assert not any("game.move_credit" in o for o in overrides)  # the smoke run asks for no credit: off by default
    # off: the config sets no move_credit, so even records asking for credit (never written so) are not read
    cases = [{"rows": _rows(1.0), "broken": False, "overrides": []},
             {"rows": _rows(0.0), "broken": False, "overrides": CREDIT},
             {"rows": _rows(1.0), "broken": False, "overrides": CREDIT},
             {"rows": _rows(1.0), "broken": True, "overrides": CREDIT}]
    done = subprocess.run([sys.executable, "-c", TRAINER_STEP, json.dumps(cases), *overrides], check=False,
                          capture_output=True, text=True, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout.splitlines()
    assert "PATCHED True" in out  # installed by VERL_USE_EXTERNAL_MODULES, as in the run's TaskRunner
    off, plain, credited, broken = [json.loads(line[5:]) for line in out if line.startswith("CASE ")]
    decisions = [line for line in done.stderr.splitlines() if line.startswith(f"{MARK}: o")]
    assert decisions == [SAID_OFF] + [SAID_ON] * 3  # once per trainer
    assert off["record_reads"] == 0 and off["metrics"] == {} and off["advantages"] == plain["advantages"]
    assert plain["record_reads"] == credited["record_reads"] == broken["record_reads"] == 1
    # no credit asked: verl's GRPO numbers, one value per game over its reply tokens, tied group g2 at 0
    g1_win, g1_loss, g2_a, g2_b = plain["advantages"]
    assert g1_win == [pytest.approx(0.7071, abs=1e-3)] * 2 + [0, 0] + [pytest.approx(0.7071, abs=1e-3), 0,
                                                                        pytest.approx(0.7071, abs=1e-3)]
    assert g1_loss[0] == pytest.approx(-0.7071, abs=1e-3) and g1_loss[1:3] == [0, 0]
    assert g2_a == [0, 0, 0] and g2_b == [0, 0, 0, 0]
    assert plain["metrics"] == {} and broken["advantages"] == plain["advantages"]
    assert broken["metrics"]["move_credit/errors"] >= 1  # said once, counted, training goes on
    # with credit: g1's values 1,1,1,1,0 -> the lost reply falls below the game's advantage, the others rise a little
    win, loss, a, b = credited["advantages"]
    mean, std = 0.8, math.sqrt(0.8 * 0.2 * 5 / 4)
    up, down = (1 - mean) / (std + 1e-6), (0 - mean) / (std + 1e-6)
    assert win[0] == pytest.approx(g1_win[0] + up, abs=1e-4) and win[2] == 0 and win[6] == pytest.approx(win[0])
    assert loss[0] == pytest.approx(g1_loss[0] + up, abs=1e-4) and loss[3] == pytest.approx(g1_loss[3] + down, abs=1e-4)
    # g2: a tied group keeps advantage 0 for its outcome but its replies' values differ (0,1 against 1,1)
    g2_mean, g2_std = 0.75, math.sqrt(0.25 * 0.75 * 4 / 3)
    assert a[0] == pytest.approx((0 - g2_mean) / (g2_std + 1e-6), abs=1e-4) and a[1] == 0
    assert b[3] == pytest.approx((1 - g2_mean) / (g2_std + 1e-6), abs=1e-4)
    assert credited["metrics"] == {"move_credit/replies": 9.0, "move_credit/groups": 2.0,
                                   "move_credit/groups_with_signal": 2.0, "move_credit/misaligned": 0.0}
