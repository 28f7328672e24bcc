"""``compute_score`` for verl's reward loop, routed by ``extra_info["env"]`` to the env adapters.

Full-game rows (``extra_info["mode"] == "game"``) are scored from the game their agent loop played
(``verl_ext/games/agent_loop.py`` puts the record in the sample's extra fields, which verl's reward loop
merges into ``extra_info``), not from the decoded response, which holds the whole conversation.

Use with ``reward.custom_reward_function.path=pkg://verl_ext.reward
reward.custom_reward_function.name=compute_score``. It never raises: a broken row or any
exception scores 0 and is counted in the ``failed`` metric. A game record that does not add up
(``games/record_check.py``: outcome not what its returns say, non-finite values, a game not over, counts
beyond the turns they count) is refused the same way, with a rate-limited warning naming the field.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from . import sample_log
from .envs.answer import answer_id
from .envs.config import to_plain
from .envs.episode import EpisodeEnv
from .envs.openspiel_env import OpenSpielAdapter
from .envs.registry import cached_env
from .envs.tactics import TACTIC_KEYS, one_ply, tactic_flags
from .games import RECORD_FIELD
from .games.match import GameRecord
from .games.record_check import RecordError, trusted_record
from .games.scoring import GAME_METRIC_KEYS, game_metrics, score_game
from .log_limit import RateLimitedLog

logger = logging.getLogger(__name__)
# Every call returns exactly these keys (verl turns them into metrics; keys must not vary by sample).
# For a game row format_ok/valid are the rates of well-formed/legal replies and task_score the outcome value.
# answer_id: the canonical answer as a number (envs/answer.py; 0 = none), for the per-step collapse metrics; an
# adapter's answer_key (OpenSpiel: the move's action, one id for x3 and o3) when it has one. A whole game's is its
# opening reply's (GameRecord.opening_move: the move's canonical answer, 0 for a rejected one), NOT_AN_OPENING where
# another player moved first (the games of its group then start from different positions).
# win_chance / win_taken / block_chance / blocked: one-ply tactics of a single move in a two-player game
# (envs/tactics.py; 0 elsewhere) as 0/1, of a whole game as counts over its turns, for the per-step tactics metrics.
METRIC_KEYS = ("score", "format_ok", "valid", "task_score", "failed", "reward_ms", "dataset_ms", "answer_id") \
    + TACTIC_KEYS + GAME_METRIC_KEYS
NOT_AN_OPENING = -1.0  # a whole game's answer_id where the policy did not make the game's first decision
_MAX_LOGGED_FAILURES = 20
_failures = 0
_refusals = RateLimitedLog(logger)  # refused game records: first 5, then at most one a minute


def _result(score: float, format_ok: float, valid: float, task_score: float, failed: bool,
            started: float, dataset_ms: float = 0.0, game: GameRecord | None = None,
            answer: str | None = None, tactics: Mapping[str, float] | None = None) -> dict[str, float]:
    if game is not None:
        opening = game.opening_move
        answer_number = NOT_AN_OPENING if opening is None else answer_id(opening or None)
    else:
        answer_number = answer_id(answer)
    return {
        "score": float(score),
        "format_ok": float(format_ok),
        "valid": float(valid),
        "task_score": float(task_score),
        "failed": float(failed),
        "reward_ms": (time.perf_counter() - started) * 1000.0,
        "dataset_ms": dataset_ms,  # time DynamicEnvDataset took to build this sample (0 for other datasets)
        "answer_id": answer_number,
        **(tactics or tactic_flags(None, None)),
        **game_metrics(game),
    }


def _score_game_row(adapter: Any, info: Mapping[str, Any], started: float) -> dict[str, float]:
    raw = info.get(RECORD_FIELD)
    if not isinstance(raw, Mapping):
        raise ValueError("a full-game row reached the reward without a played game: was it rolled out by the "
                         "verl_ext_game agent loop? (actor_rollout_ref.rollout.agent.agent_loop_config_path must "
                         "name verl_ext/games/agent_loops.yaml; TASK_MODE=game in the train script sets it)")
    if not isinstance(adapter, EpisodeEnv):
        raise ValueError(f"extra_info.env={info.get('env')!r} does not play full games (extra_info.mode='game')")
    case = str(info.get("case"))
    record = trusted_record(raw, adapter.utility_range(case), case, _rows_opponent(info))
    result = score_game(record, adapter.game_settings, valued=adapter.values_exactly(case))
    return _result(result.score, result.format_rate, result.legal_rate, result.outcome, False, started,
                   _dataset_ms(info), record, tactics=game_tactics(record))


def game_tactics(record: GameRecord) -> dict[str, float]:
    """A whole game's one-ply tactics as the tactics extras: counts over its turns (a single move's are 0/1)."""
    return {"win_chance": float(record.win_chances), "win_taken": float(record.wins_taken),
            "block_chance": float(record.block_chances), "blocked": float(record.blocks_made)}


def _tactics(adapter: Any, case: str, state: str, result: Any) -> dict[str, float] | None:
    """The reply's one-ply tactics flags for an OpenSpiel single move; None elsewhere. A metric: any error here
    leaves the flags at 0 and never touches the score."""
    if not isinstance(adapter, OpenSpielAdapter):
        return None
    try:
        action = adapter.move_actions(case, state).get(result.parsed) if result.valid else None
        return tactic_flags(one_ply(case, state), action)
    except Exception:  # noqa: BLE001 - e.g. a game whose states do not deserialise; the score stands
        return None


def _rows_opponent(info: Mapping[str, Any]) -> str | None:
    """The opponent the row's game was drawn against, from the row's own settings as the agent loop reads them
    (``env_config``, without the reward's ``env_overrides``); None when the row carries no seed."""
    if info.get("seed") is None:
        return None
    rollout_adapter = cached_env(str(info["env"]), str(info.get("env_config") or ""))
    return rollout_adapter.game_settings.opponent_for(int(info["seed"]), str(info.get("case"))).label


def _dataset_ms(info: Mapping[str, Any]) -> float:
    try:
        return float(info.get("dataset_ms") or 0.0)
    except (TypeError, ValueError):
        return 0.0


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                  extra_info: Any = None, env_overrides: Mapping[str, Any] | None = None,
                  **_: Any) -> dict[str, float]:
    """Score one response. Returns ``score`` in [0, 1] plus per-sample metrics (see ``METRIC_KEYS``).

    ``env_overrides`` (from ``reward.custom_reward_function.reward_kwargs.env_overrides.<env>.<key>``)
    changes scoring settings per env, e.g. ``{"openspiel": {"reward_mode": "engine"}}``.
    Unknown keyword arguments that verl passes (e.g. ``reward_router_address``) are ignored.
    """
    global _failures
    started = time.perf_counter()
    info: Any = {}
    try:
        info = to_plain(extra_info) if extra_info is not None else {}
        if not isinstance(info, Mapping) or "env" not in info:
            raise ValueError(f"extra_info lacks 'env' (data_source={data_source!r}); was the row made by verl_ext?")
        env = str(info["env"])
        overrides = (to_plain(env_overrides) or {}).get(env) if env_overrides else None
        adapter = cached_env(env, str(info.get("env_config") or ""), overrides)
        if info.get("mode") == "game":
            scored = _score_game_row(adapter, info, started)
        else:
            if info.get("move_values") is not None and hasattr(adapter, "prime_move_values"):
                adapter.prime_move_values(str(info["case"]), str(info["state"]), info["move_values"])
            result = adapter.score(str(info["case"]), str(info["state"]), solution_str)
            answer = result.parsed
            if result.valid and answer is not None and hasattr(adapter, "answer_key"):
                answer = adapter.answer_key(str(info["case"]), str(info["state"]), answer)
            scored = _result(result.score, result.format_ok, result.valid, result.task_score, False, started,
                             _dataset_ms(info), answer=answer,
                             tactics=_tactics(adapter, str(info["case"]), str(info["state"]), result))
    except RecordError as err:  # a game record that does not add up: refused, scored 0, counted as failed
        _refusals.warn("verl_ext.compute_score refused a game record (data_source=%r): %s; scoring 0",
                       data_source, err)
        scored = _result(0.0, False, False, 0.0, True, started)
    except Exception:  # a reward must never take training down; count it and score the minimum
        _failures += 1
        if _failures <= _MAX_LOGGED_FAILURES:
            logger.exception("verl_ext.compute_score failed (data_source=%r); scoring 0", data_source)
        scored = _result(0.0, False, False, 0.0, True, started)
    sample_log.record(info if isinstance(info, Mapping) else {}, scored, solution_str)
    return scored
