"""Full games against OpenSpiel bots (uniform random, MCTS, CFR in small poker games), seats alternating, many
games in lockstep.

The games are played by the same game loop as training's full-game mode (``verl_ext/games/match.py``): the
policy gets the single-move training prompt of each position (``position_prompt``: the player's own view in
imperfect-information games), its reply goes through the same strict parser, and an unparseable or illegal
reply forfeits the game (a loss) unless ``illegal_retries`` > 0 allows that many more tries at the same turn
(each retry shows the rejected reply and the reason; see docs/eval.md). With ``context="turn"`` (default) each
turn is a fresh prompt; ``context="game"`` gives the policy its whole game conversation, as the training agent
loop does. Chance outcomes and the bots are seeded per game, so results depend only on the seed.

Opponent ``self`` puts the same policy in every seat (each seat its own conversation; the record is the seat
``index % num_players``'s): Hanabi's team score with itself. As in training, a self-play opponent's rejected reply
becomes a seeded random legal move after its retries, so only the recorded seat forfeits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from ..envs import EnvAdapter, make_env
from ..envs.config import ConfigError
from ..envs.episode import DEFAULT_MCTS_SIMULATIONS, Opponent, parse_opponent
from ..envs.cfr_policy import cfr_problem
from ..envs.openspiel_env import load_game, terminal_rewards_only
from ..envs.system_prompt import system_prompt_of, with_system_prompt
from ..games.match import (ACCEPTED, LISTED_MOVES, SHOWN_ANSWER_CHARS, GameRecord, Match, MatchRules,
                           TurnRequest)
from ..games.scoring import outcome_value
from ..mixture import EnvMixture
from ..seeding import stable_seed
from .policies import MoveRequest, Policy, clip
from .stats import mean_interval, proportion

__all__ = ["Arena", "ArenaSettings", "Opponent", "parse_opponents", "legal_adapter", "mcts_skip_reason",
           "DEFAULT_MCTS_SIMULATIONS"]

SAMPLES_PER_MATCH = 2
SAMPLE_CHARS = 400
# rejected replies of the model kept per match, with the legal moves they were rejected against (as many as the
# correction lists, match.LISTED_MOVES)
REJECTION_EXAMPLES = 3
RESULTS = ("win", "draw", "loss")
CONTEXTS = ("turn", "game")
TRUNCATED_VALUE = 0.5  # a game stopped by --max-game-moves counts as a draw in the arena's tables


def parse_opponents(text: str | list[str], flag: str = "--opponents") -> list[Opponent]:
    """``"random,mcts:200,cfr"`` -> opponents; the error names the offending entry."""
    parts = text if isinstance(text, list) else str(text).split(",")
    parts = [p.strip() for p in parts if str(p).strip()]
    if not parts:
        raise ConfigError(f"{flag}: name at least one opponent (random, mcts:N, cfr:N, self)")
    opponents = [parse_opponent(part, flag, allowed=("random", "mcts", "cfr", "self")) for part in parts]
    labels = [o.label for o in opponents]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError(f"{flag}: opponent {label!r} is listed twice")
    return opponents


@dataclass(frozen=True)
class ArenaSettings:
    """How many games, against whom, the forfeit rules, and what each turn's prompt holds."""

    games_per_case: int = 20
    opponents: tuple[Opponent, ...] = (Opponent("random"), Opponent("mcts", DEFAULT_MCTS_SIMULATIONS))
    illegal_retries: int = 0
    max_game_moves: int = 0  # 0: play until the game ends by its own rules
    seed: int = 0
    confidence: float = 0.95
    context: str = "turn"

    def validate(self) -> None:
        if self.games_per_case <= 0:
            raise ConfigError(f"--games-per-case: must be > 0, got {self.games_per_case}")
        if self.illegal_retries < 0:
            raise ConfigError(f"--illegal-retries: must be >= 0, got {self.illegal_retries}")
        if self.max_game_moves < 0:
            raise ConfigError(f"--max-game-moves: must be >= 0 (0 = no limit), got {self.max_game_moves}")
        if self.context not in CONTEXTS:
            raise ConfigError(f"--game-context: unknown value {self.context!r} (choose from {', '.join(CONTEXTS)})")


def mcts_skip_reason(case: str, opponent: Opponent) -> str | None:
    """Why ``opponent`` cannot play ``case`` (OpenSpiel's MCTS needs terminal rewards; CFR policies exist for
    kuhn_poker and leduc_poker only), else None."""
    if opponent.kind == "mcts" and not terminal_rewards_only(case):
        return "per-step rewards: OpenSpiel MCTS needs terminal rewards"
    if opponent.kind == "cfr":
        return cfr_problem(case)
    return None


def legal_adapter(mixture: EnvMixture) -> EnvAdapter:
    """The ``openspiel`` adapter of the configured settings with ``reward_mode=legal``: parsing and legality only.

    Training-only settings of full-game rows (``task_mode``, ``game_share``, ``game``) are dropped: the arena's
    own flags set its opponents and rules.
    """
    settings = {k: v for k, v in mixture.settings["openspiel"].items() if k not in ("task_mode", "game_share", "game")}
    settings["reward_mode"] = "legal"
    return make_env("openspiel", settings, where="env.openspiel")


@dataclass
class _Game:
    """One arena game: the shared match plus what the results file keeps of it."""

    case: str
    opponent: Opponent
    index: int
    seed: int
    match: Match
    replies: list[str] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)

    def note_rejection(self, turn: TurnRequest) -> None:
        """Keep the model's reply to ``turn`` that was just rejected: its answer (cut), why, the legal moves, and
        whether it repeats the answer rejected just before at the same turn (after the correction)."""
        check = self.match.last_check
        assert check is not None
        answer = None if check.move is None else clip(check.move, SHOWN_ANSWER_CHARS)  # model output: valid UTF-8
        before = self.rejections[-1] if self.rejections else None
        repeated = (turn.attempt > 0 and answer is not None and before is not None
                    and before["move"] == turn.moves_played and before["answer"] == answer)
        self.rejections.append({"move": turn.moves_played, "attempt": turn.attempt, "answer": answer,
                                "reason": check.reason, "repeated": repeated,
                                "legal_moves": list(turn.legal_moves[:LISTED_MOVES])})


class Arena:
    """Plays ``policy`` against the bots on every case, ``games_per_case`` games per (case, opponent)."""

    def __init__(self, adapter: EnvAdapter, settings: ArenaSettings) -> None:
        settings.validate()
        if adapter.config.reward_mode != "legal":  # type: ignore[attr-defined]
            raise ValueError("the arena parses replies with a reward_mode=legal adapter (see legal_adapter)")
        self.adapter = adapter
        self.settings = settings
        self.rules = MatchRules(illegal_retries=settings.illegal_retries, max_moves=settings.max_game_moves)
        for opponent in settings.opponents:
            reasons = [mcts_skip_reason(case, opponent) for case in adapter.cases()]
            if opponent.kind == "cfr" and all(reasons):
                raise ConfigError(f"--opponents: {opponent.label!r} cannot play any configured case "
                                  f"({adapter.cases()[0]!r}: {reasons[0]})")

    def _new_game(self, case: str, opponent: Opponent, index: int) -> _Game:
        seat = index % load_game(case).num_players()
        seed = stable_seed(self.settings.seed, case, opponent.label, index)
        episode = self.adapter.start_episode(case, seed, seat)  # type: ignore[attr-defined]
        return _Game(case, opponent, index, seed, Match(episode, opponent, self.rules))

    def _request(self, g: _Game, turn: TurnRequest) -> MoveRequest:
        messages = turn.turn_messages if self.settings.context == "turn" else turn.messages
        messages = with_system_prompt(messages, system_prompt_of(self.adapter))  # as training's turns
        return MoveRequest(messages, turn.legal_moves, stable_seed(g.seed, "move", turn.moves_played, turn.attempt),
                           tactical_moves=g.match.episode.tactical_moves())  # what scripted:tactician picks from

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
                    turn = g.match.next_request()
                    if turn is None:
                        bar.update(1)
                    else:
                        waiting.append((g, turn))
                if waiting:
                    replies = policy.respond([self._request(g, turn) for g, turn in waiting])
                    if len(replies) != len(waiting):
                        raise RuntimeError(f"policy {policy.name!r} returned {len(replies)} replies for "
                                           f"{len(waiting)} prompts")
                    for (g, turn), reply in zip(waiting, replies):
                        if len(g.replies) < SAMPLES_PER_MATCH:
                            g.replies.append(clip(reply, SAMPLE_CHARS))
                        if g.match.submit(reply) != ACCEPTED and turn.learner:
                            g.note_rejection(turn)
                        if g.match.done:
                            bar.update(1)
                active = [g for g, _ in waiting if not g.match.done]
        return {"matches": self._summarise(games), "skipped": skipped}

    def _summarise(self, games: list[_Game]) -> list[dict[str, Any]]:
        conf = self.settings.confidence
        groups: dict[tuple[str, str], list[_Game]] = {}
        for g in games:
            groups.setdefault((g.case, g.opponent.label), []).append(g)
        matches = []
        for (case, label), group in groups.items():
            n = len(group)
            records = [g.match.record for g in group]
            results = ["draw" if r.truncated else r.result for r in records]  # a truncated game counts as a draw
            count = {res: results.count(res) for res in RESULTS}
            seats = sorted({r.seat for r in records})
            matches.append({
                "case": case,
                "opponent": label,
                "games": n,
                "win": proportion(count["win"], n, conf),
                "draw": proportion(count["draw"], n, conf),
                "loss": proportion(count["loss"], n, conf),
                "forfeit": proportion(sum(r.forfeit is not None for r in records), n, conf),
                "score": (count["win"] + 0.5 * count["draw"]) / n,
                "mean_normalised_return": sum(outcome_value(r, TRUNCATED_VALUE) for r in records) / n,
                "mean_return": mean_interval([game_return(r) for r in records], conf),
                "truncated": sum(r.truncated is not None for r in records),
                "model_moves": sum(r.model_moves for r in records),
                "rejected_replies": sum(r.rejected for r in records),
                "retries": sum(r.retries for r in records),
                "mean_game_length": sum(r.moves for r in records) / n,
                "forfeit_reasons": _count(r.forfeit for r in records if r.forfeit),
                "by_seat": {str(s): {res: sum(result == res for result, r in zip(results, records) if r.seat == s)
                                     for res in RESULTS} for s in seats},
                "tactics": _game_tactics(records, conf),
                "samples": [r for g in group for r in g.replies][:SAMPLES_PER_MATCH],
                "rejections": _rejections([r for g in group for r in g.rejections]),
            })
        return matches


def _game_tactics(records: list[GameRecord], conf: float) -> dict[str, Any] | None:
    """Over the games' model turns, the share of wins on the board taken and of threats blocked (one-ply tactics,
    ``envs/tactics.py``) and, in games searched to the end, of moves that kept the position's value
    (``envs/exact_values.py``); None in a game without any of them."""
    win_chances = sum(r.win_chances for r in records)
    block_chances = sum(r.block_chances for r in records)
    value_turns = sum(r.value_turns for r in records)
    if not win_chances and not block_chances and not value_turns:
        return None
    return {"win_taken": proportion(sum(r.wins_taken for r in records), win_chances, conf) if win_chances else None,
            "blocked": proportion(sum(r.blocks_made for r in records), block_chances, conf) if block_chances else None,
            "value_kept": proportion(sum(r.values_kept for r in records), value_turns, conf) if value_turns else None}


def game_return(record: GameRecord) -> float:
    """The model seat's return in the game's own units (chips in poker, the team score in Hanabi): the return of
    a game that ended by its rules; a forfeit pays the game's lowest utility (what the training reward pays:
    normalised 0), a truncated game the middle of the utility range (``TRUNCATED_VALUE``)."""
    if record.forfeit is None and record.truncated is None and record.returns is not None:
        return float(record.returns[record.seat])
    game = load_game(record.case)
    low, high = game.min_utility(), game.max_utility()
    return low + outcome_value(record, TRUNCATED_VALUE) * (high - low)


def _rejections(rejected: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's rejected replies in a match: how many, why, how many repeat the answer rejected just before at
    the same turn (the correction did not help), and the first few with the legal moves they were rejected against."""
    return {"replies": len(rejected), "reasons": _count(r["reason"] for r in rejected),
            "repeated_after_correction": sum(r["repeated"] for r in rejected),
            "examples": rejected[:REJECTION_EXAMPLES]}


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items()))
