"""Held-out single-move tasks (the ``val`` split of training): legal-move rate, format rate, engine score; or, with
``--positions training``, the same on positions the model was trained on.

The tasks, prompts and parsing are the training ones: ``EnvMixture.plan("val")`` + ``build``, and the
adapter's own ``score``. The engine-shaped score re-scores the same replies with an adapter built from
the same settings but ``reward_mode=engine`` (MCTS value of the move relative to the best, in [0, 1]).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyspiel
from tqdm import tqdm

from ..envs import EnvAdapter, Task, make_env
from ..envs.openspiel_env import load_game
from ..envs.tactics import OnePly, has_tactics, one_ply, tactic_flags, tactical_move_texts, tactics_line
from ..held_out import content_key
from ..mixture import EnvMixture
from ..seeding import stable_seed
from .policies import MoveRequest, Policy, clip, respond_all
from .stats import mean_interval, mean_or_none, proportion

SAMPLES_PER_CASE = 2
SAMPLE_CHARS = 400
_CASE_KEYS = ("cases", "game_list", "game_configs", "game_types")


POSITIONS = ("held-out", "training")


def heldout_tasks(mixture: EnvMixture, env: str) -> list[Task]:
    """The held-out (``val``) tasks of ``env``, in plan order."""
    return [mixture.build(ref) for ref in mixture.plan("val") if ref.env == env]


def training_tasks(mixture: EnvMixture, env: str) -> list[Task]:
    """In-sample tasks of ``env``: per case, the first ``val_tasks_per_case`` distinct contents of the training
    plan (the rows an SFT export or a GRPO run of the same settings trains on, since a larger pool only adds
    seeds after these). Beside the held-out score it tells a model that did not fit its training positions from
    one that fit them and does not generalise."""
    tasks: list[Task] = []
    seen: dict[str, set[str]] = {}
    for ref in mixture.plan("train"):
        if ref.env != env or len(seen.setdefault(ref.case, set())) >= mixture.val_tasks_per_case:
            continue
        task = mixture.build(ref)
        key = content_key(task) or f"seed:{task.seed}"
        if key not in seen[ref.case]:
            seen[ref.case].add(key)
            tasks.append(task)
    return tasks


def position_tasks(mixture: EnvMixture, env: str, positions: str) -> list[Task]:
    """The single-move tasks of ``env`` for ``positions`` (``held-out`` or ``training``)."""
    return training_tasks(mixture, env) if positions == "training" else heldout_tasks(mixture, env)


def tactical_moves(task: Task) -> tuple[str, ...]:
    """The legal moves of a single-move OpenSpiel position that a one-ply tactician picks from (``tactics.py``,
    from the task's real state); () for puzzles, full-game tasks and games without one-ply tactics."""
    if task.env != "openspiel" or not task.legal_moves:
        return ()
    shown = set(task.legal_moves)
    return tuple(move for move in tactical_move_texts(task.case, task.state) if move in shown)


def ask(policy: Policy, tasks: list[Task], suite: str, seed: int, progress: bool) -> list[str]:
    """The policy's reply to every task (one prompt each, seeded per task; the tactical moves for
    ``scripted:tactician``)."""
    requests = [MoveRequest(task.messages, task.legal_moves, stable_seed(seed, suite, task.case, task.seed),
                            tactical_moves=tactical_moves(task))
                for task in tasks]
    return respond_all(policy, requests, f"{policy.name}: {suite}", progress)


def sample(task: Task, reply: str, parsed: str | None, reason: str) -> dict[str, Any]:
    """A short record of one reply for the JSON file (what the model actually wrote)."""
    return {"task_id": task.task_id, "reply": clip(reply, SAMPLE_CHARS), "parsed": parsed, "reason": reason}


def engine_adapter(mixture: EnvMixture) -> tuple[EnvAdapter | None, dict[str, str]]:
    """An ``openspiel`` adapter with ``reward_mode=engine`` over the cases MCTS can analyse.

    Returns it (None if no case qualifies) and ``{case: reason}`` for the cases without an engine score.
    """
    cases = mixture.adapters["openspiel"].cases()
    terminal = pyspiel.GameType.RewardModel.TERMINAL
    skipped = {case: "per-step rewards: OpenSpiel MCTS needs terminal rewards"
               for case in cases if load_game(case).get_type().reward_model != terminal}
    usable = [case for case in cases if case not in skipped]
    if not usable:
        return None, skipped
    settings = {k: v for k, v in mixture.settings["openspiel"].items() if k not in _CASE_KEYS}
    # game_types=[] (not None) so that $GAME_TYPES cannot filter the already resolved case list again.
    settings.update(cases=usable, game_types=[], reward_mode="engine")
    return make_env("openspiel", settings, where="env.openspiel (engine scoring)"), skipped


def move_label(texts: set[str]) -> str:
    """One action's move texts joined (``x3/o3``: the same column whoever moves)."""
    return "/".join(sorted(texts))


@dataclass
class _CaseTally:
    n: int = 0
    format_ok: int = 0
    legal: int = 0
    rewards: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)
    engine_legal: list[float] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    actions: Counter = field(default_factory=Counter)  # legal replies by OpenSpiel action
    action_moves: dict[int, set[str]] = field(default_factory=dict)  # the move texts seen for each action
    win_chances: int = 0  # positions with an immediate win on the board (tactics.py)
    wins_taken: int = 0
    block_chances: int = 0  # positions where some moves let the opponent win at once and others do not
    blocks_made: int = 0
    engine_tactical: list[float] = field(default_factory=list)  # engine scores where a win or a block is on the board
    engine_quiet: list[float] = field(default_factory=list)  # and where neither is

    def count_tactics(self, tactics: OnePly, action: int | None) -> None:
        """One position's one-ply tactics and the reply's action (None: no legal move), counted as the reward's
        tactics flags count them (``tactic_flags``)."""
        flags = tactic_flags(tactics, action)
        self.win_chances += int(flags["win_chance"])
        self.wins_taken += int(flags["win_taken"])
        self.block_chances += int(flags["block_chance"])
        self.blocks_made += int(flags["blocked"])

    def summary(self, confidence: float, engine_note: str | None, with_samples: bool = True,
                tactics: bool = False) -> dict[str, Any]:
        out = {
            "n": self.n,
            "format": proportion(self.format_ok, self.n, confidence),
            "legal": proportion(self.legal, self.n, confidence),
            "engine_score": mean_or_none(self.engine),
            # the mean's normal 95 % interval: two models' engine scores differ beyond noise only where these
            # do not overlap (a rate's Wilson interval does not apply to a mean of values in [0, 1])
            "engine_score_ci": mean_interval(self.engine, confidence),
            "engine_score_when_legal": mean_or_none(self.engine_legal),
            "engine_note": engine_note,
            "reward": mean_or_none(self.rewards),
            "reasons": dict(sorted(self.reasons.items())),
            "favourite": self.favourite(),
        }
        if tactics:  # took the win where there was one; avoided the losing moves where a block was needed
            out["tactics"] = {"win_taken": proportion(self.wins_taken, self.win_chances, confidence),
                              "blocked": proportion(self.blocks_made, self.block_chances, confidence),
                              # the engine score on the positions train_positions=tactical trains on, and the rest
                              "engine_where_tactical": mean_interval(self.engine_tactical, confidence),
                              "engine_elsewhere": mean_interval(self.engine_quiet, confidence)}
        if with_samples:
            out["samples"] = self.samples
            # per position, in the eval's fixed task order: paired comparisons between models (paired.py)
            out["engine_by_position"] = [round(float(v), 6) for v in self.engine]
        return out

    def favourite(self) -> dict[str, Any] | None:
        """The action of most legal replies and its share of them: a policy collapsed to a favourite move
        answers it whatever the position (None without legal replies)."""
        if not self.actions:
            return None
        action, count = max(self.actions.items(), key=lambda item: (item[1], -item[0]))
        return {"move": move_label(self.action_moves[action]), "share": count / sum(self.actions.values())}


def evaluate_single_move(policy: Policy, mixture: EnvMixture, engine: EnvAdapter | None,
                         engine_skipped: dict[str, str], seed: int, confidence: float,
                         progress: bool, positions: str = "held-out") -> dict[str, Any]:
    """Per-case and pooled metrics of ``policy`` on the OpenSpiel tasks of ``positions`` (held-out by default)."""
    adapter = mixture.adapters["openspiel"]
    tasks = position_tasks(mixture, "openspiel", positions)
    replies = ask(policy, tasks, "single-move", seed, progress)
    tallies: dict[str, _CaseTally] = {case: _CaseTally() for case in adapter.cases()}
    pooled = _CaseTally()
    for task, reply in tqdm(list(zip(tasks, replies)), desc=f"{policy.name}: scoring", unit="task",
                            disable=not progress, leave=False):
        result = adapter.score(task.case, task.state, reply)
        action = adapter.move_actions(task.case, task.state)[result.parsed] if result.valid else None
        tactics = one_ply(task.case, task.state)
        if tactics is not None:
            tallies[task.case].count_tactics(tactics, action)
        engine_value = None
        if engine is not None and task.case not in engine_skipped:
            engine_value = engine.score(task.case, task.state, reply).task_score if result.valid else 0.0
            if tactics is not None:
                tally = tallies[task.case]
                (tally.engine_tactical if tactics.has_tactic else tally.engine_quiet).append(engine_value)
        if action is not None:
            tally = tallies[task.case]
            tally.actions[action] += 1
            tally.action_moves.setdefault(action, set()).add(result.parsed)
        for tally in (tallies[task.case], pooled):
            tally.n += 1
            tally.format_ok += int(result.format_ok)
            tally.legal += int(result.valid)
            tally.rewards.append(result.score)
            tally.reasons[result.reason] += 1
            if engine_value is not None:
                tally.engine.append(engine_value)
                if result.valid:
                    tally.engine_legal.append(engine_value)
        if len(tallies[task.case].samples) < SAMPLES_PER_CASE:
            tallies[task.case].samples.append(sample(task, reply, result.parsed, result.reason))
    pooled_note = "pooled over the cases with an engine score" if engine_skipped and pooled.engine else None
    overall = pooled.summary(confidence, pooled_note, with_samples=False)
    overall.pop("favourite")  # actions of different games are not one move
    return {
        "reward_mode": adapter.config.reward_mode,  # type: ignore[attr-defined]
        "cases": {case: t.summary(confidence, engine_skipped.get(case), tactics=has_tactics(case))
                  for case, t in tallies.items()},
        "overall": overall,
    }


def fixed_move_baselines(engine: EnvAdapter, tasks: list[Task], engine_skipped: dict[str, str]
                         ) -> dict[str, dict[str, Any]]:
    """What a collapsed policy scores on the held-out positions: per case, the mean engine score of "always play
    action A" for every action (where A is illegal, the random legal mover's score in that position), the best
    of them and the random mover's. A model whose engine score is no better than the best fixed move has learnt
    a favourite move, not the positions (docs/eval.md, "The fixed-move line")."""
    tables: dict[str, list[dict[int, float]]] = {}
    labels: dict[str, dict[int, set[str]]] = {}
    tactical: dict[str, list[tuple[OnePly, dict[int, float]]]] = {}
    for task in tasks:
        if task.case in engine_skipped:
            continue
        scores = engine.task_scores(task.case, task.state)  # type: ignore[attr-defined]
        tables.setdefault(task.case, []).append(scores)
        tactics = one_ply(task.case, task.state)
        if tactics is not None:
            tactical.setdefault(task.case, []).append((tactics, scores))
        for move, action in engine.move_actions(task.case, task.state).items():  # type: ignore[attr-defined]
            labels.setdefault(task.case, {}).setdefault(action, set()).add(move)
    baselines = {}
    for case, case_tables in tables.items():
        random_scores = [sum(t.values()) / len(t) for t in case_tables]
        fixed = {}
        for action in sorted(labels[case]):
            picked = [t.get(action, r) for t, r in zip(case_tables, random_scores)]
            fixed[move_label(labels[case][action])] = {
                "score": sum(picked) / len(picked), "action": action,
                "legal_share": sum(action in t for t in case_tables) / len(case_tables)}
        best = max(fixed, key=lambda label: fixed[label]["score"])
        baselines[case] = {"positions": len(case_tables), "random_mover": sum(random_scores) / len(random_scores),
                           "best_fixed_move": best, "best_fixed_score": fixed[best]["score"], "fixed_moves": fixed}
        if case in tactical:  # the one-ply tactician (tactics.py) and how many positions test each tactic
            baselines[case].update(
                tactics_line=tactics_line(tactical[case]),
                win_positions=sum(t.win_available for t, _ in tactical[case]),
                block_positions=sum(t.must_block for t, _ in tactical[case]))
    return baselines
