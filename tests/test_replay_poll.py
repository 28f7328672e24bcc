"""The rollout's 2 s grid and its opt-in fix: verl 0.9.1's own v1 ReplayBuffer driven with a fake TransferQueue.

verl's replay buffer sleeps ``poll_interval`` (2.0 s, not configurable) between looks at TransferQueue, so a
rollout that is done after 3.3 s is seen after 4 s. ``verl_ext.patches.replay_buffer.poll_replay_buffer`` builds the
same class with a shorter interval. The clock here is simulated: verl's ``time.sleep`` advances it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.patches import replay_buffer as ours
from verl_ext.launch.preflight import check_ppo, compose


class FakeClock:
    """What verl's replay buffer module sees as ``time``: sleep advances a simulated clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def time(self) -> float:
        return self.now


class FakeTransferQueue(types.ModuleType):
    """The three TransferQueue calls the sync sampler makes: one prompt group that finishes at ``done_at``."""

    def __init__(self, clock: FakeClock, done_at: float, samples: int = 2) -> None:
        super().__init__("transfer_queue")
        self.clock, self.done_at, self.samples = clock, done_at, samples
        self.listed = 0
        self.cleared: list[tuple[str, list[str]]] = []

        class KVBatchMeta:
            def __init__(self, partition_id: str, keys: list[str], tags: list[dict]) -> None:
                self.partition_id, self.keys, self.tags = partition_id, keys, tags

        self.KVBatchMeta = KVBatchMeta

    def kv_list(self) -> dict[str, dict[str, dict]]:
        self.listed += 1
        done = self.clock.now >= self.done_at
        train = {"u1": {"is_prompt": True, "status": "finished" if done else "running", "global_steps": 1}}
        if done:
            train.update({f"u1_{i}_0": {"status": "success", "global_steps": 1} for i in range(self.samples)})
        return {"train": train}

    def kv_clear(self, keys: list[str], partition_id: str) -> None:
        self.cleared.append((partition_id, list(keys)))


@pytest.fixture
def verl_buffers(monkeypatch):
    """verl's replay_buffer.py loaded against the fake TransferQueue, as ``verl.trainer.ppo.v1.replay_buffer``
    (loaded from its file, so verl's v1 package __init__ with the whole trainer is not imported)."""
    import verl

    def load(done_at: float) -> tuple[types.ModuleType, FakeClock, FakeTransferQueue]:
        clock = FakeClock()
        tq = FakeTransferQueue(clock, done_at)
        monkeypatch.setitem(sys.modules, "transfer_queue", tq)
        path = Path(verl.__file__).parent / "trainer" / "ppo" / "v1" / "replay_buffer.py"
        spec = importlib.util.spec_from_file_location("verl.trainer.ppo.v1.replay_buffer", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        monkeypatch.setattr(module, "time", clock)
        return module, clock, tq

    return load


def _sync_buffer(module: types.ModuleType, poll_interval: float | None) -> object:
    args = dict(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=8,
                max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}))
    if poll_interval is None:  # what verl's trainer builds without a custom sampler (trainer_base.py:153-183)
        return module.ReplayBuffer(**args, refill_fn=lambda n: n, filter_groups_metric=None,
                                   sync_refill_failed_groups=False, train_batch_size=1, gen_batch_size=1)
    args["sampler_kwargs"] = OmegaConf.create({"poll_interval": poll_interval})
    return ours.poll_replay_buffer(**args, refill_fn=lambda n: n)


@pytest.mark.parametrize("poll_interval, seen_at, polls", [(None, 4.0, 3), (0.1, 3.3, 34), (0.02, 3.3, 166)])
def test_rollout_phase_ends_on_the_poll_grid(verl_buffers, monkeypatch, poll_interval, seen_at, polls):
    # each look takes no real time here: on a loaded CI runner a real look of > 3.5 ms stretched the 0.02 s
    # wait (by design, see the slow-look test) and moved the end off the grid
    monkeypatch.setattr(ours, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    module, clock, tq = verl_buffers(done_at=3.3)
    buffer = _sync_buffer(module, poll_interval)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=1)
    assert clock.now == pytest.approx(seen_at)  # what timing_s/gen measures, less the replicas' sleep
    assert clock.sleeps == [poll_interval or 2.0] * len(clock.sleeps) and tq.listed == polls
    assert batch.keys == ["u1_0_0", "u1_1_0"] and metrics == {}
    assert tq.cleared == [("train", ["u1"])]  # the selected prompt's status entry, as verl does


def test_async_trainers_get_verls_async_buffer(verl_buffers):
    module, _, _ = verl_buffers(done_at=0.0)
    buffer = ours.poll_replay_buffer("colocate_async", OmegaConf.create({}), None, "drop",
                                     OmegaConf.create({"poll_interval": 0.25}), refill_fn=lambda n: n)
    assert type(buffer).__mro__[1] is module.ReplayBufferAsync and buffer.poll_interval == 0.25


def test_a_slow_look_stretches_the_wait_and_a_fast_one_does_not(verl_buffers, monkeypatch):
    # a look that takes 12 ms of real time (TransferQueue listing a big batch): the sleep after it is >= 12 ms x
    # 0.85 / 0.15 = 68 ms instead of 0.02 s, so looking stays under 15 % of the driver's time
    import time

    module, clock, tq = verl_buffers(done_at=1.0)
    listing = tq.kv_list

    def slow_list():
        time.sleep(0.012)
        return listing()

    monkeypatch.setattr(tq, "kv_list", slow_list)
    buffer = _sync_buffer(module, 0.02)
    buffer.sample(global_steps=1, partition_id="train", batch_size=1)
    assert clock.sleeps and all(s >= 0.012 * 0.85 / 0.15 for s in clock.sleeps)
    assert buffer.poll_interval == 0.02  # the setting itself is kept
    assert ours.poll_sleep_s(0.02, 0.003) == 0.02  # the realistic load's 3 ms look keeps the interval
    assert ours.poll_sleep_s(0.02, 0.030) == pytest.approx(0.17)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "sampler_kwargs.poll_interval: missing"),
    ({"poll_interval": 0}, "expected a positive number of seconds, got 0"),
    ({"poll_interval": -1.5}, "expected a positive number of seconds, got -1.5"),
    ({"poll_interval": "fast"}, "expected seconds as a number, got 'fast'"),
    ({"poll_interval": True}, "expected a positive number of seconds, got True"),
    ({"poll_interval": 0.1, "interval": 1}, "sampler_kwargs.interval: not a setting of poll_replay_buffer"),
])
def test_bad_sampler_kwargs_name_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ours.parse_poll_interval(kwargs)


def _overrides(poll: str) -> list[str]:
    return [f"trainer.v1.sampler.custom_sampler.path={ours.SAMPLER_PATH}",
            f"trainer.v1.sampler.custom_sampler.name={ours.SAMPLER_NAME}",
            f"+trainer.v1.sampler.sampler_kwargs.poll_interval={poll}",
            "actor_rollout_ref.model.path=/nonexistent", "actor_rollout_ref.rollout.name=vllm"]


def test_preflight_refuses_what_verl_keeps_from_custom_samplers():
    cfg = compose("ppo_trainer", _overrides("0.1") + ["algorithm.filter_groups.enable=True",
                                                      "trainer.v1.sampler.sync_refill_failed_groups=True"])
    problems = ours.sampler_problems(cfg)
    assert len(problems) == 2
    assert problems[0].startswith("algorithm.filter_groups.enable=True: verl gives DAPO group filtering")
    assert problems[1].startswith("trainer.v1.sampler.sync_refill_failed_groups=True")
    bad = check_ppo(compose("ppo_trainer", _overrides("0")), check_imports=False)
    assert any(p.startswith("ROLLOUT_POLL_INTERVAL: trainer.v1.sampler.sampler_kwargs.poll_interval") for p in bad)
    assert ours.sampler_problems(compose("ppo_trainer", _overrides("0.1"))) == []
    assert ours.sampler_problems(compose("ppo_trainer", [])) == []  # verl's built-in sampler: nothing to check


def test_the_knob_composes_into_verls_config_and_passes_preflight():
    from test_train_scripts import dry_run, overrides_of

    default = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke")))
    assert ours.uses_poll_sampler(default) and default.trainer.v1.sampler.sampler_kwargs.poll_interval == 0.02
    assert check_ppo(default, check_imports=False) == []
    slower = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                         ROLLOUT_POLL_INTERVAL="0.5")))
    assert slower.trainer.v1.sampler.sampler_kwargs.poll_interval == 0.5
    for off in ("off", ""):  # verl's built-in sampler (2 s), e.g. for DAPO group filtering
        builtin = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke",
                                                              ROLLOUT_POLL_INTERVAL=off)))
        assert not ours.uses_poll_sampler(builtin) and dict(builtin.trainer.v1.sampler.sampler_kwargs) == {}
    dapo = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", "algorithm.filter_groups.enable=True",
                                                       RUN_PROFILE="smoke")))
    assert any("set ROLLOUT_POLL_INTERVAL=off" in p for p in check_ppo(dapo, check_imports=False))
