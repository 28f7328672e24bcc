"""Environment adapters behind one protocol, and their registry.

Adding an env: write ``verl_ext/envs/<name>_env.py`` with an adapter class (see ``base.EnvAdapter``)
and add one ``register_env(...)`` line below. Adapters that also play whole games implement
``episode.EpisodeEnv`` (``start_episode``, ``utility_range``).
"""

from .base import EnvAdapter, ScoreResult, Task
from .config import ConfigError
from .episode import Episode, EpisodeEnv, MoveCheck, Opponent, UtilityRange
from .logic_env import LogicAdapter
from .openspiel_env import OpenSpielAdapter
from .registry import env_names, make_env, register_env

register_env(OpenSpielAdapter)
register_env(LogicAdapter)

__all__ = ["ConfigError", "EnvAdapter", "Episode", "EpisodeEnv", "MoveCheck", "Opponent", "ScoreResult", "Task",
           "UtilityRange", "env_names", "make_env", "register_env"]
