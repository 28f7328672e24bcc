"""Per-step learning-signal and collapse metrics in verl's step metrics, and their console alarms.

verl 0.9.1's v1 trainer keeps the reward's extra fields out of its step metrics. ``install()`` wraps
``PPOTrainer._compute_metrics`` (trainer/ppo/v1/trainer_base.py), which every v1 trainer calls once per step,
after the update and before ``logger.log``, while the step's samples are still in TransferQueue. After verl's
own metrics it reads each sample's ``uid`` (the GRPO group), ``rm_scores``, the reward extras
(``extra_fields['reward_extra_info']``: ``format_ok``, ``valid``, ``answer_id``, ``game``) and ``extra_info``
(the case), and adds ``verl_ext.group_stats.step_metrics`` to the step's metrics, so they reach the ``file``
logger's metrics.jsonl, the console line and W&B; then ``verl_ext.signal_alarm`` prints its warnings.

The metrics never stop training: any error is caught, counted in ``signal/errors`` and printed once with its
traceback. Only ``SIGNAL_CHECK=abort`` stops a run (``NoLearningSignal``, raised after the step's metrics are
logged). Loaded by ``verl_ext.patches.step_signal`` through ``VERL_USE_EXTERNAL_MODULES`` (the train scripts do
unless ``SIGNAL_CHECK=off``); importing this module changes nothing.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import traceback
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from verl_ext.config_path import config_at
from verl_ext.group_stats import TACTIC_FIELDS, VALUE_FIELDS, Reply, step_metrics
from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named
from verl_ext.signal_alarm import MARK, MODE_VAR, MODES, NoLearningSignal, SignalAlarm

TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
FIELDS = ["uid", "rm_scores", "extra_fields", "extra_info"]
CAP_KEY, AT_CAP_KEY = "signal/response_cap", "signal/replies_at_cap"
_PATCHED = "_verl_ext_step_signal"
_ALARM = "_verl_ext_signal_alarm"
_SESSION_KEY = re.compile(r"^(?P<session>.+_\d+)_\d+$")  # verl's key {uid}_{session}_{output index}
_errors = 0


def patch_trainer(trainer_base: ModuleType) -> bool:
    """Wrap ``trainer_base.PPOTrainer._compute_metrics``; False (and a line saying so) when verl lacks it."""
    trainer_cls = getattr(trainer_base, "PPOTrainer", None)
    if getattr(trainer_cls, _PATCHED, False):
        return True
    compute_metrics = getattr(trainer_cls, "_compute_metrics", None)
    if compute_metrics is None or not hasattr(trainer_base, "tq"):
        print(f"{MARK}: verl has no {TRAINER_MODULE}.PPOTrainer._compute_metrics or tq (not verl 0.9.1?); no "
              "signal/collapse metrics", file=sys.stderr, flush=True)
        return False

    @functools.wraps(compute_metrics)
    def _compute_metrics(self: Any, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int) \
            -> Any:
        result = compute_metrics(self, batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        reason = add_step_signal(self, trainer_base.tq, batch, metrics, global_steps)
        if reason:  # the step's console line and metrics.jsonl record must show what stopped the run
            dapo_counts = getattr(trainer_base, "DAPO_FILTERED_REWARD_COUNTS_KEY", None)  # fit pops it before logging
            try:
                self.logger.log(data={k: v for k, v in metrics.items() if k != dapo_counts}, step=global_steps)
            except Exception as err:
                print(f"{MARK}: could not log step {global_steps}'s metrics before stopping: {err!r}",
                      file=sys.stderr, flush=True)
            raise NoLearningSignal(reason)
        return result

    trainer_cls._compute_metrics = _compute_metrics
    setattr(trainer_cls, _PATCHED, True)
    return True


def add_step_signal(trainer: Any, tq: Any, batch: Any, metrics: dict, step: int) -> str:
    """Add the step's signal/collapse metrics and alarms to ``metrics``, print due warnings, and return why the
    run must stop ("" to go on). Never raises."""
    global _errors
    try:
        alarm = getattr(trainer, _ALARM, None)
        if alarm is None:
            alarm = SignalAlarm(mode=read_mode())
            setattr(trainer, _ALARM, alarm)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
        found = step_metrics(replies_of(batch, data))
        found.update(cap_metrics(metrics, response_cap(trainer)))
        lines, flags = alarm.observe(step, found)
        metrics.update(found)
        metrics.update(flags)
        for line in lines:
            print(line, flush=True)
        return alarm.should_abort(step, found)
    except Exception:  # a metric must never take training down
        _errors += 1
        metrics["signal/errors"] = float(_errors)
        if _errors == 1:
            print(f"{MARK}: the signal/collapse metrics failed at step {step} and are left out where they fail "
                  f"(counted in signal/errors):\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return ""


def response_cap(trainer: Any) -> int | None:
    """The rollout's response budget in tokens (``actor_rollout_ref.rollout.response_length``, which defaults to
    ``data.max_response_length``); None when the config has neither."""
    config = getattr(trainer, "config", None)
    for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):
        cap = _number(config_at(config, *path))
        if cap is not None and cap > 0:
            return int(cap)
    return None


def cap_metrics(metrics: Mapping[str, Any], cap: int | None) -> dict[str, float]:
    """The response cap and the share of the step's replies that reached it, from verl's own length metrics.

    verl 0.9.1's ``response_length/clip_ratio`` counts the replies as long as the batch's padded width, and the
    agent loop pads to the step's longest reply, not to the cap: with 11-token replies under a 32-token cap it
    read 0.45-0.56 (docs/runs/2026-11-27-h200x2-smollm2-split-tactical/). It is the share at the cap only when the
    longest reply reached the cap; otherwise no reply did."""
    longest = _number(metrics.get("response_length/max"))
    share = _number(metrics.get("response_length/clip_ratio"))
    if cap is None or longest is None or share is None:
        return {}
    return {CAP_KEY: float(cap), AT_CAP_KEY: share if longest >= cap else 0.0}


def read_mode() -> str:
    """``VERL_EXT_SIGNAL_CHECK`` (warn by default); an unknown value is named and read as warn."""
    mode = os.environ.get(MODE_VAR, "warn").strip().lower() or "warn"
    if mode not in MODES:
        print(f"{MARK}: {MODE_VAR}={mode!r} is not one of {', '.join(MODES)}; warning only", file=sys.stderr,
              flush=True)
        return "warn"
    return mode


def replies_of(batch: Any, data: Any) -> list[Reply]:
    """The step's samples as ``Reply``s: padding rows and the extra outputs of one session left out."""
    keys = list(batch.keys)
    tags = list(getattr(batch, "tags", None) or [{}] * len(keys))
    uids = _as_list(data["uid"]) if "uid" in data.keys() else [_group_of_key(key) for key in keys]
    rewards = _rewards(data["rm_scores"]) if "rm_scores" in data.keys() else [math.nan] * len(keys)
    extras = _as_list(data["extra_fields"]) if "extra_fields" in data.keys() else [{}] * len(keys)
    infos = _as_list(data["extra_info"]) if "extra_info" in data.keys() else [{}] * len(keys)
    replies, sessions = [], set()
    for key, tag, uid, reward, extra, info in zip(keys, tags, uids, rewards, extras, infos, strict=True):
        match = _SESSION_KEY.match(str(key))
        session = match.group("session") if match else key
        if (isinstance(tag, Mapping) and tag.get("is_padding", False)) or session in sessions:
            continue
        sessions.add(session)
        scored = extra.get("reward_extra_info") if isinstance(extra, Mapping) else None
        scored = scored if isinstance(scored, Mapping) else {}
        if math.isnan(reward):
            reward = _number(scored.get("score"))
        replies.append(Reply(group=str(uid), reward=reward, answer=_answer(scored),
                             format_ok=_number(scored.get("format_ok")), valid=_number(scored.get("valid")),
                             case=str(info.get("case", "")) if isinstance(info, Mapping) else "",
                             **{key: _number(scored.get(key)) for key in TACTIC_FIELDS + VALUE_FIELDS},
                             opening=_number(scored.get("game")) == 1.0))
    return replies


def _answer(scored: Mapping[str, Any]) -> float | None:
    """The reply's canonical answer id; for a full game its opening reply's (``verl_ext.reward.NOT_AN_OPENING``,
    negative, where the policy did not make the game's first decision: None); None for a reward without one."""
    answer = _number(scored.get("answer_id"))
    if answer is None or not math.isfinite(answer):
        return None
    if _number(scored.get("game")) == 1.0 and answer < 0:
        return None
    return answer


def _rewards(scores: Any) -> list[float]:
    """Each sample's reward: its token-level scores summed (verl's GRPO outcome reward)."""
    if getattr(scores, "is_nested", False):
        scores = scores.to_padded_tensor(padding=0.0)
    return [float(value) for value in scores.float().sum(dim=-1).tolist()]


def _as_list(values: Any) -> list[Any]:
    # TransferQueue hands non-tensor fields back as a NonTensorStack, a numpy array or a list (trainer_base.py)
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _group_of_key(key: Any) -> str:
    return str(key).rsplit("_", 2)[0]


def install() -> None:
    """Patch verl's v1 trainer now where imported, else as soon as it is."""
    after_import(TRAINER_MODULE, patch_trainer)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
