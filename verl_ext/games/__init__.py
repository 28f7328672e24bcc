"""Full games: the one game loop (``match.py``), its reward (``scoring.py``) and verl's agent loop that plays
one game per sample (``agent_loop.py``, registered through ``agent_loops.yaml``). See docs/games.md."""

from pathlib import Path

# The name game rows carry in their ``agent_name`` column, and the file that registers it with verl
# (``actor_rollout_ref.rollout.agent.agent_loop_config_path``; verl needs a real path, not pkg://).
GAME_AGENT_NAME = "verl_ext_game"
SINGLE_TURN_AGENT_NAME = "single_turn_agent"
AGENT_LOOP_CONFIG = Path(__file__).resolve().parent / "agent_loops.yaml"
# Where the agent loop puts the game record in a sample's extra fields (the reward reads it there).
RECORD_FIELD = "verl_ext_game"
