"""Credit per move in whole games (``data.env.<env>.game.move_credit``, default 0: off).

Why: a whole game earns one reward, and GRPO gives every reply of the game the same advantage, so a lost game blames
its good moves as much as the one that lost it. In tic_tac_toe (small enough to value exactly) the game record says,
per reply, whether it kept the position's value under best play and played the one-ply tactic where there was one
(``GameRecord.reply_values``, ``games.match.credit_target_met``); a tabular model of the runs' training put credit
per move ~2 points of wins against random above whole-game credit at step 100
(docs/runs/2026-11-29-cpu-board-credit-model/). On the GPU the value alone taught the value (arena 74.3 -> 85.1 %)
but not more wins (docs/runs/2026-11-29-h200x2-boardgames-credit-100/). Each reply of a row whose record carries
``move_credit`` w > 0 gets ``w * (v - mean) / (std + 1e-6)`` added to its tokens' advantage, the mean and std (ddof
1) over the reply values of the row's GRPO group (the rows of one uid); a group whose replies all agree gets nothing.

Where: verl 0.9.1's v1 trainer computes advantages in ``PPOTrainer._compute_advantage``
(trainer/ppo/v1/trainer_base.py): it reads a few fields from TransferQueue (not the game records), calls
``compute_advantage_for_multi_trajectories`` (trainer/ppo/v1/utils.py), which for GRPO broadcasts one scalar per
session over its response tokens, and writes the advantages back. No registered estimator sees the records, and a
per-token advantage made inside verl's estimator would be flattened by that broadcast. ``install()`` wraps
``_compute_advantage``. On a trainer's first call it decides from the trainer's config whether any env asks for
credit (``data.env.<env>.game.move_credit`` above 0, parsed as the env parses it: ``GameSettings``), keeps the
answer on the trainer and says it once on stderr. While none does (the default), verl's method runs alone: no
TransferQueue read of the patch's own. When one does, each step first reads the batch's records (the agent loop's
``extra_fields``) and, only when a row asks for credit, wraps the module's ``compute_advantage_for_multi_trajectories``
for that call to add the credit to its result, which verl then writes back. A reply is a run of 1s in the row's
``response_mask`` (the agent loop masks prompts, corrections and the turn-end token it adds); a row whose runs do not
match its reply values in number is left as verl made it and counted (``move_credit/misaligned``). Rows without
credit keep verl's numbers bit for bit. Loaded through ``VERL_USE_EXTERNAL_MODULES`` by the train scripts; importing
it changes nothing.
"""

from __future__ import annotations

import contextvars
import functools
import math
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from verl_ext.config_path import config_at
from verl_ext.envs.config import from_mapping, to_plain
from verl_ext.envs.game_settings import MAX_MOVE_CREDIT, GameSettings
from verl_ext.games import RECORD_FIELD
from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
MARK = "[verl-ext] move credit"
_PATCHED = "_verl_ext_move_credit"
# on a trainer instance: its CreditConfig, decided from its config on the first _compute_advantage
_DECIDED = "_verl_ext_move_credit_config"
# a game's replies are bounded by its moves and retries; a record claiming more is not one the agent loop wrote
MAX_REPLIES = 512
# the plan and metrics of the step whose advantages are being computed (set only around that call)
_plan: contextvars.ContextVar[tuple[CreditPlan, dict] | None] = contextvars.ContextVar("verl_ext_move_credit",
                                                                                    default=None)
_errors = 0


@dataclass(frozen=True)
class CreditPlan:
    """Per row of a batch (TransferQueue's key order): the credit weight and the reply values (None: no credit)."""

    uids: list[str]
    weights: list[float]
    values: list[list[int] | None]


@dataclass(frozen=True)
class CreditConfig:
    """What a trainer's config asks for: ``game.move_credit`` per env that sets it above 0, and the game sections
    that could not be read (no credit for those)."""

    weights: dict[str, float]
    unreadable: tuple[str, ...] = ()

    @property
    def on(self) -> bool:
        return bool(self.weights)

    def describe(self) -> str:
        """One line for the log: on (for which envs) or off, and any section not read."""
        if self.on:
            envs = ", ".join(f"{name} (game.move_credit {weight:g})" for name, weight in self.weights.items())
            line = f"on for {envs}: each step reads the batch's game records from TransferQueue"
        else:
            line = "off (no data.env.<env>.game.move_credit above 0): verl's advantages, no TransferQueue read"
        return line + "".join(f"; not read: {problem}" for problem in self.unreadable)


def credit_config(config: Any) -> CreditConfig:
    """The envs under ``config.data.env`` whose ``game.move_credit`` is above 0; none where the section is absent,
    not a mapping, or (said in ``unreadable``) refused by the env's own parse."""
    try:
        section = to_plain(config_at(config, "data", "env"))
    except Exception as err:  # noqa: BLE001 - e.g. an interpolation that does not resolve: no credit, said so
        return CreditConfig({}, (f"data.env: {err}",))
    if not isinstance(section, Mapping):
        return CreditConfig({})
    weights: dict[str, float] = {}
    unreadable: list[str] = []
    for name, settings in section.items():
        game = settings.get("game") if isinstance(settings, Mapping) else None
        if game is None:
            continue
        try:  # parsed and validated as the env parses its game section
            weight = from_mapping(GameSettings, game, f"data.env.{name}.game").move_credit
        except Exception as err:  # noqa: BLE001 - the dataset refuses such a config; here it only means no credit
            unreadable.append(str(err))
            continue
        if weight > 0:
            weights[str(name)] = weight
    return CreditConfig(weights, tuple(unreadable))


def credit_for(trainer: Any) -> CreditConfig:
    """The trainer's ``CreditConfig``: decided from ``trainer.config`` on the first call (and said on stderr),
    then kept on the trainer."""
    decided = getattr(trainer, _DECIDED, None)
    if not isinstance(decided, CreditConfig):
        decided = credit_config(getattr(trainer, "config", None))
        setattr(trainer, _DECIDED, decided)
        print(f"{MARK}: {decided.describe()}", file=sys.stderr, flush=True)
    return decided


def reply_spans(mask: Any) -> list[tuple[int, int]]:
    """The ``[start, end)`` token ranges of the runs of 1s in one row's response mask (a sequence or a 1-D tensor):
    the policy's replies."""
    import torch

    bits = torch.as_tensor(mask).reshape(-1).ne(0).to(torch.int8)
    edges = torch.diff(bits, prepend=bits.new_zeros(1), append=bits.new_zeros(1))
    starts = (edges == 1).nonzero().flatten().tolist()
    ends = (edges == -1).nonzero().flatten().tolist()
    return list(zip(starts, ends))


def credit_of(record: Any) -> tuple[float, list[int] | None]:
    """A record's credit weight and reply values; (0, None) for anything but a well-formed record asking for it."""
    if not isinstance(record, Mapping):
        return 0.0, None
    weight, values = record.get("move_credit"), record.get("reply_values")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        return 0.0, None
    if not 0.0 < weight <= MAX_MOVE_CREDIT or not isinstance(values, list) or not values:
        return 0.0, None
    if len(values) > MAX_REPLIES or any(isinstance(v, bool) or v not in (0, 1) for v in values):
        return 0.0, None
    return float(weight), [int(v) for v in values]


def plan_of(uids: Sequence[Any], extra_fields: Sequence[Any]) -> CreditPlan | None:
    """The batch's credit plan from its rows' uids and agent-loop ``extra_fields``; None when no row asks for it."""
    weights, values = [], []
    for extra in extra_fields:
        record = extra.get(RECORD_FIELD) if isinstance(extra, Mapping) else None
        weight, row_values = credit_of(record)
        weights.append(weight)
        values.append(row_values)
    if not any(v is not None for v in values):
        return None
    return CreditPlan([str(u) for u in uids], weights, values)


def move_advantages(mask: Any, plan: CreditPlan) -> tuple[Any, dict[str, float]]:
    """The advantage to add per token (a tensor shaped as ``mask``, rows in the plan's order) and the step's metrics:
    replies credited, groups whose reply values differed, rows whose replies did not match their values."""
    import torch

    rows = mask.detach().cpu()
    if len(rows) != len(plan.values):
        raise ValueError(f"{len(rows)} rows of response_mask for a plan of {len(plan.values)}")
    spans: dict[int, list[tuple[int, int]]] = {}
    misaligned = 0
    for row, values in enumerate(plan.values):
        if values is None:
            continue
        found = reply_spans(rows[row])
        if len(found) != len(values):
            misaligned += 1
            continue
        spans[row] = found
    groups: dict[str, list[int]] = {}
    for row in spans:
        groups.setdefault(plan.uids[row], []).append(row)
    added = torch.zeros(mask.shape, dtype=torch.float32)
    credited = with_signal = 0
    for members in groups.values():
        flat = [v for row in members for v in plan.values[row]]
        if len(flat) < 2:
            continue
        mean = sum(flat) / len(flat)
        std = math.sqrt(sum((v - mean) ** 2 for v in flat) / (len(flat) - 1))
        if std == 0.0:
            continue
        with_signal += 1
        for row in members:
            for (start, end), value in zip(spans[row], plan.values[row], strict=True):
                added[row, start:end] = plan.weights[row] * (value - mean) / (std + 1e-6)
                credited += 1
    metrics = {"move_credit/replies": float(credited), "move_credit/groups": float(len(groups)),
               "move_credit/groups_with_signal": float(with_signal), "move_credit/misaligned": float(misaligned)}
    return added.to(mask.device), metrics


def add_move_credit(data: Any, plan: CreditPlan, metrics: dict) -> None:
    """Add the plan's credit to ``data.batch["advantages"]`` (and ``returns`` where verl made them the same)."""
    batch = data.batch
    advantages = batch["advantages"]
    added, found = move_advantages(batch["response_mask"], plan)
    credited = advantages + added.to(advantages.dtype)
    returns = batch.get("returns", None) if hasattr(batch, "get") else None
    if returns is not None and returns.shape == advantages.shape and bool((returns == advantages).all()):
        batch["returns"] = credited
    batch["advantages"] = credited
    metrics.update(found)


def _as_list(values: Any) -> list[Any]:
    # TransferQueue hands non-tensor fields back as a NonTensorStack, a numpy array or a list (trainer_base.py)
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _note_error(metrics: dict, where: str) -> None:
    global _errors
    _errors += 1
    metrics["move_credit/errors"] = float(_errors)
    if _errors == 1:
        print(f"{MARK}: {where} failed; this step keeps verl's advantages (counted in move_credit/errors):\n"
              f"{traceback.format_exc()}", file=sys.stderr, flush=True)


def patch_trainer(trainer_base: ModuleType) -> bool:
    """Wrap ``PPOTrainer._compute_advantage`` and the module's ``compute_advantage_for_multi_trajectories``;
    False (and a line saying so) when verl lacks them."""
    trainer_cls = getattr(trainer_base, "PPOTrainer", None)
    compute = getattr(trainer_cls, "_compute_advantage", None)
    multi = getattr(trainer_base, "compute_advantage_for_multi_trajectories", None)
    if compute is None or multi is None or not hasattr(trainer_base, "tq"):
        print(f"{MARK}: verl has no {TRAINER_MODULE}.PPOTrainer._compute_advantage, "
              "compute_advantage_for_multi_trajectories or tq (not verl 0.9.1?); game.move_credit has no effect",
              file=sys.stderr, flush=True)
        return False
    if getattr(trainer_cls, _PATCHED, False):
        return True

    @functools.wraps(compute)
    def _compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
        if not credit_for(self).on:
            return compute(self, batch, metrics)
        plan = None
        try:
            data = trainer_base.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                                select_fields=["uid", "extra_fields"])
            if "extra_fields" in data:
                uids = _as_list(data["uid"]) if "uid" in data else [None] * len(batch.keys)
                plan = plan_of(uids, _as_list(data["extra_fields"]))
        except Exception:  # noqa: BLE001 - a failed read leaves verl's advantages, never training down
            _note_error(metrics, "reading the game records")
        if plan is None:
            return compute(self, batch, metrics)
        token = _plan.set((plan, metrics))
        try:
            return compute(self, batch, metrics)
        finally:
            _plan.reset(token)

    @functools.wraps(multi)
    def with_move_credit(data: Any, *args: Any, **kwargs: Any) -> Any:
        out = multi(data, *args, **kwargs)
        current = _plan.get()
        if current is not None:
            plan, metrics = current
            try:
                add_move_credit(out, plan, metrics)
            except Exception:  # noqa: BLE001 - verl's advantages stand
                _note_error(metrics, "adding the credit")
        return out

    trainer_base.compute_advantage_for_multi_trajectories = with_move_credit
    trainer_cls._compute_advantage = _compute_advantage
    setattr(trainer_cls, _PATCHED, True)
    return True


def install() -> None:
    """Patch verl's v1 trainer when it is imported (verl's external-module hook calls this on import)."""
    after_import(TRAINER_MODULE, patch_trainer)


apply_if_named(__name__, install)
