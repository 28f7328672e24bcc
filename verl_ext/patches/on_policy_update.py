"""Old log-probs from the update's own forward when the update is on-policy (``OLD_LOG_PROB_PASS=auto``).

Before every actor update verl 0.9.1's v1 trainer runs the actor over the whole batch, without gradients, for the
old log-probs of PPO's ratio (``PPOTrainer._compute_old_log_prob``, trainer/ppo/v1/trainer_base.py:1634-1690).
When the update is one mini-batch for one epoch, that pass sees the same weights as the update's own forward: the
old log-probs *are* the update's log-probs, the ratio is 1, nothing is clipped and the gradient is
``-A * grad log pi``. TRL's GRPOTrainer does exactly this with ``num_iterations=1`` (the old log-probs are the
per-token log-probs, detached). ``install()`` patches verl so that, in that case:

- the trainer skips the pass and tells the update so (``OLD_FROM_UPDATE`` in the batch's ``extra_info``, which
  verl hands to every micro batch as non-tensor data);
- the actor's PPO loss (``verl.workers.utils.losses.ppo_loss``) takes the old log-probs from the forward it is
  given, detached, cut to the responses as the trainer cuts the pass's (verl's ``response_from_nested``; here
  ``response_values``, the same values without its per-sample reads from the GPU), and then runs verl's loss
  unchanged. It also reports ``actor/entropy_estimate``: the mean ``-log pi`` of the sampled
  response tokens, a one-sample estimate of ``actor/entropy`` (which came from the skipped pass).

The pass stays whenever the old log-probs are needed apart from the ratio or are older than the update's weights
(``pass_needed`` names the reason): several mini-batches or epochs, verl's bypass mode, rollout log-probs (rollout
correction and its metrics compare them with the actor's), the KL penalty in the reward, distillation, verl's
asynchronous trainers (their pass may restore older weights: decoupled PPO); and, with
LoRA and a KL loss, until the first update (verl's reference pass must not be the actor's first forward).
Differences from verl's pass are numerical only: the pass runs in eval mode under its own micro batching, so its
ratio is 1 up to rounding (and up to LoRA dropout, which only the update applies).

Importing this module changes nothing; ``install()`` does. The train scripts load ``verl_ext.patches.on_policy_update``
(which calls it) in every process that imports verl through ``VERL_USE_EXTERNAL_MODULES`` (the driver, the
TaskRunner and every Ray worker); the patches wait for verl's modules to be imported (``verl_ext.patches.import_hook``).
verl's legacy trainer (``ray_trainer.py``) is not patched and keeps its pass.
"""

from __future__ import annotations

import functools
import importlib
import math
import sys
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.response_cut import LOSSES_MODULE, response_values
from verl_ext.patches.registry import apply_if_named

TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
OLD_FROM_UPDATE = "verl_ext_old_log_probs_from_update"
ENTROPY_ESTIMATE = "actor/entropy_estimate"
SKIP_MARK = "[verl-ext] old log-probs from the update's forward: the actor's old-log-prob pass is skipped"
KEEP_MARK = "[verl-ext] old log-prob pass kept"
# said with the skip: users who set DAPO's clip-higher expect it to act (docs/runs/2026-11-29-cpu-clip-share/)
SKIP_WHY = ("one mini-batch, one epoch: the PPO ratio is 1, so no clip bound, clip_ratio_high included, cuts a "
            "gradient")
_PATCHED = "_verl_ext_on_policy_update"
_DECISION = "_verl_ext_old_from_update"
_REPORTED = "_verl_ext_old_log_prob_report"
_UPDATED = "_verl_ext_actor_updated"


def pass_needed(config: Any, batch_size: int, first_update: bool = False) -> str:
    """Why the actor's old-log-prob pass must run for a batch of ``batch_size`` samples ("" when it need not).

    ``config`` is the trainer's composed ``ppo_trainer`` config; ``first_update``: this trainer has not updated the
    actor yet (in this process).
    """
    actor, rollout, model = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, \
        config.actor_rollout_ref.model
    mode = (config.trainer.get("v1") or {}).get("trainer_mode", "sync")
    if mode != "sync":
        return (f"trainer.v1.trainer_mode={mode}: the asynchronous trainers keep their old log-probs from older "
                "weights (decoupled PPO)")
    if first_update and actor.get("use_kl_loss", False) and _ref_in_actor(model):
        return ("the first update with LoRA and KL: verl's reference pass (the actor with its adapter disabled) would "
                "be the actor's first forward, and FSDP2's first backward then fails "
                "(tests/test_fsdp2_lora_first_forward.py); the pass runs until the first update")
    epochs = int(actor.ppo_epochs)
    if epochs != 1:
        return f"actor_rollout_ref.actor.ppo_epochs={epochs}: the later epochs train on older weights"
    mini_batch = int(actor.ppo_mini_batch_size) * int(rollout.n)
    if batch_size > mini_batch:
        return (f"{batch_size} samples make {math.ceil(batch_size / mini_batch)} mini-batches of {mini_batch} "
                f"(actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} x "
                f"rollout.n={rollout.n}): the later ones train on older weights")
    correction = config.algorithm.get("rollout_correction") or {}
    if correction.get("bypass_mode", False):
        return "algorithm.rollout_correction.bypass_mode=True: verl takes the rollout's log-probs instead"
    if rollout.get("calculate_log_probs", False):
        return ("actor_rollout_ref.rollout.calculate_log_probs=True: rollout correction and its metrics compare the "
                "rollout's log-probs with the pass's")
    if config.algorithm.get("use_kl_in_reward", False):
        return "algorithm.use_kl_in_reward=True: the reward's KL penalty reads the old log-probs"
    distillation = config.get("distillation") or {}
    if distillation.get("enabled", False):
        return "distillation.enabled=True: the distillation loss is not patched"
    return ""


def _ref_in_actor(model: Any) -> bool:
    """verl's rule for a reference policy that is the actor itself (trainer_base.py:234-237)."""
    rank = (model.get("lora") or {}).get("rank", 0) or model.get("lora_rank", 0) or 0
    return int(rank) > 0 or model.get("lora_adapter_path") is not None


def patch_trainer(trainer_base: ModuleType) -> bool:
    """Make ``trainer_base.PPOTrainer`` skip the old-log-prob pass when ``pass_needed`` finds no reason.

    Returns False, changing nothing, when verl lacks what 0.9.1 has here or in the actor's loss (the workers would
    not understand the mark): the pass then runs every step.
    """
    trainer_cls = getattr(trainer_base, "PPOTrainer", None)
    if getattr(trainer_cls, _PATCHED, False):
        return True
    missing = _missing_verl_names(trainer_cls)
    if missing:
        print(f"[verl-ext] OLD_LOG_PROB_PASS=auto: verl has no {', '.join(missing)} (not verl 0.9.1?); the old-log-prob "
              "pass runs every step", file=sys.stderr, flush=True)
        return False
    compute_old_log_prob, update_actor = trainer_cls._compute_old_log_prob, trainer_cls._update_actor

    @functools.wraps(compute_old_log_prob)
    def _compute_old_log_prob(self: Any, batch: Any, metrics: dict) -> Any:
        reason = pass_needed(self.config, len(batch), first_update=not getattr(self, _UPDATED, False))
        setattr(self, _DECISION, not reason)
        _report_once(self, reason)
        return compute_old_log_prob(self, batch, metrics=metrics) if reason else batch

    @functools.wraps(update_actor)
    def _update_actor(self: Any, batch: Any, metrics: dict) -> Any:
        from_update = getattr(self, _DECISION, False)
        setattr(self, _DECISION, False)  # one decision per step: a later update without a pass gets no mark
        if from_update:
            batch.extra_info[OLD_FROM_UPDATE] = True
        else:
            batch.extra_info.pop(OLD_FROM_UPDATE, None)
        output = update_actor(self, batch, metrics=metrics)
        setattr(self, _UPDATED, True)
        return output

    trainer_cls._compute_old_log_prob = _compute_old_log_prob
    trainer_cls._update_actor = _update_actor
    setattr(trainer_cls, _PATCHED, True)
    return True


def _missing_verl_names(trainer_cls: Any) -> list[str]:
    """What the two patches use that this verl lacks (empty for verl 0.9.1)."""
    missing = [f"{TRAINER_MODULE}.PPOTrainer.{name}" for name in ("_compute_old_log_prob", "_update_actor")
               if not hasattr(trainer_cls, name)]
    try:
        found = hasattr(importlib.import_module(LOSSES_MODULE), "ppo_loss")
    except ImportError:
        found = False
    if not found:
        missing.append(f"{LOSSES_MODULE}.ppo_loss")
    return missing


def _report_once(trainer: Any, reason: str) -> None:
    """Print the decision on the first step and whenever it changes (a batch size can change mid-run)."""
    if getattr(trainer, _REPORTED, None) == reason:
        return
    setattr(trainer, _REPORTED, reason)
    print(f"{KEEP_MARK}: {reason}" if reason else f"{SKIP_MARK} ({SKIP_WHY})", flush=True)


def patch_losses(losses: ModuleType) -> None:
    """Wrap ``losses.ppo_loss`` so a micro batch marked ``OLD_FROM_UPDATE`` gets its old log-probs from the forward."""
    if getattr(losses, _PATCHED, False):
        return
    losses.ppo_loss = _old_log_probs_from_forward(losses.ppo_loss)
    setattr(losses, _PATCHED, True)


def _old_log_probs_from_forward(ppo_loss: Callable[..., Any]) -> Callable[..., Any]:
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import AggregationType, Metric

    @functools.wraps(ppo_loss)
    def loss_with_old_log_probs_from_forward(config: Any, model_output: dict, data: Any, dp_group: Any = None) \
            -> tuple[Any, dict]:
        if not tu.get_non_tensor_data(data=data, key=OLD_FROM_UPDATE, default=False):
            return ppo_loss(config, model_output, data, dp_group)
        if "old_log_probs" in data.keys():
            raise ValueError(f"{OLD_FROM_UPDATE} is set but the micro batch already has old_log_probs: the trainer "
                             "ran the old-log-prob pass and marked the batch too")
        log_probs = model_output.get("log_probs")
        if log_probs is None:
            raise ValueError(f"{OLD_FROM_UPDATE} is set but the forward returned no log_probs (distillation only?)")
        data = data.copy()  # shallow: the caller's micro batch keeps its fields
        old_log_probs = response_values(log_probs.detach(), data["response_mask"])
        data["old_log_probs"] = old_log_probs
        loss, metrics = ppo_loss(config, model_output, data, dp_group)
        mask = data["response_mask"].values()  # multi-turn masks observations
        sampled_sum = (old_log_probs.values().float() * mask).sum()  # no boolean indexing: no GPU sync per micro batch
        batch_tokens = tu.get_non_tensor_data(data=data, key="batch_num_tokens", default=None)
        dp_size = tu.get_non_tensor_data(data=data, key="dp_size", default=1) or 1
        if batch_tokens:  # verl's token-mean: summed over micro batches, averaged over ranks (Metric.aggregate_dp)
            metrics[ENTROPY_ESTIMATE] = Metric(value=-sampled_sum * dp_size / batch_tokens,
                                               aggregation=AggregationType.SUM)
        elif count := int(mask.sum()):
            metrics[ENTROPY_ESTIMATE] = Metric(value=-sampled_sum / count, aggregation=AggregationType.MEAN)
        return loss, metrics

    return loss_with_old_log_probs_from_forward


def install() -> None:
    """Patch verl's trainer and actor loss now where imported, else as soon as they are."""
    after_import(TRAINER_MODULE, patch_trainer)
    after_import(LOSSES_MODULE, patch_losses)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
