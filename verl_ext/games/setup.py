"""What a full-game row says about its game: the adapter, the settings and the deal (case, seed, seat).

Training's agent loop (``agent_loop.py``) and ``verl-ext signal`` both start a row's game from here, so both play
exactly the game the row names against the opponent its seed draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..envs.config import to_plain
from ..envs.episode import EpisodeEnv
from ..envs.game_settings import GameSettings
from ..envs.registry import cached_env
from .match import Match, MatchRules


@dataclass(frozen=True)
class GameSetup:
    """What a game row says about its game (``extra_info`` written by ``verl_ext.mixture.task_row``)."""

    adapter: EpisodeEnv
    settings: GameSettings
    case: str
    seed: int
    seat: int

    def new_match(self) -> Match:
        """A fresh game of this deal against the opponent its seed draws, under the settings' rules (the record
        carries the settings' ``move_credit``, which the advantage patch reads)."""
        episode = self.adapter.start_episode(self.case, self.seed, self.seat)
        opponent = self.settings.opponent_for(self.seed, self.case)
        match = Match(episode, opponent, MatchRules.from_settings(self.settings))
        match.record.move_credit = self.settings.move_credit
        return match


def game_setup(extra_info: Any) -> GameSetup:
    """The adapter and game of a row; a clear error for a row that is not a verl-ext game row."""
    info = to_plain(extra_info) if extra_info is not None else {}
    if not isinstance(info, dict) or info.get("mode") != "game":
        raise ValueError(f"a row that is not a full-game row (extra_info.mode="
                         f"{info.get('mode') if isinstance(info, dict) else None!r}); only rows made with "
                         "data.env.<env>.task_mode=game|mixed are played as whole games")
    adapter = cached_env(str(info["env"]), str(info.get("env_config") or ""))
    if not isinstance(adapter, EpisodeEnv) or not isinstance(getattr(adapter, "game_settings", None), GameSettings):
        raise ValueError(f"env {info['env']!r} does not play full games")
    return GameSetup(adapter, adapter.game_settings, str(info["case"]), int(info["seed"]), int(info["seat"]))
