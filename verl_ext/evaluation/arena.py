"""Full games against OpenSpiel bots (uniform random, MCTS), seats alternating, many games in lockstep.

At each of its turns the policy gets the training prompt for the position (``position_prompt``: the
player's own view in imperfect-information games) and its reply is parsed and checked by the adapter's
``score`` (reward mode ``legal``), i.e. exactly as in training. An unparseable or illegal reply forfeits
the game (a loss), unless ``illegal_retries`` > 0 allows that many more tries at the same turn (each retry
shows the rejected reply and the reason; see docs/eval.md). Chance outcomes are sampled from a per-game
seeded RNG, and the bots are seeded per game, so results depend only on the seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyspiel
from open_spiel.python.algorithms import mcts
from open_spiel.python.bots.uniform_random import UniformRandomBot
from tqdm import tqdm

from ..envs import EnvAdapter, make_env
from ..envs.config import ConfigError
from ..envs.openspiel_env import legal_move_actions, load_game
from ..mixture import EnvMixture
from .policies import MoveRequest, Policy, clip, stable_seed
from .stats import proportion

_OPPONENT = re.compile(r"^(random|mcts(?::(\d+))?)$")
DEFAULT_MCTS_SIMULATIONS = 200
SAMPLES_PER_MATCH = 2
SAMPLE_CHARS = 400
RESULTS = ("win", "draw", "loss")


@dataclass(frozen=True)
class Opponent:
    """An OpenSpiel bot: ``random`` (uniform random) or ``mcts`` with ``simulations`` per move."""

    kind: str
    simulations: int = 0

    @property
    def label(self) -> str:
        return "random" if self.kind == "random" else f"mcts:{self.simulations}"


def parse_opponents(text: str | list[str], flag: str = "--opponents") -> list[Opponent]:
    """``"random,mcts:200"`` -> opponents; the error names the offending entry."""
    parts = text if isinstance(text, list) else str(text).split(",")
    parts = [p.strip() for p in parts if str(p).strip()]
    if not parts:
        raise ConfigError(f"{flag}: name at least one opponent (random, mcts:N)")
    opponents = []
    for part in parts:
        match = _OPPONENT.match(part)
        if not match:
            raise ConfigError(f"{flag}: unknown opponent {part!r} (use random or mcts:N, e.g. mcts:200)")
        if part == "random":
            opponents.append(Opponent("random"))
        else:
            sims = int(match.group(2) or DEFAULT_MCTS_SIMULATIONS)
            if sims <= 0:
                raise ConfigError(f"{flag}: {part!r} needs a positive number of simulations")
            opponents.append(Opponent("mcts", sims))
    labels = [o.label for o in opponents]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError(f"{flag}: opponent {label!r} is listed twice")
    return opponents


@dataclass(frozen=True)
class ArenaSettings:
    """How many games, against whom, and the forfeit rules."""

    games_per_case: int = 20
    opponents: tuple[Opponent, ...] = (Opponent("random"), Opponent("mcts", DEFAULT_MCTS_SIMULATIONS))
    illegal_retries: int = 0
    max_game_moves: int = 0  # 0: play until the game ends by its own rules
    seed: int = 0
    confidence: float = 0.95

    def validate(self) -> None:
        if self.games_per_case <= 0:
            raise ConfigError(f"--games-per-case: must be > 0, got {self.games_per_case}")
        if self.illegal_retries < 0:
            raise ConfigError(f"--illegal-retries: must be >= 0, got {self.illegal_retries}")
        if self.max_game_moves < 0:
            raise ConfigError(f"--max-game-moves: must be >= 0 (0 = no limit), got {self.max_game_moves}")


def mcts_skip_reason(case: str, opponent: Opponent) -> str | None:
    """Why ``opponent`` cannot play ``case`` (OpenSpiel's MCTS needs terminal rewards), else None."""
    if opponent.kind == "mcts" and load_game(case).get_type().reward_model != pyspiel.GameType.RewardModel.TERMINAL:
        return "per-step rewards: OpenSpiel MCTS needs terminal rewards"
    return None


def legal_adapter(mixture: EnvMixture) -> EnvAdapter:
    """The ``openspiel`` adapter of the configured settings with ``reward_mode=legal``: parsing and legality only."""
    settings = dict(mixture.settings["openspiel"])
    settings["reward_mode"] = "legal"
    return make_env("openspiel", settings, where="env.openspiel")


@dataclass
class _Game:
    """One game in progress: the model in ``seat``, a bot in every other seat."""

    case: str
    opponent: Opponent
    index: int
    seat: int
    seed: int
    state: pyspiel.State
    bots: dict[int, pyspiel.Bot]
    rng: random.Random
    moves: int = 0
    model_moves: int = 0
    rejected: int = 0
    retries: int = 0
    attempt: int = 0
    feedback: list[dict[str, str]] = field(default_factory=list)
    result: str | None = None
    forfeit: str | None = None
    truncated: bool = False
    returns: list[float] | None = None
    replies: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.result is not None


def _make_bot(game: pyspiel.Game, opponent: Opponent, seat: int, seed: int, config: Any) -> pyspiel.Bot:
    if opponent.kind == "random":
        return UniformRandomBot(seat, np.random.RandomState(seed))
    evaluator = mcts.RandomRolloutEvaluator(n_rollouts=config.mcts_rollouts, random_state=np.random.RandomState(seed),
                                            max_length=config.playout_max_steps)
    return mcts.MCTSBot(game, config.mcts_uct_c, opponent.simulations, evaluator, solve=True,
                        random_state=np.random.RandomState(seed))


class Arena:
    """Plays ``policy`` against the bots on every case, ``games_per_case`` games per (case, opponent)."""

    def __init__(self, adapter: EnvAdapter, settings: ArenaSettings) -> None:
        settings.validate()
        if adapter.config.reward_mode != "legal":  # type: ignore[attr-defined]
            raise ValueError("the arena parses replies with a reward_mode=legal adapter (see legal_adapter)")
        self.adapter = adapter
        self.settings = settings

    def _new_game(self, case: str, opponent: Opponent, index: int) -> _Game:
        game = load_game(case)
        seat = index % game.num_players()
        seed = stable_seed(self.settings.seed, case, opponent.label, index)
        bots = {p: _make_bot(game, opponent, p, stable_seed(seed, "bot", p), self.adapter.config)
                for p in range(game.num_players()) if p != seat}
        return _Game(case, opponent, index, seat, seed, game.new_initial_state(), bots, random.Random(seed))

    def _finish(self, g: _Game, result: str, **extra: Any) -> None:
        g.result = result
        for key, value in extra.items():
            setattr(g, key, value)

    def _advance(self, g: _Game) -> None:
        """Play chance and bot moves until the model must move or the game is over."""
        cap = self.settings.max_game_moves
        while True:
            state = g.state
            if state.is_terminal():
                returns = [float(r) for r in state.returns()]
                mine, best_other = returns[g.seat], max(r for p, r in enumerate(returns) if p != g.seat)
                result = "win" if mine > best_other else "draw" if mine == best_other else "loss"
                self._finish(g, result, returns=returns)
                return
            if state.is_chance_node():
                actions, probs = zip(*state.chance_outcomes())
                state.apply_action(g.rng.choices(actions, weights=probs, k=1)[0])
                continue
            if cap and g.moves >= cap:
                self._finish(g, "draw", truncated=True)
                return
            player = state.current_player()
            if player == g.seat:
                return
            state.apply_action(g.bots[player].step(state))
            g.moves += 1

    def _request(self, g: _Game) -> MoveRequest:
        prompt = self.adapter.position_prompt(g.case, g.state)  # type: ignore[attr-defined]
        messages = ({"role": "user", "content": prompt}, *g.feedback)
        moves = tuple(legal_move_actions(g.state))
        return MoveRequest(messages, moves, stable_seed(g.seed, "move", g.moves, g.attempt))

    def _apply_reply(self, g: _Game, reply: str) -> None:
        if len(g.replies) < SAMPLES_PER_MATCH:
            g.replies.append(clip(reply, SAMPLE_CHARS))
        result = self.adapter.score(g.case, g.state.serialize(), reply)
        if result.valid and result.parsed is not None:
            action = legal_move_actions(g.state).get(result.parsed)
            if action is not None:
                g.state.apply_action(action)
                g.moves += 1
                g.model_moves += 1
                g.attempt, g.feedback = 0, []
                return
        g.rejected += 1
        reason = result.reason if result.reason and result.reason != "ok" else "illegal_move"
        if g.attempt < self.settings.illegal_retries:
            g.attempt += 1
            g.retries += 1
            g.feedback = [{"role": "assistant", "content": reply if isinstance(reply, str) else ""},
                          {"role": "user", "content": f"That reply was rejected ({reason}). End your reply with "
                           "exactly one legal move from the list, in the form <answer>MOVE</answer>."}]
            return
        self._finish(g, "loss", forfeit=reason)

    def play(self, policy: Policy, progress: bool = True) -> dict[str, Any]:
        """Play every game; return per-(case, opponent) results and the skipped pairs."""
        games: list[_Game] = []
        skipped = []
        for case in self.adapter.cases():
            for opponent in self.settings.opponents:
                reason = mcts_skip_reason(case, opponent)
                if reason:
                    skipped.append({"case": case, "opponent": opponent.label, "reason": reason})
                    continue
                games += [self._new_game(case, opponent, i) for i in range(self.settings.games_per_case)]
        active = list(games)
        with tqdm(total=len(games), desc=f"{policy.name}: arena", unit="game", disable=not progress) as bar:
            while active:
                waiting = []
                for g in active:
                    self._advance(g)
                    if g.done:
                        bar.update(1)
                    else:
                        waiting.append(g)
                if waiting:
                    replies = policy.respond([self._request(g) for g in waiting])
                    if len(replies) != len(waiting):
                        raise RuntimeError(f"policy {policy.name!r} returned {len(replies)} replies for "
                                           f"{len(waiting)} prompts")
                    for g, reply in zip(waiting, replies):
                        self._apply_reply(g, reply)
                        if g.done:
                            bar.update(1)
                active = [g for g in waiting if not g.done]
        return {"matches": self._summarise(games), "skipped": skipped}

    def _summarise(self, games: list[_Game]) -> list[dict[str, Any]]:
        conf = self.settings.confidence
        groups: dict[tuple[str, str], list[_Game]] = {}
        for g in games:
            groups.setdefault((g.case, g.opponent.label), []).append(g)
        matches = []
        for (case, label), group in groups.items():
            n = len(group)
            count = {r: sum(g.result == r for g in group) for r in RESULTS}
            game = load_game(case)
            lo, hi = game.min_utility(), game.max_utility()

            def normalised(g: _Game) -> float:
                if g.returns is None:  # a forfeit scores the worst outcome; a truncated game the middle
                    return 0.0 if g.forfeit else 0.5
                return (g.returns[g.seat] - lo) / (hi - lo) if hi > lo else 0.5

            seats = sorted({g.seat for g in group})
            matches.append({
                "case": case,
                "opponent": label,
                "games": n,
                "win": proportion(count["win"], n, conf),
                "draw": proportion(count["draw"], n, conf),
                "loss": proportion(count["loss"], n, conf),
                "forfeit": proportion(sum(g.forfeit is not None for g in group), n, conf),
                "score": (count["win"] + 0.5 * count["draw"]) / n,
                "mean_normalised_return": sum(normalised(g) for g in group) / n,
                "truncated": sum(g.truncated for g in group),
                "model_moves": sum(g.model_moves for g in group),
                "rejected_replies": sum(g.rejected for g in group),
                "retries": sum(g.retries for g in group),
                "mean_game_length": sum(g.moves for g in group) / n,
                "forfeit_reasons": _count(g.forfeit for g in group if g.forfeit),
                "by_seat": {str(s): {r: sum(g.result == r for g in group if g.seat == s) for r in RESULTS}
                            for s in seats},
                "samples": [r for g in group for r in g.replies][:SAMPLES_PER_MATCH],
            })
        return matches


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items()))
