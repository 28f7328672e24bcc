"""The game record the reward pays for, checked: a record is hostile input until it is consistent.

The agent loop writes a ``GameRecord`` into the sample's extra fields and verl's reward loop hands it back in
``extra_info``; anything on that path (a custom loop, a merged field, a bug) could put a record there that
pays more than the game earned. ``trusted_record`` rebuilds the record from checked fields only:

- the outcome comes from the record's own ``returns`` and the game's utility range: the returns must be one
  finite number per player inside the range (summing to 0 in a zero-sum game), ``result`` must be what they
  say (``match.result_from_returns``) and ``normalised_return`` what the range makes of the seat's return;
  a record without returns is accepted only in a two-player zero-sum game, where ``result`` and
  ``normalised_return`` can be checked against each other;
- a forfeit is a ``loss`` without returns, a truncated game has no result and no returns, and a record with
  neither a result nor a truncation (a game still running) is refused;
- counts are non-negative integers and bounded by the turns they count: ``model_moves <= format_ok <=
  model_turns``, ``retries <= rejected <= model_turns``;
- ``opponent`` is a string and, where the reward knows the row's seed, the opponent the row's game draws from
  its settings (``GameSettings.opponent_for``): a record cannot claim a game against a different opponent.
- the one-ply tactics counts: ``wins_taken <= win_chances``, ``blocks_made <= block_chances``, at most one
  chance per turn that ended in a move or a forfeit, and no more taken than moves played; the same for the exact
  value counts (``values_kept <= value_turns`` <= such turns, ``values_kept`` <= moves played);
- ``opening_move`` (read by the collapse metrics only) is absent, None or a string of at most
  ``MAX_OPENING_CHARS`` characters, and only in a record with at least one model turn.
- ``reply_values`` (read by the move-credit advantage only) is absent or a list of 0s and 1s, at most one per
  reply (``model_turns``), with no more 1s than values kept (``values_kept``: a rejected reply keeps none);
  ``move_credit`` is absent or a finite number in ``[0, MAX_MOVE_CREDIT]``.

Anything else raises ``RecordError`` naming the field and its value; the reward scores such a row 0 and
counts it as ``failed``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from ..envs.episode import UtilityRange
from ..envs.game_settings import MAX_MOVE_CREDIT
from .match import GameRecord, result_from_returns

RESULTS = ("win", "draw", "loss")
COUNT_FIELDS = ("moves", "model_turns", "model_moves", "format_ok", "rejected", "retries", "model_tokens",
                "opponent_replies", "opponent_rejected", "opponent_fallbacks", "win_chances", "wins_taken",
                "block_chances", "blocks_made", "value_turns", "values_kept")
# Bounds every legitimate record meets: (smaller, larger).
COUNT_BOUNDS = (("format_ok", "model_turns"), ("model_moves", "format_ok"), ("rejected", "model_turns"),
                ("retries", "rejected"), ("wins_taken", "win_chances"), ("blocks_made", "block_chances"),
                ("values_kept", "value_turns"))
_TOLERANCE = 1e-9
MAX_OPENING_CHARS = 256  # a legal move's text; longer is not a move the episode accepted


class RecordError(ValueError):
    """A game record the reward refuses; ``field`` and ``value`` name what is wrong."""

    def __init__(self, field: str, value: Any, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        super().__init__(f"game record {field}={_show(value)}: {why}")


def trusted_record(data: Any, utility: UtilityRange, case: str, opponent: str | None = None) -> GameRecord:
    """The record in ``data`` (a ``GameRecord.to_dict()``) after every check above, for a row of ``case``
    whose game was drawn against ``opponent`` (a label such as ``mcts:25``; None: any string).

    Its ``normalised_return`` is recomputed from its returns; raises ``RecordError`` on any inconsistency.
    """
    if not isinstance(data, Mapping):
        raise RecordError("record", data, "not a mapping")
    if data.get("case") != case:
        raise RecordError("case", data.get("case"), f"the row plays {case!r}")
    seat = _count(data, "seat")
    if seat >= utility.num_players:
        raise RecordError("seat", seat, f"{case!r} has {utility.num_players} players")
    counts = {name: _count(data, name, default=0) for name in COUNT_FIELDS}
    for small, large in COUNT_BOUNDS:
        if counts[small] > counts[large]:
            raise RecordError(small, counts[small], f"more than {large}={counts[large]}")
    forfeit, truncated = _reason(data, "forfeit"), _reason(data, "truncated")
    _check_tactics(counts, forfeited=forfeit is not None)
    result, returns = data.get("result"), data.get("returns")
    if returns is not None and not isinstance(returns, (list, tuple)) and hasattr(returns, "tolist"):
        returns = returns.tolist()  # a numpy array after a trip through a batch
    normalised = _finite(data, "normalised_return") if data.get("normalised_return") is not None else None
    if truncated is not None:
        for name, value in (("result", result), ("forfeit", forfeit), ("returns", returns),
                            ("normalised_return", normalised)):
            if value is not None:
                raise RecordError(name, value, f"a game stopped as truncated ({truncated!r}) has none")
    elif result not in RESULTS:
        why = "the game is not over" if result is None else f"not one of {', '.join(RESULTS)}"
        raise RecordError("result", result, why)
    elif forfeit is not None:
        if result != "loss":
            raise RecordError("result", result, f"a forfeit ({forfeit!r}) is a loss")
        for name, value in (("returns", returns), ("normalised_return", normalised)):
            if value is not None:
                raise RecordError(name, value, f"a forfeited game ({forfeit!r}) has none")
    elif returns is not None:
        normalised = _outcome_from_returns(returns, seat, str(result), normalised, utility)
    else:
        normalised = _outcome_without_returns(str(result), normalised, utility, case)
    played = _text(data, "opponent")
    if opponent is not None and played != opponent:
        raise RecordError("opponent", played, f"the row's game is against {opponent!r}")
    return GameRecord(case=case, seed=_count(data, "seed"), seat=seat, opponent=played,
                      result=None if truncated is not None else str(result), forfeit=forfeit, truncated=truncated,
                      returns=[float(r) for r in returns] if returns is not None else None,
                      normalised_return=normalised, opening_move=_opening(data, counts["model_turns"]),
                      reply_values=_reply_values(data, counts), move_credit=_move_credit(data), **counts)


def _check_tactics(counts: dict[str, int], forfeited: bool) -> None:
    """A turn has at most one tactic (a win to take, else a threat to block), and a taken win or a block is a move
    played: chances <= the turns that end in a move or a forfeit, tactics played right <= moves played. A turn is
    valued at most once, and a value kept is a move played."""
    chances = counts["win_chances"] + counts["block_chances"]
    turns = counts["model_moves"] + int(forfeited)
    if chances > turns:
        raise RecordError("win_chances + block_chances", chances, f"more than the policy's turns ({turns})")
    taken = counts["wins_taken"] + counts["blocks_made"]
    if taken > counts["model_moves"]:
        raise RecordError("wins_taken + blocks_made", taken, f"more than model_moves={counts['model_moves']}")
    if counts["value_turns"] > turns:
        raise RecordError("value_turns", counts["value_turns"], f"more than the policy's turns ({turns})")
    if counts["values_kept"] > counts["model_moves"]:
        raise RecordError("values_kept", counts["values_kept"], f"more than model_moves={counts['model_moves']}")


def _opening(data: Mapping[str, Any], model_turns: int) -> str | None:
    """The record's ``opening_move``: None, or a bounded string in a game the policy took a turn in."""
    value = data.get("opening_move")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_OPENING_CHARS:
        raise RecordError("opening_move", value, f"not a string of at most {MAX_OPENING_CHARS} characters")
    if model_turns == 0:
        raise RecordError("opening_move", value, "a game without a model turn has no opening reply")
    return value


def _outcome_from_returns(returns: Any, seat: int, result: str, claimed: float | None,
                          utility: UtilityRange) -> float:
    """The seat's normalised return, after checking the returns against the range, ``result`` and ``claimed``."""
    if not isinstance(returns, (list, tuple)) or len(returns) != utility.num_players:
        raise RecordError("returns", returns, f"needs one return per player ({utility.num_players})")
    values = []
    for i, value in enumerate(returns):
        if not _is_real(value) or not math.isfinite(float(value)):
            raise RecordError(f"returns[{i}]", value, "not a finite number")
        if not utility.low - _TOLERANCE <= float(value) <= utility.high + _TOLERANCE:
            raise RecordError(f"returns[{i}]", value, f"outside the game's utility range [{utility.low}, "
                                                     f"{utility.high}]")
        values.append(float(value))
    if utility.zero_sum and abs(sum(values)) > 1e-6 * max(1.0, utility.high - utility.low):
        raise RecordError("returns", returns, "do not sum to 0 in a zero-sum game")
    derived = result_from_returns(values, seat)
    if result != derived:
        raise RecordError("result", result, f"the returns {values} make it a {derived} for seat {seat}")
    outcome = utility.normalise(values[seat])
    if claimed is not None and abs(claimed - outcome) > _TOLERANCE:
        raise RecordError("normalised_return", claimed, f"the seat's return {values[seat]} normalises to {outcome}")
    return outcome


def _outcome_without_returns(result: str, claimed: float | None, utility: UtilityRange, case: str) -> float:
    """``claimed`` checked against ``result``: only possible in a two-player zero-sum game (the other player's
    return is minus the seat's), where win / draw / loss is a normalised return above / at / below 0.5."""
    if utility.num_players != 2 or not utility.zero_sum or claimed is None:
        raise RecordError("returns", None, f"needed to check the outcome of {case!r}")
    if not 0.0 <= claimed <= 1.0:
        raise RecordError("normalised_return", claimed, "outside [0, 1]")
    implied = "win" if claimed > 0.5 else "draw" if claimed == 0.5 else "loss"
    if result != implied:
        raise RecordError("result", result, f"normalised_return={claimed} makes it a {implied}")
    return claimed


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _reply_values(data: Mapping[str, Any], counts: dict[str, int]) -> list[int]:
    values = data.get("reply_values")
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) and hasattr(values, "tolist"):
        values = values.tolist()  # a numpy array after a trip through a batch
    if not isinstance(values, (list, tuple)) or any(isinstance(v, bool) or v not in (0, 1) for v in values):
        raise RecordError("reply_values", values, "not a list of 0s and 1s")
    if len(values) > counts["model_turns"]:
        raise RecordError("reply_values", values, f"more than model_turns={counts['model_turns']}")
    if sum(values) > counts["values_kept"]:
        raise RecordError("reply_values", values, f"more kept than values_kept={counts['values_kept']}")
    return [int(v) for v in values]


def _move_credit(data: Mapping[str, Any]) -> float:
    if data.get("move_credit") is None:
        return 0.0
    weight = _finite(data, "move_credit")
    if not 0.0 <= weight <= MAX_MOVE_CREDIT:
        raise RecordError("move_credit", weight, f"not in [0, {MAX_MOVE_CREDIT}]")
    return weight


def _finite(data: Mapping[str, Any], name: str) -> float:
    value = data.get(name)
    if not _is_real(value) or not math.isfinite(float(value)):
        raise RecordError(name, value, "not a finite number")
    return float(value)


def _count(data: Mapping[str, Any], name: str, default: int | None = None) -> int:
    """A non-negative integer field (an integral float, e.g. after a JSON or numpy round trip, is accepted)."""
    if name not in data and default is not None:
        return default
    value = data.get(name)
    if not _is_real(value) or not math.isfinite(float(value)) or float(value) != int(float(value)):
        raise RecordError(name, value, "not an integer")
    if int(value) < 0:
        raise RecordError(name, value, "negative")
    return int(value)


def _reason(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RecordError(name, value, "not a non-empty string")
    return value


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise RecordError(name, value, "not a string")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
