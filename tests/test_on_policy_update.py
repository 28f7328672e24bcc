"""OLD_LOG_PROB_PASS=auto (verl_ext/patches/on_policy_update.py): when the update is one mini-batch for one epoch, the old
log-probs come from the update's own forward and verl's separate pass is skipped.

The equivalence test runs verl 0.9.1's own actor step (``FSDPEngine.forward_backward_batch``: its micro batching
by token budget, ``forward_step`` and ``ppo_loss``) on a tiny Qwen2 on one gloo CPU rank, once in verl's order
(the pass's log-probs written into the batch first) and once marked as the patched trainer marks it: the
gradients must be the same. The patches get in as in a run, through ``VERL_USE_EXTERNAL_MODULES`` and verl's
``__init__``. Each script runs in a child interpreter: the patches are process-wide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gloo_rank import CPU_ACTOR_ENGINE, free_port
from test_train_scripts import dry_run, overrides_of, runtime_env_modules

from verl_ext.patches import on_policy_update
from verl_ext.launch.preflight import compose

TESTS = Path(__file__).parent


def smoke_overrides(*extra: str, **env: str) -> list[str]:
    return [*overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)), *extra]


def run_child(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, str(TESTS), *args, free_port()], capture_output=True,
                          text=True, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.slow
def test_the_smoke_recipe_needs_no_pass_and_each_reason_for_one_is_named():
    assert on_policy_update.pass_needed(compose("ppo_trainer", smoke_overrides()), 64) == ""
    reasons = {
        "two mini-batches": (smoke_overrides(), 96, "96 samples make 2 mini-batches of 64"),
        "ppo_epochs": (smoke_overrides("actor_rollout_ref.actor.ppo_epochs=2"), 64, "ppo_epochs=2"),
        "smaller mini-batch": (smoke_overrides(PPO_MINI_BATCH_SIZE="8"), 64,
                               "64 samples make 2 mini-batches of 32 (actor_rollout_ref.actor.ppo_mini_batch_size=8"),
        "bypass": (smoke_overrides(BYPASS_OLD_LOG_PROB="1"), 64, "bypass_mode=True"),
        "rollout log-probs": (smoke_overrides(ROLLOUT_LOG_PROBS="1"), 64, "calculate_log_probs=True"),
        "kl in reward": (smoke_overrides("algorithm.use_kl_in_reward=True"), 64, "use_kl_in_reward=True"),
        "distillation": (smoke_overrides("distillation.enabled=True"), 64, "distillation.enabled=True"),
        "asynchronous trainer": (smoke_overrides("trainer.v1.trainer_mode=separate_async"), 64,
                                 "trainer_mode=separate_async: the asynchronous trainers"),
    }
    for case, (overrides, batch_size, expected) in reasons.items():
        assert expected in on_policy_update.pass_needed(compose("ppo_trainer", overrides), batch_size), case
    # LoRA + KL: the reference pass (adapter disabled) must not be the actor's first forward; later steps skip
    lora_kl = compose("ppo_trainer", smoke_overrides(KL_LOSS_COEF="0.01"))
    assert "the first update with LoRA and KL" in on_policy_update.pass_needed(lora_kl, 64, first_update=True)
    assert on_policy_update.pass_needed(lora_kl, 64) == ""
    full_kl = compose("ppo_trainer", smoke_overrides(KL_LOSS_COEF="0.01", ENABLE_LORA="0"))
    assert on_policy_update.pass_needed(full_kl, 64, first_update=True) == ""  # its reference is a model of its own


ENGINE_STEP = ('import os\nos.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.on_policy_update"\n'
               + CPU_ACTOR_ENGINE + textwrap.dedent("""
    from verl.workers.utils.padding import response_from_nested
    from verl_ext.patches.on_policy_update import ENTROPY_ESTIMATE, OLD_FROM_UPDATE

    actor_config = omega_conf_to_dataclass(compose("ppo_trainer", sys.argv[2:-1]).actor_rollout_ref.actor)
    assert losses.ppo_loss.__wrapped__ is not None  # patched on import, before anyone bound the name

    g = torch.Generator().manual_seed(3)
    prompt_lens, response_lens = [4, 6, 3, 5], [5, 2, 7, 4]
    prompts = [torch.randint(0, 64, (n,), generator=g) for n in prompt_lens]
    responses = [torch.randint(0, 64, (n,), generator=g) for n in response_lens]
    masks = [torch.ones(n, dtype=torch.long) for n in response_lens]
    masks[2][3:5] = 0  # a multi-turn observation inside a response: not trained on, not in the estimate

    def mini_batch(mark=False, **fields):
        non_tensor = {"use_remove_padding": True, "use_dynamic_bsz": True, "max_token_len_per_gpu": 20,
                      "temperature": 1.0, "global_batch_size": 4, "calculate_entropy": False}
        if mark:
            non_tensor[OLD_FROM_UPDATE] = True
        return tu.get_tensordict({
            "input_ids": nested([torch.cat([p, r]) for p, r in zip(prompts, responses)]),
            "position_ids": nested([torch.arange(len(p) + len(r)) for p, r in zip(prompts, responses)]),
            "prompts": nested(prompts), "responses": nested(responses),
            "response_mask": nested(masks), "loss_mask": nested(masks),
            "advantages": nested([torch.full((n,), a) for n, a in zip(response_lens, [1.0, -0.5, 0.7, -1.2])]),
            **fields}, non_tensor_dict=non_tensor)

    def step(data):
        model.zero_grad()
        out = engine.forward_backward_batch(data, loss_function=functools.partial(losses.ppo_loss, config=actor_config))
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return grads, {k: m.aggregate() for k, m in out["metrics"].items()}

    with torch.no_grad():  # verl's order: the old-log-prob pass, converted as the trainer converts it
        _, out = engine.forward_step(mini_batch(), loss_function=None, forward_only=True)
    old = response_from_nested(out["model_output"]["log_probs"], mini_batch()["response_mask"])
    micro_batches, _ = fsdp_engine.prepare_micro_batches(data=mini_batch(mark=True), dp_group=dist.group.WORLD)
    verl_grads, verl_metrics = step(mini_batch(old_log_probs=old))
    ours, our_metrics = step(mini_batch(mark=True))
    stale, _ = step(mini_batch(old_log_probs=nested([t - 0.3 for t in old.unbind()])))  # older weights' values
    trained = torch.cat([v[m.bool()] for v, m in zip(old.unbind(), masks)])
    print("MICRO_BATCHES", len(micro_batches), all(tu.get(mb, OLD_FROM_UPDATE) for mb in micro_batches))
    print("GRAD_DIFF", (verl_grads - ours).abs().max().item(), "STALE_DIFF", (stale - ours).abs().max().item(),
          "SCALE", ours.abs().max().item())
    print("PPO_KL", our_metrics["actor/ppo_kl"], verl_metrics["actor/ppo_kl"], "CLIPFRAC", our_metrics["actor/pg_clipfrac"])
    print("ENTROPY", our_metrics[ENTROPY_ESTIMATE], -trained.mean().item(), ENTROPY_ESTIMATE in verl_metrics)
    try:
        step(mini_batch())
    except KeyError as err:
        print("UNMARKED_WITHOUT_OLD", err)
    try:
        step(mini_batch(mark=True, old_log_probs=old))
    except ValueError as err:
        print("MARKED_WITH_OLD", err)
"""))


@pytest.mark.slow
def test_the_update_from_its_own_forward_has_verls_gradient_after_the_pass():
    lines = dict(parts for line in run_child(ENGINE_STEP, *smoke_overrides()).splitlines()
                 if len(parts := line.split(maxsplit=1)) == 2 and parts[0].isupper()
                 and parts[0].replace("_", "").isalpha())  # the script's "KEY values" lines
    micro_batches, marked = lines["MICRO_BATCHES"].split()
    assert int(micro_batches) >= 2 and marked == "True"  # the mark reaches every micro batch of verl's split
    grad_diff, _, stale_diff, _, scale = lines["GRAD_DIFF"].split()
    assert float(scale) > 1e-3
    assert float(grad_diff) <= 1e-6 * float(scale)  # the same gradient as verl's pass-then-update
    assert float(stale_diff) > 1e-2 * float(scale)  # negative control: the test sees wrong old log-probs
    ours_kl, verl_kl, _, clipfrac = lines["PPO_KL"].split()
    assert float(ours_kl) == 0.0 and abs(float(verl_kl)) < 1e-6 and float(clipfrac) == 0.0
    estimate, expected, in_verls = lines["ENTROPY"].split()
    assert float(estimate) == pytest.approx(float(expected), rel=1e-5) and in_verls == "False"
    assert "old_log_probs" in lines["UNMARKED_WITHOUT_OLD"]  # unmarked, nothing is invented: verl's own error
    assert "already has old_log_probs" in lines["MARKED_WITH_OLD"]


TRAINER_STEP = textwrap.dedent("""
    import os, sys, types
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.on_policy_update"
    import verl  # imports verl_ext.patches.on_policy_update, whose patches wait for verl's modules
    from transfer_queue.metadata import KVBatchMeta
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl_ext.launch.preflight import compose

    OLD_FROM_UPDATE = sys.argv[2]  # passed in: the test without the patches must not import verl_ext.patches.on_policy_update

    class PassRan(Exception):
        pass

    def compute_log_prob(batch):
        raise PassRan(len(batch))

    updates = []
    def update_actor(batch):
        updates.append(batch.extra_info.get(OLD_FROM_UPDATE, False))
        return {"metrics": {"mfu": [0.0], "pg_loss": [0.0]}}

    trainer = get_trainer_cls("sync").__new__(get_trainer_cls("sync"))  # verl's sync trainer, not initialised
    trainer.config = compose("ppo_trainer", sys.argv[3:-1])
    trainer.actor_rollout_wg = types.SimpleNamespace(compute_log_prob=compute_log_prob, update_actor=update_actor)
    batch = lambda n: KVBatchMeta(keys=[str(i) for i in range(n)], tags=[{}] * n, partition_id="train")

    for size in (64, 64, 96, 64):  # one mini-batch (x2), two mini-batches, one again
        step = batch(size)
        try:
            skipped = trainer._compute_old_log_prob(step, metrics={}) is step
        except PassRan:
            skipped = False
        trainer._update_actor(step, metrics={})
        print("STEP", size, skipped, updates[-1])
    trainer._update_actor(batch(64), metrics={})  # an update whose step decided nothing carries no mark
    print("UNDECIDED", updates[-1])
""")


@pytest.mark.slow
def test_the_trainer_skips_the_pass_only_for_one_mini_batch_and_marks_that_update():
    out = run_child(TRAINER_STEP, on_policy_update.OLD_FROM_UPDATE, *smoke_overrides())
    steps = [line.split()[1:] for line in out.splitlines() if line.startswith("STEP ")]
    assert steps == [["64", "True", "True"], ["64", "True", "True"], ["96", "False", "False"],
                     ["64", "True", "True"]]
    assert "UNDECIDED False" in out
    reports = [line for line in out.splitlines() if line.startswith("[verl-ext] old")]
    assert reports == [f"{on_policy_update.SKIP_MARK} ({on_policy_update.SKIP_WHY})",
                       f"{on_policy_update.KEEP_MARK}: 96 samples make 2 mini-batches of 64 "
                       "(actor_rollout_ref.actor.ppo_mini_batch_size=16 x rollout.n=4): the later ones train on "
                       "older weights",
                       f"{on_policy_update.SKIP_MARK} ({on_policy_update.SKIP_WHY})"]  # printed when it changes


@pytest.mark.slow
def test_with_lora_and_kl_the_first_step_keeps_the_pass_so_the_reference_pass_is_not_the_first_forward():
    out = run_child(TRAINER_STEP, on_policy_update.OLD_FROM_UPDATE, *smoke_overrides(KL_LOSS_COEF="0.01"))
    steps = [line.split()[1:] for line in out.splitlines() if line.startswith("STEP ")]
    assert steps == [["64", "False", "False"], ["64", "True", "True"], ["96", "False", "False"],
                     ["64", "True", "True"]]


def test_without_the_module_verls_trainer_runs_its_pass():
    script = TRAINER_STEP.replace('os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.on_policy_update"',
                                  'os.environ.pop("VERL_USE_EXTERNAL_MODULES", None)')
    steps = [line.split()[1:] for line in run_child(script, on_policy_update.OLD_FROM_UPDATE, *smoke_overrides()).splitlines()
             if line.startswith("STEP ")]
    assert steps == [[size, "False", "False"] for size in ("64", "64", "96", "64")]


def test_train_script_loads_the_module_in_every_ray_worker_with_auto_only():
    assert runtime_env_modules(OLD_LOG_PROB_PASS="auto", GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all") \
        == "verl_ext.patches.vllm_worker_fork,verl_ext.patches.on_policy_update"
    assert runtime_env_modules(OLD_LOG_PROB_PASS="auto", ROLLOUT_BACKEND="sglang", GC_FREEZE="0", ACTOR_FSDP="on",
                               LM_HEAD_POSITIONS="all",
                               SGLANG_IS_FLASHINFER_AVAILABLE="true") == "verl_ext.patches.on_policy_update"
    assert runtime_env_modules(OLD_LOG_PROB_PASS="auto", ROLLOUT_WORKER_START="spawn", GC_FREEZE="0", ACTOR_FSDP="on",
                               LM_HEAD_POSITIONS="all",
                               VERL_USE_EXTERNAL_MODULES="my.mod") == "my.mod,verl_ext.patches.on_policy_update"
    assert runtime_env_modules(OLD_LOG_PROB_PASS="always", GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all") == "verl_ext.patches.vllm_worker_fork"
    assert runtime_env_modules(OLD_LOG_PROB_PASS="always", ROLLOUT_WORKER_START="spawn", GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all") is None
    bad = subprocess.run(["bash", str(TESTS.parent / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, "OLD_LOG_PROB_PASS": "skip"})
    assert bad.returncode == 2 and "OLD_LOG_PROB_PASS must be one of: auto always; got 'skip'" in bad.stderr


def test_importing_the_module_patches_nothing_until_installed():
    import verl.workers.utils.losses as losses

    from verl_ext.patches import import_hook

    assert on_policy_update.TRAINER_MODULE not in import_hook.pending()
    assert not getattr(losses, "_verl_ext_on_policy_update", False)  # this test process keeps verl's own loss


def test_the_entropy_estimate_is_the_token_mean_over_all_ranks():
    """Two data-parallel ranks with different token counts: verl sums a metric over micro batches and averages it
    over ranks (Metric.aggregate_dp), so each rank reports its share of the global token mean, as verl's loss does."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss

    config = omega_conf_to_dataclass(compose("ppo_trainer", smoke_overrides()).actor_rollout_ref.actor)
    loss = on_policy_update._old_log_probs_from_forward(ppo_loss)  # wrapped here only: nothing is patched
    nested = lambda ts: torch.nested.as_nested_tensor(ts, layout=torch.jagged)  # noqa: E731
    generator = torch.Generator().manual_seed(0)
    ranks = {0: ([3, 2], [4, 1]), 1: ([2], [6])}  # prompt and response lengths per sample, per rank
    everything, metrics = [], []
    for prompt_lens, response_lens in ranks.values():
        log_probs = [-torch.rand(p + r, generator=generator) for p, r in zip(prompt_lens, response_lens)]
        everything += [lp[p - 1:p - 1 + r] for lp, p, r in zip(log_probs, prompt_lens, response_lens)]
        data = tu.get_tensordict({
            "prompts": nested([torch.zeros(p, dtype=torch.long) for p in prompt_lens]),
            "responses": nested([torch.zeros(r, dtype=torch.long) for r in response_lens]),
            "response_mask": nested([torch.ones(r, dtype=torch.long) for r in response_lens]),
            "advantages": nested([torch.ones(r) for r in response_lens]),
        }, non_tensor_dict={"dp_size": 2, "batch_num_tokens": 11, "global_batch_size": 3,
                            on_policy_update.OLD_FROM_UPDATE: True})
        _, rank_metrics = loss(config, {"log_probs": nested(log_probs)}, data)
        metrics.append(rank_metrics[on_policy_update.ENTROPY_ESTIMATE])
    expected = -torch.cat(everything).mean().item()
    assert Metric.aggregate_dp(metrics) == pytest.approx(expected, rel=1e-6)


def test_a_verl_without_the_patched_names_keeps_its_pass_and_says_why(capsys):
    trainer_base = type(sys)("stand_in_trainer_base")
    trainer_base.PPOTrainer = type("PPOTrainer", (), {"_update_actor": lambda self, batch, metrics: batch})
    assert on_policy_update.patch_trainer(trainer_base) is False
    assert not hasattr(trainer_base.PPOTrainer, "_verl_ext_on_policy_update")
    err = capsys.readouterr().err
    assert "verl has no verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_old_log_prob" in err
    assert "the old-log-prob pass runs every step" in err

