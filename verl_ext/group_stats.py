"""Learning-signal and collapse statistics of one training step's GRPO groups (samples sharing verl's ``uid``).

``step_metrics(replies)`` turns the step's scored replies into the ``signal/*`` and ``collapse/*`` metrics that
``verl_ext.patches.step_signal`` adds to verl's step metrics:

- ``signal/group_share``: share of groups whose rewards are not all equal, the groups GRPO learns from (a group of
  equal rewards has zero advantage; a group of one sample has signal when its reward is non-zero, as verl's GRPO
  then uses the reward itself); ``signal/groups``; ``signal/reward_std_in_group`` (mean within-group standard
  deviation); ``signal/format_rate`` and ``signal/valid_rate`` (well-formed and legal/credited replies).
- ``collapse/*`` over the groups of single-move replies and of whole games' opening replies (a game counts where
  the policy made its first decision: every game of the group, sharing the deal, starts from that position;
  ``GameRecord.opening_move``):
  ``distinct_answers`` (mean distinct answers per group), ``distinct_share`` (that over the group size),
  ``answer_entropy`` (mean per-group entropy of the answers, nats), ``favourite_share`` (mean share of a group's
  most frequent answer), ``groups``; and per case ``collapse/favourite_share/<case>``: the share of the case's
  replies, over the whole batch, that name its most frequent answer ("column 3 in 82 % of connect_four replies").
  A batch with both kinds (``TASK_MODE=mixed``) also gets each kind's own: ``collapse/moves/*`` (the single moves'
  ``distinct_answers``, ``answer_entropy``, ``favourite_share``, ``groups``) and ``collapse/openings/*``
  (``favourite_share``, ``groups``). A cold start that opens every game alike gives the openings a favourite share
  of 1.0 from step 1, which in the pooled mean rises and falls with the batch's share of games; the collapse
  alarm reads the single moves' own (2026-11-28 tactical-mix run: pooled 0.82-0.90, single moves 0.51-0.73).
- ``tactics/*`` over single moves and whole games of two-player games (``verl_ext/envs/tactics.py``):
  ``win_taken`` (where a move won at once, the share of replies / game turns that played one) and ``blocked``
  (where the opponent threatened to win at once, the share that stopped it), pooled and per case
  (``tactics/win_taken/<case>``): does the policy read the board, beyond the favourite-move share. A single
  move's extras are 0/1 flags, a whole game's counts over its turns; both are summed.

Answers are the reward's canonical answers (``answer_id`` in the reward extras, ``verl_ext/envs/answer.py``); a
malformed reply is one more answer of its own, "no answer", so a group of malformed replies counts as collapsed.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence


NO_ANSWER_ID = 0.0  # verl_ext.envs.answer.answer_id(None); not imported: that package loads every env (~0.1 s)
# the reward's tactics extras (verl_ext.envs.tactics.TACTIC_KEYS, the same names; not imported, as above)
TACTIC_FIELDS = ("win_chance", "win_taken", "block_chance", "blocked")
# the reward's exact-value counts of a whole game (verl_ext.games.scoring.GAME_METRIC_KEYS; 0 for a single move)
VALUE_FIELDS = ("value_turns", "values_kept")
EQUAL_REWARDS = 1e-6  # rewards closer than this count as equal (verl's GRPO divides by std + 1e-6)
MAX_CASES = 16  # per-case metrics for at most this many cases a step (those with the most replies)
_CASE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Reply:
    """One scored sample of the step. ``answer`` is None where the reply has no single answer (a full game the
    policy did not open) or the reward reported none; ``format_ok``/``valid`` are None when the reward reported
    no such field."""

    group: Hashable
    reward: float
    answer: float | None = None
    format_ok: float | None = None
    valid: float | None = None
    case: str = ""
    # one-ply tactics (the reward's extras, verl_ext/envs/tactics.py): a win on the board / taken, a threat to
    # block / blocked, as 0/1 for a single move and as counts over a whole game's turns; None where not reported
    win_chance: float | None = None
    win_taken: float | None = None
    block_chance: float | None = None
    blocked: float | None = None
    # a whole game's turns valued exactly (tic_tac_toe) / those whose move kept the value; None where not reported
    value_turns: float | None = None
    values_kept: float | None = None
    # the answer is a whole game's opening reply (verl_ext.reward: a game row's answer_id), not a single move's
    opening: bool = False


def step_metrics(replies: Iterable[Reply]) -> dict[str, float]:
    """The step's ``signal/*`` and ``collapse/*`` metrics (empty when there are no replies)."""
    groups: dict[Hashable, list[Reply]] = defaultdict(list)
    for reply in replies:
        groups[reply.group].append(reply)
    if not groups:
        return {}
    metrics = _signal(list(groups.values()))
    metrics.update(_collapse(list(groups.values())))
    metrics.update(_tactics([reply for group in groups.values() for reply in group]))
    return metrics


def rewards_differ(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards are not all equal (differ by more than ``EQUAL_REWARDS``): its GRPO advantages are
    then not all 0. Also what ``verl-ext signal`` counts before a run."""
    return max(rewards) - min(rewards) > EQUAL_REWARDS


def _signal(groups: list[list[Reply]]) -> dict[str, float]:
    with_signal, stds = 0, []
    for group in groups:
        rewards = [reply.reward for reply in group if math.isfinite(reply.reward)]
        if len(group) == 1:
            with_signal += bool(rewards) and abs(rewards[0]) > EQUAL_REWARDS
        else:
            with_signal += bool(rewards) and rewards_differ(rewards)
        if len(rewards) > 1:
            stds.append(_std(rewards))
    metrics = {"signal/group_share": with_signal / len(groups), "signal/groups": float(len(groups))}
    if stds:
        metrics["signal/reward_std_in_group"] = sum(stds) / len(stds)
    replies = [reply for group in groups for reply in group]
    for name, values in (("format_rate", [r.format_ok for r in replies]), ("valid_rate", [r.valid for r in replies])):
        known = [v for v in values if v is not None and math.isfinite(v)]
        if known:
            metrics[f"signal/{name}"] = sum(known) / len(known)
    return metrics


def _collapse(groups: list[list[Reply]]) -> dict[str, float]:
    answered = [(group, [reply.answer for reply in group if reply.answer is not None]) for group in groups]
    answered = [(group, answers) for group, answers in answered if answers]
    if not answered:
        return {}
    metrics = {f"collapse/{key}": value for key, value in _answer_spread([a for _, a in answered]).items()}
    by_case: dict[str, Counter] = defaultdict(Counter)
    for group, _ in answered:
        for reply in group:
            if reply.answer is not None:
                by_case[reply.case][reply.answer] += 1
    for case, counts in sorted(by_case.items(), key=lambda item: -sum(item[1].values()))[:MAX_CASES]:
        named = [n for answer, n in counts.items() if answer != NO_ANSWER_ID]
        metrics[f"collapse/favourite_share/{case_name(case)}"] = max(named, default=0) / sum(counts.values())
    openings, moves = [], []
    for group, answers in answered:
        (openings if any(reply.opening for reply in group) else moves).append(answers)
    if openings and moves:
        spread = _answer_spread(moves)
        metrics.update({f"collapse/moves/{key}": spread[key]
                        for key in ("distinct_answers", "answer_entropy", "favourite_share", "groups")})
        spread = _answer_spread(openings)
        metrics.update({f"collapse/openings/{key}": spread[key] for key in ("favourite_share", "groups")})
    return metrics


def _answer_spread(groups: list[list[float]]) -> dict[str, float]:
    """Mean distinct answers, their share of the group size, answer entropy and favourite share over groups of
    answers (each non-empty), and how many groups."""
    distinct, shares, entropies, favourites = [], [], [], []
    for answers in groups:
        counts = Counter(answers)
        distinct.append(len(counts))
        shares.append(len(counts) / len(answers))
        entropies.append(_entropy(counts.values(), len(answers)))
        favourites.append(max(counts.values()) / len(answers))
    return {"distinct_answers": _mean(distinct), "distinct_share": _mean(shares), "answer_entropy": _mean(entropies),
            "favourite_share": _mean(favourites), "groups": float(len(groups))}


# (Reply count field, Reply done field, share metric, count metric) of ``_tactics``
_SHARES = (("win_chance", "win_taken", "tactics/win_taken", "tactics/win_chances"),
           ("block_chance", "blocked", "tactics/blocked", "tactics/block_chances"),
           ("value_turns", "values_kept", "value/kept", "value/turns"))


def _tactics(replies: list[Reply]) -> dict[str, float]:
    """``tactics/win_taken`` (of the replies with a win on the board, the share that took it),
    ``tactics/blocked`` (of those facing a threat, the share that blocked it) and ``value/kept`` (of a whole
    game's turns valued exactly, the share whose move kept the value), pooled and per case, with the counts they are
    shares of (``tactics/win_chances``, ``tactics/block_chances``, ``value/turns``); nothing without
    chances. Each reply adds its count (a single move's 0/1, a game's turns)."""
    metrics: dict[str, float] = {}
    by_case: dict[str, list[Reply]] = defaultdict(list)
    for reply in replies:
        by_case[reply.case].append(reply)
    scopes = [("", replies)] + [(f"/{case_name(case)}", rs) for case, rs in
                                sorted(by_case.items(), key=lambda item: -len(item[1]))[:MAX_CASES]]
    for suffix, scoped in scopes:
        for chance, done, name, count_name in _SHARES:
            counted = [(tactic_count(getattr(r, chance)), tactic_count(getattr(r, done))) for r in scoped]
            chances = sum(c for c, _ in counted)
            if chances:
                metrics[f"{name}{suffix}"] = sum(min(d, c) for c, d in counted) / chances
                if not suffix:
                    metrics[count_name] = float(chances)
    return metrics


def tactic_count(value: float | None) -> int:
    """A tactics extra as a count: a 0/1 flag or a game's count (rounded); 0 when missing or not finite. The
    sample-log readers (bench/learning/val_passes.py, ending_pay.py, tactic_pay.py) read the extras with it too."""
    if value is None or not math.isfinite(value) or value <= 0:
        return 0
    return int(round(value))


def case_name(case: str) -> str:
    """A case string (an OpenSpiel load string, a dataset name) as a short metric-key part."""
    return _CASE_NAME.sub("_", case).strip("_")[:48] or "unknown"


def _entropy(counts: Iterable[int], total: int) -> float:
    return max(0.0, -sum(n / total * math.log(n / total) for n in counts))


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))  # torch.std's, as verl's GRPO


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
