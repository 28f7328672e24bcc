"""OpenSpiel games as single-move tasks (a position, its legal moves, a reward for the chosen move) and as
full-game episodes (``task_mode: game``; played by ``verl_ext/games``, see docs/games.md)."""

from __future__ import annotations

import json
import os
import random
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pyspiel
from open_spiel.python.algorithms import mcts

from ..seeding import stable_seed
from .answer import ParsedAnswer, move_answer_key, parse_answer
from .base import ScoreResult, Task
from .board_text import BOARD_TEXTS, render_board
from .caching import OnceLRU
from .card_games import NAMED_CASES, card_game_notes, card_game_view
from .cfr_policy import DEFAULT_ITERATIONS as DEFAULT_CFR_ITERATIONS
from .cfr_policy import DEFAULT_SOLVER, MAX_ITERATIONS, cfr_policy, cfr_problem
from .config import ConfigError, from_mapping
from .episode import MoveCheck, Opponent, UtilityRange
from .exact_values import best_actions, exact_move_values, exact_problem, exact_problem_of
from .game_settings import GameSettings
from .openspiel_episode import OpenSpielEpisode
from .openspiel_rules import legal_move_actions, load_game, match_move, normalised_return
from .tactics import one_ply


DEFAULT_CASES: tuple[str, ...] = (
    "hex(board_size=7)",
    "go(board_size=9)",
    "breakthrough(rows=6,columns=6)",
    "dots_and_boxes(num_rows=3,num_cols=3)",
    "clobber(rows=5,columns=5)",
    "othello",
    "chess",
    "checkers",
    "connect_four",
    "tic_tac_toe",
    "leduc_poker",
    # No-limit hold'em with the fold/call/pot/all-in abstraction keeps the legal move list short.
    "universal_poker(betting=nolimit,bettingAbstraction=fcpa,blind=100 50,firstPlayer=2 1 1 1,"
    "numBoardCards=0 3 1 1,numHoleCards=2,numPlayers=2,numRanks=13,numRounds=4,numSuits=4,stack=20000 20000)",
    "hanabi(players=2)",
)
REWARD_MODES = ("legal", "outcome", "engine")
ENGINE_SOLVERS = ("mcts", "exact")
CONTINUATIONS = ("random", "mcts")
OBSERVATIONS = ("auto", "observation", "information_state")
TASK_MODES = ("move", "game", "mixed")
# An analysed move whose first search visited it fewer times than this (or than its share of the simulations)
# gets a search of its own.
MIN_MOVE_VISITS = 10
# Version of the per-move value tables (engine analysis, outcome playouts): part of the settings a precomputed
# table in a row must match before the reward uses it. Bump it when the way values are computed changes.
MOVE_VALUES_VERSION = 2
# A chance node after an analysed move with at most this many outcomes is averaged over them; else rolled out.
MAX_EXPANDED_CHANCE_OUTCOMES = 8
# Seeded random previews tried for a game row's first prompt before giving up (an empty prompt).
PREVIEW_ATTEMPTS = 16
# What a game row's ground truth says (the reward comes from the played game, not from this string).
GAME_GROUND_TRUTH = "full game: reward from the played game's outcome"


@dataclass
class OpenSpielConfig:
    """Settings of the ``openspiel`` env (``data.env.openspiel.*``)."""

    cases: list[str] | None = None
    game_list: list[str] | None = None
    game_configs: list[dict] | None = None
    game_types: list[str] | None = None
    num_tasks_per_case: int = 100
    max_random_steps: int = 20
    seed: int = 0
    reward_mode: str = "legal"
    format_weight: float = 0.1
    continuation: str = "random"
    outcome_playouts: int = 4
    mcts_simulations: int = 300
    mcts_rollouts: int = 1
    mcts_uct_c: float = 2.0
    engine_solver: str = "mcts"
    playout_max_steps: int = 400
    observation: str = "auto"
    board_text: str = "raw"
    max_response_chars: int = 16384
    max_answer_chars: int = 64
    cache_size: int = 4096
    precompute_move_values: bool = True
    task_mode: str = "move"
    game_share: float = 0.5
    game: dict | None = None
    reference_cfr_iterations: int = DEFAULT_CFR_ITERATIONS
    # perfect information: 0 teaches the engine's one best move (the same move every time a position recurs);
    # > 0 a move drawn (seeded by the task, or the game and turn) among the moves valued within this margin of
    # the best that keep the exact value where it can be searched (``good_moves``), so that a cold start fitted to
    # its rows still varies its moves; a mapping case -> margin sets it per game (cases not named: 0)
    reference_margin: float | dict[str, float] = 0.0

    def validate(self, where: str) -> None:
        positive = ("num_tasks_per_case", "outcome_playouts", "mcts_simulations", "mcts_rollouts",
                    "playout_max_steps", "max_response_chars", "max_answer_chars", "cache_size")
        for key in positive:
            if getattr(self, key) <= 0:
                raise ConfigError(f"{where}.{key}: must be > 0, got {getattr(self, key)!r}")
        if self.max_random_steps < 0:
            raise ConfigError(f"{where}.max_random_steps: must be >= 0, got {self.max_random_steps!r}")
        if not 0 < self.reference_cfr_iterations <= MAX_ITERATIONS:
            raise ConfigError(f"{where}.reference_cfr_iterations: must be in 1..{MAX_ITERATIONS}, got "
                              f"{self.reference_cfr_iterations!r}")
        margins = self.reference_margin if isinstance(self.reference_margin, dict) else {None: self.reference_margin}
        for case, margin in margins.items():
            key = f"{where}.reference_margin" + ("" if case is None else f".{case}")
            if not (isinstance(margin, (int, float)) and not isinstance(margin, bool) and 0.0 <= margin <= 1.0):
                raise ConfigError(f"{key}: must be a number in [0, 1] (0: the engine's best move only), or a mapping "
                                  f"of case names to such numbers, got {margin!r}")
        if not 0.0 <= self.format_weight < 1.0:
            raise ConfigError(f"{where}.format_weight: must be in [0, 1), got {self.format_weight!r}")
        if not 0.0 < self.game_share < 1.0:
            raise ConfigError(f"{where}.game_share: must be in (0, 1) (the share of full-game rows when "
                              f"task_mode=mixed), got {self.game_share!r}")
        for key, allowed in (("reward_mode", REWARD_MODES), ("continuation", CONTINUATIONS),
                             ("engine_solver", ENGINE_SOLVERS),
                             ("observation", OBSERVATIONS), ("task_mode", TASK_MODES),
                             ("board_text", BOARD_TEXTS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{where}.{key}: unknown value {getattr(self, key)!r} (choose from {allowed})")
        if self.cases is not None and self.game_list is not None:
            raise ConfigError(f"{where}: give either 'cases' or 'game_list' (+ 'game_configs'), not both")
        if self.game_configs is not None:
            if self.game_list is None:
                raise ConfigError(f"{where}.game_configs: needs 'game_list' of the same length")
            if len(self.game_configs) != len(self.game_list):
                raise ConfigError(f"{where}.game_configs: has {len(self.game_configs)} entries but game_list has "
                                  f"{len(self.game_list)}; give one config per game")


def case_from_parts(game: str, params: dict[str, Any] | None) -> str:
    """``("hex", {"board_size": 7})`` -> ``"hex(board_size=7)"`` (OpenSpiel's load-string syntax)."""
    if not params:
        return game
    return f"{game}({','.join(f'{k}={v}' for k, v in sorted(params.items()))})"


@lru_cache(maxsize=256)
def _offers_cfr(case: str) -> bool:
    """Whether ``case`` has a CFR reference policy (``cfr_policy.cfr_problem``)."""
    return cfr_problem(case) is None


def terminal_rewards_only(case: str) -> bool:
    """Whether ``case`` pays only at the end (OpenSpiel's MCTS needs that)."""
    return load_game(case).get_type().reward_model == pyspiel.GameType.RewardModel.TERMINAL


def _sample_chance(state: pyspiel.State, rng: random.Random) -> int:
    actions, probs = zip(*state.chance_outcomes())
    return rng.choices(actions, weights=probs, k=1)[0]


def _resolve_chance(state: pyspiel.State, rng: random.Random) -> None:
    while state.is_chance_node():
        state.apply_action(_sample_chance(state, rng))


@dataclass
class _Position:
    """A deserialised decision state with its legal moves by string (cached per task)."""

    state: pyspiel.State
    player: int
    moves: dict[str, int]


def _in_action_order(moves: dict[str, int], actions: set[int] | frozenset[int]) -> list[str]:
    """The moves of ``moves`` whose action is in ``actions``, in action order."""
    return [move for move, action in sorted(moves.items(), key=lambda item: item[1]) if action in actions]


class OpenSpielAdapter:
    """Positions reached by seeded random play; the model names one legal move."""

    name: ClassVar[str] = "openspiel"
    config_cls: ClassVar[type] = OpenSpielConfig

    def __init__(self, config: OpenSpielConfig, where: str = "data.env.openspiel") -> None:
        self.config = config
        self.game_settings: GameSettings = from_mapping(GameSettings, config.game, f"{where}.game")
        self._cases = self._resolve_cases(config, where)
        if isinstance(config.reference_margin, dict):
            unknown = sorted(set(config.reference_margin) - set(self._cases))
            if unknown:
                raise ConfigError(f"{where}.reference_margin: {unknown[0]!r} is not one of this run's cases "
                                  f"({', '.join(self._cases)})")
        if config.task_mode != "move":
            self._check_opponents(f"{where}.game")
            self._check_value_term(f"{where}.game")
            self._check_seats(f"{where}.game")
        self._positions: OnceLRU[_Position] = OnceLRU(config.cache_size)
        self._analyses: OnceLRU[dict[int, float]] = OnceLRU(config.cache_size)
        self._outcomes: OnceLRU[dict[int, float]] = OnceLRU(config.cache_size)
        # engine_solver=exact: MCTS values only to choose the reference among equally valued moves
        self._tie_breaks: OnceLRU[dict[int, float]] = OnceLRU(config.cache_size)

    # ----------------------------------------------------------------- configuration
    def _check_value_term(self, where: str) -> None:
        """``value_weight`` needs a case whose games can be searched to the end (the others pay the outcome)."""
        if self.game_settings.value_weight > 0 and not any(self.values_exactly(case) for case in self._cases):
            reasons = "; ".join(f"{case!r}: {exact_problem_of(case)}" for case in self._cases[:3])
            raise ConfigError(f"{where}.value_weight: no case of this run can be valued exactly ({reasons}); the "
                              "term is for games small enough to search to the end, such as tic_tac_toe")

    def _check_seats(self, where: str) -> None:
        """``seat_weights`` gives one weight per seat of every case's game."""
        weights = self.game_settings.seat_weights
        for case in self._cases if weights is not None else ():
            players = load_game(case).num_players()
            if len(weights) != players:
                raise ConfigError(f"{where}.seat_weights: one weight per seat, but case {case!r} has {players} "
                                  f"players and the list has {len(weights)} ({weights!r})")

    def values_exactly(self, case: str) -> bool:
        """Whether ``case``'s whole games carry the value term (``game.value_weight``): it can be searched to the
        end (``exact_values.py``)."""
        return exact_problem_of(case) is None

    def _check_opponents(self, where: str) -> None:
        """Every opponent each case's games may draw can play that case; ``opponents_by_case`` names known cases."""
        unknown = sorted(set(self.game_settings.opponents_by_case or {}) - set(self._cases))
        if unknown:
            raise ConfigError(f"{where}.opponents_by_case: {unknown[0]!r} is not one of this run's cases "
                              f"({', '.join(self._cases)})")
        for case in self._cases:
            for entry in self.game_settings.opponent_mixture_at(where, case).entries:
                problem = self.opponent_problem(case, entry.opponent)
                if problem:
                    raise ConfigError(f"{entry.where}: {entry.opponent.label!r} cannot play {case!r}: {problem}")

    @staticmethod
    def _resolve_cases(config: OpenSpielConfig, where: str) -> list[str]:
        if config.cases is not None:
            cases, key = list(config.cases), "cases"
        elif config.game_list is not None:
            configs = config.game_configs or [None] * len(config.game_list)
            cases, key = [case_from_parts(g, c) for g, c in zip(config.game_list, configs)], "game_list"
        else:
            cases, key = list(DEFAULT_CASES), "cases"
            types, _ = OpenSpielAdapter._requested_types(config, where)
            # a named case outside the built-in list (kuhn_poker, holdem_small, hanabi_small) joins when named
            cases += [NAMED_CASES[t] for t in types or () if t in NAMED_CASES and NAMED_CASES[t] not in cases]
        if not cases:
            raise ConfigError(f"{where}.{key}: is empty; name at least one game")
        if len(set(cases)) != len(cases):
            dup = next(c for c in cases if cases.count(c) > 1)
            raise ConfigError(f"{where}.{key}: case {dup!r} is listed twice")
        games = {}
        for i, case in enumerate(cases):
            if not isinstance(case, str) or not case.strip():
                raise ConfigError(f"{where}.{key}[{i}]: expected a game load string, got {case!r}")
            try:
                games[case] = load_game(case)
            except Exception as err:  # pyspiel raises RuntimeError/SpielError with its own message
                raise ConfigError(f"{where}.{key}[{i}]: cannot load OpenSpiel game {case!r}: {err}") from None
        cases = OpenSpielAdapter._filter_types(config, cases, games, where)
        needs_mcts = config.reward_mode == "engine" or (
            config.reward_mode == "outcome" and config.continuation == "mcts")
        for case in cases:
            game_type = games[case].get_type()
            if game_type.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
                raise ConfigError(f"{where}.{key}: {case!r} is not a sequential-move game; only turn-based "
                                  "games are supported")
            if config.reward_mode == "engine" and config.engine_solver == "exact":
                problem = exact_problem(games[case])
                if problem:
                    raise ConfigError(f"{where}.engine_solver: 'exact' cannot value {case!r}: {problem}")
            if needs_mcts and game_type.reward_model != pyspiel.GameType.RewardModel.TERMINAL:
                raise ConfigError(f"{where}.reward_mode: {config.reward_mode!r} uses OpenSpiel MCTS, which needs "
                                  f"terminal rewards, but case {case!r} has per-step rewards; use reward_mode=legal "
                                  "or outcome with continuation=random for it")
        return cases

    @staticmethod
    def _requested_types(config: OpenSpielConfig, where: str) -> tuple[list[str] | None, str]:
        """``game_types``, else ``$GAME_TYPES`` split at commas, and the name to blame in errors."""
        if config.game_types is None and os.environ.get("GAME_TYPES", "").strip():
            return [t.strip() for t in os.environ["GAME_TYPES"].split(",") if t.strip()], "GAME_TYPES"
        return config.game_types, f"{where}.game_types"

    @staticmethod
    def _filter_types(config: OpenSpielConfig, cases: list[str], games: dict[str, pyspiel.Game],
                      where: str) -> list[str]:
        """Keep the cases whose short name (``hex``), full string or name in ``NAMED_CASES`` (``holdem_small``)
        is in ``game_types`` / ``$GAME_TYPES``."""
        types, where_types = OpenSpielAdapter._requested_types(config, where)
        if not types:
            return cases
        names = {case: {games[case].get_type().short_name, case} | {n for n, c in NAMED_CASES.items() if c == case}
                 for case in cases}
        for t in types:
            if not any(t in case_names for case_names in names.values()):
                available = {games[case].get_type().short_name for case in cases}
                if config.cases is None and config.game_list is None:
                    available |= set(NAMED_CASES)
                raise ConfigError(f"{where_types}: {t!r} matches no case (available: "
                                  f"{', '.join(sorted(available))})")
        return [case for case in cases if names[case] & set(types)]

    def cases(self) -> list[str]:
        return list(self._cases)

    def num_tasks(self, case: str) -> int:
        return self.config.num_tasks_per_case

    # ----------------------------------------------------------------- tasks
    def is_game_task(self, index: int) -> bool:
        """Whether task ``index`` is a full game (``task_mode`` game, or mixed with ``game_share``)."""
        if self.config.task_mode == "mixed":
            return stable_seed(self.config.seed, "task_mode", index) % 10_000 < self.config.game_share * 10_000
        return self.config.task_mode == "game"

    def make_task(self, case: str, index: int, seed: int) -> Task:
        if self.is_game_task(index):
            return self._game_task(case, index, seed)
        state = self._random_position(load_game(case), seed)
        player = state.current_player()
        moves = [state.action_to_string(player, a) for a in state.legal_actions(player)]
        info: dict[str, Any] = {"player": player, "num_legal_moves": len(moves), "move_number": state.move_number()}
        if self.config.board_text != "raw":
            # the held-out split goes by the position, not by how its board is drawn (verl_ext/held_out.py)
            info["content"] = self.position_prompt(case, state, board_text="raw")
        return Task(
            env=self.name,
            case=case,
            task_id=index,
            seed=seed,
            messages=({"role": "user", "content": self.position_prompt(case, state)},),
            state=state.serialize(),
            ground_truth=state.serialize(),
            legal_moves=tuple(moves),
            info=info,
        )

    def _game_task(self, case: str, index: int, seed: int) -> Task:
        """A full game from the initial position; the trained policy's seat alternates with ``index`` (or follows
        ``game.seat_weights``).

        The message is a preview of the policy's first prompt (other seats moving at random before it):
        exact when the policy moves first, otherwise a prompt of the same shape (when the random moves end the
        game first, e.g. a poker hand folded before the seat acts, from another seeded preview). The game agent
        loop builds the real conversation from the episode.
        """
        seat = self.game_settings.seat_for(seed, index, load_game(case).num_players())
        prompt = ""
        for attempt in range(PREVIEW_ATTEMPTS):
            episode = self.start_episode(case, seed if attempt == 0 else stable_seed(seed, "preview", attempt), seat)
            while not episode.is_over() and episode.current_player() != seat:
                episode.play_random()
            if not episode.is_over():
                prompt = episode.prompt()
                break
        return Task(
            env=self.name,
            case=case,
            task_id=index,
            seed=seed,
            messages=({"role": "user", "content": prompt},),
            state=load_game(case).new_initial_state().serialize(),
            ground_truth=GAME_GROUND_TRUTH,
            info={"mode": "game", "seat": seat, "opponent": self.game_settings.opponent_for(seed, case).label},
        )

    def start_episode(self, case: str, seed: int, seat: int) -> OpenSpielEpisode:
        """A full game of ``case``: chance outcomes and bots seeded from ``seed``; the policy in ``seat``."""
        return OpenSpielEpisode(self, case, seed, seat)

    def opponent_problem(self, case: str, opponent: Opponent) -> str | None:
        """Why ``opponent`` cannot play ``case`` (OpenSpiel's MCTS needs terminal rewards; CFR is solved for small
        poker games only, ``cfr_policy.cfr_problem``), else None."""
        if opponent.kind == "mcts" and not terminal_rewards_only(case):
            return "per-step rewards: OpenSpiel MCTS needs terminal rewards"
        if opponent.kind == "cfr":
            from .cfr_policy import cfr_problem

            return cfr_problem(case)
        return None

    def utility_range(self, case: str) -> UtilityRange:
        """``case``'s players and OpenSpiel utility range (``min_utility()`` .. ``max_utility()``)."""
        game = load_game(case)
        zero_sum = game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM
        return UtilityRange(game.num_players(), float(game.min_utility()), float(game.max_utility()), zero_sum)

    def _random_position(self, game: pyspiel.Game, seed: int) -> pyspiel.State:
        """Seeded random play to a non-terminal decision node (chance outcomes from the same RNG)."""
        rng = random.Random(seed)
        limit = self.config.max_random_steps
        for _ in range(16):
            state = game.new_initial_state()
            _resolve_chance(state, rng)
            for _ in range(rng.randint(0, limit)):
                if state.is_terminal():
                    break
                state.apply_action(rng.choice(state.legal_actions()))
                _resolve_chance(state, rng)
            if not state.is_terminal():
                return state
            limit //= 2  # the game ended inside the random prefix: retry with a shorter one
        state = game.new_initial_state()
        _resolve_chance(state, rng)
        return state

    def _view(self, game: pyspiel.Game, state: pyspiel.State, player: int, board_text: str) -> str:
        """What ``player`` may see: the full board for perfect information, else the player's own view (poker:
        its cards, the betting and the pot in words; Hanabi: the last moves, then OpenSpiel's observation text;
        ``card_games.py``); a board drawn in ``board_text`` style (``board_text.py``)."""
        game_type = game.get_type()
        if game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION:
            return render_board(str(state), board_text, game_type.short_name)
        mode = self.config.observation
        use_info_state = game_type.provides_information_state_string and (
            mode == "information_state" or (mode == "auto"))
        if mode == "observation" or not use_info_state:
            raw = state.observation_string(player)
        else:
            raw = state.information_state_string(player)
        return card_game_view(game, state, player, raw)

    def position_prompt(self, case: str, state: pyspiel.State, compact: bool = False,
                        board_text: str | None = None) -> str:
        """The prompt for the player to move at decision node ``state`` of ``case``: its own view of the game
        (the full board for perfect information) and its legal moves. Training tasks and games use it;
        ``compact`` drops the closing notes and instructions (for later turns of a game, where they were shown
        once); ``board_text`` overrides the configured board style (``raw`` / ``grid`` / ``columns`` / ``lines``)."""
        game = load_game(case)
        player = state.current_player()
        moves = [state.action_to_string(player, a) for a in state.legal_actions(player)]
        game_type = game.get_type()
        hidden = game_type.information != pyspiel.GameType.Information.PERFECT_INFORMATION
        lines = [
            f"You are playing {game_type.long_name} ({game}) as player {player} of {game.num_players()}. "
            f"It is your turn (move {state.move_number()}).",
            "Your view of the game:" if hidden else "Current state:",
            self._view(game, state, player, board_text or self.config.board_text).rstrip(),
            "",
            "Legal moves (write yours exactly as listed): " + ", ".join(moves),
        ]
        notes = card_game_notes(game)
        if notes and not compact:
            lines += ["", notes]
        if not compact:
            lines += ["", "Choose the best move for you. Think briefly if you like, then end your reply with exactly "
                      "one move in the form <answer>MOVE</answer>, where MOVE is one of the legal moves above."]
        return "\n".join(lines)

    # ----------------------------------------------------------------- scoring
    def _position(self, case: str, state_str: str) -> _Position:
        def build() -> _Position:
            state = load_game(case).deserialize_state(state_str)
            if state.is_terminal() or state.is_chance_node():
                raise ValueError(f"serialised state of {case!r} is not a decision node")
            return _Position(state, state.current_player(), legal_move_actions(state))

        return self._positions.get_or_compute((case, state_str), build)

    def _parse(self, response: object) -> ParsedAnswer:
        cfg = self.config
        return parse_answer(response, max_response_chars=cfg.max_response_chars,
                            max_answer_chars=cfg.max_answer_chars, single_line=True)

    def check_move(self, moves: dict[str, int], response: object) -> MoveCheck:
        """Parse ``response`` strictly (as ``score`` does) and look the answer up in ``moves``."""
        parsed = self._parse(response)
        if parsed.text is None:
            return MoveCheck(None, False, parsed.reason)
        move = match_move(moves, parsed.text)
        if move is None:
            return MoveCheck(parsed.text, False, "illegal_move")
        return MoveCheck(move, True, "ok")

    def move_actions(self, case: str, state: str) -> dict[str, int]:
        """Every legal move of a single-move position as written in the prompt, with its OpenSpiel action
        (one action can be several moves' text: tic_tac_toe's ``x(1,1)`` and ``o(1,1)`` are cell 4)."""
        return dict(self._position(case, state).moves)

    def answer_key(self, case: str, state: str, move: str) -> str:
        """What the collapse metrics count as one answer: the OpenSpiel action of a legal ``move``, so that
        connect_four's ``x3`` and ``o3`` (column 3 whoever moves) are one favourite; other text stays itself."""
        return move_answer_key(self._position(case, state).moves, move)

    def task_scores(self, case: str, state: str) -> dict[int, float]:
        """The task score ``score`` pays for each legal action of the position (``reward_mode`` engine: the move's
        value relative to the best; outcome: its mean playout return; legal: 1.0 for every move), in [0, 1]."""
        position = self._position(case, state)
        if self.config.reward_mode == "legal":
            return {action: 1.0 for action in position.moves.values()}
        if self.config.reward_mode == "outcome":
            return {a: min(1.0, max(0.0, v)) for a, v in self._outcomes_table(case, state, position).items()}
        analysis = self._analysis(case, state, position)
        best = max(analysis.values())
        return {action: min(1.0, max(0.0, 1.0 - (best - analysis.get(action, 0.0))))
                for action in position.moves.values()}

    def score(self, case: str, state: str, response: str) -> ScoreResult:
        cfg = self.config
        parsed = self._parse(response)
        if parsed.text is None:
            return ScoreResult(0.0, False, False, 0.0, None, parsed.reason)
        position = self._position(case, state)
        move = match_move(position.moves, parsed.text)
        if move is None:
            return ScoreResult(cfg.format_weight, True, False, 0.0, parsed.text, "illegal_move")
        task_score = self.task_scores(case, state)[position.moves[move]]
        total = cfg.format_weight + (1.0 - cfg.format_weight) * task_score
        return ScoreResult(total, True, True, task_score, move, "ok")

    # ----------------------------------------------------------------- per-move tables computed ahead
    def _values_settings(self) -> str:
        """Everything a position's value table depends on besides the position (the reward side must match)."""
        c = self.config
        solver = "" if c.engine_solver == "mcts" else f"solver={c.engine_solver}|"  # mcts: tables as before
        return (f"v{MOVE_VALUES_VERSION}|{c.reward_mode}|{solver}sims={c.mcts_simulations}|rollouts={c.mcts_rollouts}|"
                f"uct={c.mcts_uct_c}|steps={c.playout_max_steps}|cont={c.continuation}|"
                f"playouts={c.outcome_playouts}|seed={c.seed}")

    def _values_cache(self) -> OnceLRU[dict[int, float]] | None:
        return {"engine": self._analyses, "outcome": self._outcomes}.get(self.config.reward_mode)

    def move_values(self, task: Task) -> str | None:
        """The value of every legal move of a single-move ``task`` as the reward will need it (JSON, with the
        settings it was computed under), or None: ``legal`` mode, game rows, ``precompute_move_values: false``.

        The dataset puts it into the row (``extra_info.move_values``), so the MCTS search or playouts run in
        verl's dataloader workers, ahead of the rollout, once per prompt, instead of in every reward worker
        that gets one of the prompt's samples.
        """
        if not self.config.precompute_move_values or self._values_cache() is None or task.info.get("mode") == "game":
            return None
        position = self._position(task.case, task.state)
        if self.config.reward_mode == "engine":
            values = self._analysis(task.case, task.state, position)
        else:
            values = self._outcomes_table(task.case, task.state, position)
        return json.dumps({"settings": self._values_settings(),
                           "values": {str(a): float(v) for a, v in sorted(values.items())}})

    def prime_move_values(self, case: str, state_str: str, payload: object) -> bool:
        """Take a row's precomputed table into the cache when it was computed under this adapter's settings
        (False: other settings, e.g. reward overrides; the reward then computes its own). A malformed table
        raises ValueError naming ``extra_info.move_values``."""
        cache = self._values_cache()
        if cache is None:
            return False
        try:
            data = json.loads(payload) if isinstance(payload, str) else payload
            settings, raw = data["settings"], data["values"]
            values = {int(action): float(value) for action, value in raw.items()}
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            raise ValueError(f"extra_info.move_values: not a table of move values ({err!r})") from err
        if settings != self._values_settings():
            return False
        position = self._position(case, state_str)
        if set(values) != set(position.moves.values()) or not all(0.0 <= v <= 1.0 for v in values.values()):
            raise ValueError(f"extra_info.move_values: the table does not match the legal moves of this {case!r} "
                             f"position or has values outside [0, 1]: {raw!r}")
        cache.put((case, state_str), values)
        return True

    def _normalise(self, game: pyspiel.Game, value: float) -> float:
        return normalised_return(game, value)

    def _stable_seed(self, *parts: object) -> int:
        return zlib.crc32("|".join(map(str, parts)).encode()) ^ self.config.seed

    def _outcomes_table(self, case: str, state_str: str, position: _Position) -> dict[int, float]:
        """Mean normalised return of the mover after each legal move and a continuation to the end.

        Computed for every legal move at once and cached per position, so the n samples of a GRPO
        group share one analysis whichever moves they pick.
        """

        def playouts() -> dict[int, float]:
            game = load_game(case)
            rng = random.Random(self._stable_seed(case, state_str))
            bot = self._mcts_bot(game, rng.getrandbits(31)) if self.config.continuation == "mcts" else None
            table = {}
            for action in sorted(position.moves.values()):
                total = 0.0
                for _ in range(self.config.outcome_playouts):
                    state = position.state.clone()
                    state.apply_action(action)
                    steps = 0
                    while not state.is_terminal() and steps < self.config.playout_max_steps:
                        if state.is_chance_node():
                            state.apply_action(_sample_chance(state, rng))
                        elif bot is not None:
                            state.apply_action(bot.step(state))
                        else:
                            state.apply_action(rng.choice(state.legal_actions()))
                        steps += 1
                    total += self._normalise(game, state.returns()[position.player])
                table[action] = total / self.config.outcome_playouts
            return table

        return self._outcomes.get_or_compute((case, state_str), playouts)

    def _mcts_bot(self, game: pyspiel.Game, seed: int, simulations: int | None = None) -> mcts.MCTSBot:
        """OpenSpiel's MCTS bot with this config's rollout settings (``simulations`` default: mcts_simulations)."""
        evaluator = mcts.RandomRolloutEvaluator(
            n_rollouts=self.config.mcts_rollouts, random_state=np.random.RandomState(seed),
            max_length=self.config.playout_max_steps)
        return mcts.MCTSBot(game, self.config.mcts_uct_c, simulations or self.config.mcts_simulations, evaluator,
                            solve=True, random_state=np.random.RandomState(seed))

    def _analysis(self, case: str, state_str: str, position: _Position) -> dict[int, float]:
        """The engine's value in [0, 1] of every legal move for the mover, computed once per position:
        ``engine_solver`` mcts (``_mcts_analysis``) or exact (alpha-beta under best play, ``exact_values.py``)."""
        if self.config.engine_solver == "exact":
            game = load_game(case)
            return self._analyses.get_or_compute(
                (case, state_str), lambda: {action: self._normalise(game, raw) for action, raw
                                            in exact_move_values(game, position.state.clone()).items()})
        return self._analyses.get_or_compute((case, state_str),
                                             lambda: self._mcts_analysis(case, state_str, position))

    def _mcts_analysis(self, case: str, state_str: str, position: _Position) -> dict[int, float]:
        """MCTS value in [0, 1] of every legal move for the mover.

        One search from the position gives most moves their value: a proven outcome, or the mean return of a
        move the search visited at least ``min_visits`` times. The others get a search of their own from the
        position after the move. Without it, a search that proves a win early (OpenSpiel's solver stops
        there) leaves the other moves with one random rollout or none, and those would score like the win:
        a policy could throw away a won game at no cost.
        """

        def search() -> dict[int, float]:
            game = load_game(case)
            seed = self._stable_seed(case, state_str)
            root = self._mcts_bot(game, seed).mcts_search(position.state.clone())
            children = {child.action: child for child in root.children}
            min_visits = max(MIN_MOVE_VISITS, self.config.mcts_simulations // max(1, len(position.moves)))
            values: dict[int, float] = {}
            for action in position.moves.values():
                child = children.get(action)
                if child is not None and child.outcome is not None:
                    raw = child.outcome[position.player]
                elif child is not None and child.explore_count >= min_visits:
                    raw = child.total_reward / child.explore_count
                else:
                    after = position.state.clone()
                    after.apply_action(action)
                    raw = self._state_value(game, after, position.player, min_visits, seed ^ (action + 1))
                values[action] = self._normalise(game, raw)
            return values

        return search()

    def _state_value(self, game: pyspiel.Game, state: pyspiel.State, player: int, simulations: int,
                     seed: int, expand_chance: bool = True) -> float:
        """Return of ``player`` expected at ``state`` (raw units): exact at the end; at a chance node with few
        outcomes the expectation over them (once per call chain), else random rollouts; at a decision node
        the proven outcome or the mean return over a search of ``simulations`` from it."""
        if state.is_terminal():
            return float(state.returns()[player])
        if state.is_chance_node():
            outcomes = state.chance_outcomes()
            if not expand_chance or len(outcomes) > MAX_EXPANDED_CHANCE_OUTCOMES:
                return self._rollout_value(state, player, simulations, seed)
            total = 0.0
            for i, (outcome, probability) in enumerate(outcomes):
                child = state.clone()
                child.apply_action(outcome)
                total += probability * self._state_value(game, child, player, simulations, seed ^ (i + 1),
                                                         expand_chance=False)
            return total
        root = self._mcts_bot(game, seed, simulations).mcts_search(state.clone())
        if root.outcome is not None:
            return float(root.outcome[player])
        # the mean over the whole search, as a move's value in the position's own search is the mean over its
        # subtree (the most visited reply's mean would be biased up: it is the reply that looked best)
        mean = root.total_reward / root.explore_count  # the return of ``root.player``, the player to move here
        if root.player == player:
            return mean
        if game.num_players() == 2 and game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM:
            return -mean
        return self._rollout_value(state, player, simulations, seed)

    def _rollout_value(self, state: pyspiel.State, player: int, simulations: int, seed: int) -> float:
        """Mean return of ``player`` over random playouts from ``state`` (OpenSpiel's rollout evaluator)."""
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=max(1, simulations // 10),
                                                random_state=np.random.RandomState(seed),
                                                max_length=self.config.playout_max_steps)
        return float(evaluator.evaluate(state)[player])

    def best_move(self, case: str, state_str: str) -> str:
        """The move an engine would choose: MCTS where the game allows it, else the best mean playout. Among moves
        of equal value a win on the board comes first: MCTS's solver values a proven win like a win at once, and
        a teacher that passes up a win it can take in one move (22 % of such tic_tac_toe turns in an SFT export,
        bench/learning/sft_fit.py) teaches a small model not to take it."""
        position = self._position(case, state_str)
        game = load_game(case)
        if game.get_type().reward_model == pyspiel.GameType.RewardModel.TERMINAL:
            values = self._analysis(case, state_str, position)
        else:
            values = self._outcomes_table(case, state_str, position)
        tie_break: dict[int, float] = {}
        if self.config.engine_solver == "exact" and self.config.reward_mode == "engine":
            # exact values tie every drawing (or winning) move; MCTS picks among them, not the lowest number
            tie_break = self._tie_breaks.get_or_compute(
                (case, state_str), lambda: self._mcts_analysis(case, state_str, position))
        top = max(values.get(a, 0.0) for a in position.moves.values())
        wins_now: frozenset[int] = frozenset()
        if sum(values.get(a, 0.0) == top for a in position.moves.values()) > 1:  # a tie: one-ply tactics only then
            tactics = one_ply(case, state_str)
            wins_now = tactics.winning if tactics is not None else frozenset()
        best_action = max(position.moves.values(),
                          key=lambda a: (values.get(a, 0.0), a in wins_now, tie_break.get(a, 0.0), -a))
        return next(move for move, action in position.moves.items() if action == best_action)

    def reference_margin_of(self, case: str) -> float:
        """``reference_margin`` for ``case``'s reference moves (a mapping's entry, 0 for a case it does not name)."""
        margin = self.config.reference_margin
        return float(margin.get(case, 0.0) if isinstance(margin, dict) else margin)

    def good_moves(self, case: str, state_str: str, margin: float) -> list[str]:
        """The moves a teacher that varies may play, in action order: those the engine values within ``margin`` of
        its best move (the ones the engine reward, ``task_scores``, pays at least 1 - ``margin``). Where the game
        can be searched to the end (``exact_values.best_actions``: tic_tac_toe), only those that keep the exact
        value, or the engine's favourite among the value-keeping moves when none within the margin does. Where a
        move wins on the board, the winning moves only (the search values a proven later win like one now, and a
        teacher that passes up a win teaches a small model not to take it)."""
        position = self._position(case, state_str)
        tactics = one_ply(case, state_str)
        if tactics is not None and tactics.winning:
            return _in_action_order(position.moves, tactics.winning)
        if load_game(case).get_type().reward_model == pyspiel.GameType.RewardModel.TERMINAL:
            values = self._analysis(case, state_str, position)
        else:
            values = self._outcomes_table(case, state_str, position)
        top = max(values.get(a, 0.0) for a in position.moves.values())
        chosen = {a for a in position.moves.values() if values.get(a, 0.0) >= top - margin}
        keeping = best_actions(case, position.state)
        if keeping:
            chosen = (chosen & keeping) or {max(keeping, key=lambda a: (values.get(a, 0.0), -a))}
        return _in_action_order(position.moves, chosen)

    def reference_move(self, case: str, state: pyspiel.State, seed: int) -> str:
        """The move SFT answers and whole-game demonstrations teach, for the player to move at ``state``.

        Perfect information: the engine's move (``best_move``); with ``reference_margin`` > 0 a move drawn
        (``random.Random(seed)``) among ``good_moves`` within that margin. Imperfect information never reads hidden cards:
        a move drawn (``random.Random(seed)``) from OpenSpiel's CFR+ average policy at the player's information
        state where one is offered (``cfr_policy.cfr_problem``: kuhn_poker, leduc_poker, holdem_small; solved once
        with ``reference_cfr_iterations`` and cached), else a uniformly random legal move (Hanabi, large
        hold'em: OpenSpiel has no bot for them that plays from the player's view, and the engine searches the full
        state, the hidden cards included).
        """
        player = state.current_player()
        rng = random.Random(seed)
        if load_game(case).get_type().information == pyspiel.GameType.Information.PERFECT_INFORMATION:
            margin = self.reference_margin_of(case)
            if margin > 0:
                return rng.choice(self.good_moves(case, state.serialize(), margin))
            return self.best_move(case, state.serialize())
        if _offers_cfr(case):
            solved = cfr_policy(case, DEFAULT_SOLVER, self.config.reference_cfr_iterations)
            probabilities = sorted(solved.policy.action_probabilities(state, player).items())
            action = rng.choices([a for a, _ in probabilities], weights=[p for _, p in probabilities], k=1)[0]
        else:
            action = rng.choice(state.legal_actions(player))
        return state.action_to_string(player, action)

    def reference_answer(self, task: Task) -> str | None:
        """The reference move (``reference_move``, seeded by the task) as an answer; None for full-game tasks (no
        single reply answers a whole game)."""
        if task.info.get("mode") == "game":
            return None
        state = load_game(task.case).deserialize_state(task.state)
        return f"<answer>{self.reference_move(task.case, state, stable_seed(task.seed, 'reference'))}</answer>"
