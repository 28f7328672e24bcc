"""Every registered adapter and every default case passes the one conformance check."""

import pyspiel
import pytest

from verl_ext.envs import env_names, make_env
from verl_ext.envs.card_games import NAMED_CASES, SMALL_HANABI
from verl_ext.envs.conformance import ConformanceError, check_adapter, check_private_view
from verl_ext.envs.logic_env import DEFAULT_CASES as LOGIC_CASES
from verl_ext.envs.openspiel_env import DEFAULT_CASES, OpenSpielAdapter

GAME_CASES = list(DEFAULT_CASES) + [c for c in NAMED_CASES.values() if c not in DEFAULT_CASES]
# per-step rewards: OpenSpiel MCTS refuses them (engine mode is rejected)
MCTS_FREE = {"hanabi(players=2)", SMALL_HANABI}
CASES = [("openspiel", c, mode) for c in GAME_CASES for mode in ("legal", "outcome", "engine")
         if not (mode == "engine" and c in MCTS_FREE)]
CASES += [("logic", c, None) for c in LOGIC_CASES]
HIDDEN = [c for c in GAME_CASES
          if pyspiel.load_game(c).get_type().information != pyspiel.GameType.Information.PERFECT_INFORMATION]


def test_every_registered_env_is_covered():
    assert set(env_names()) == {env for env, _, _ in CASES}


@pytest.mark.parametrize("env,case,mode", CASES, ids=[f"{e}-{c[:24]}-{m}" for e, c, m in CASES])
def test_default_case_conforms(env, case, mode):
    settings = {"cases": [case]}
    if mode:  # poker reference answers from a short CFR+ solve (the default 1000 takes ~1 min for holdem_small)
        settings.update(reward_mode=mode, mcts_simulations=40, outcome_playouts=2, playout_max_steps=200,
                        reference_cfr_iterations=50)
    check_adapter(make_env(env, settings), tasks_per_case=3, fresh=make_env(env, settings))


class _BrokenAdapter:
    """Scores a listing of every legal move as correct: the checker must catch it."""

    def __init__(self):
        self.inner = make_env("openspiel", {"cases": ["tic_tac_toe"]})
        self.name, self.config = self.inner.name, self.inner.config

    def cases(self):
        return self.inner.cases()

    def make_task(self, case, index, seed):
        return self.inner.make_task(case, index, seed)

    def reference_answer(self, task):
        return self.inner.reference_answer(task)

    def score(self, case, state, response):
        result = self.inner.score(case, state, response)
        if isinstance(response, str) and response.count("<answer>") > 1:
            return type(result)(1.0, True, True, 1.0, None)
        return result


def test_checker_catches_a_loophole():
    with pytest.raises(ConformanceError, match="hostile output"):
        check_adapter(_BrokenAdapter(), tasks_per_case=1)


@pytest.mark.parametrize("case", HIDDEN, ids=[c[:24] for c in HIDDEN])
def test_prompts_show_only_what_the_player_to_move_can_see(case):
    """Poker and Hanabi: states that differ only in cards the player to move cannot see give it the same prompt."""
    assert check_private_view(make_env("openspiel", {"cases": [case]}), case) > 0


class _LeakyAdapter(OpenSpielAdapter):
    """Shows the whole state (every hand) in its prompts: the private-view check must catch it."""

    def position_prompt(self, case, state, compact=False):
        return super().position_prompt(case, state, compact) + "\n" + str(state)


@pytest.mark.parametrize("case", ["kuhn_poker", SMALL_HANABI])
def test_private_view_check_catches_a_prompt_showing_hidden_cards(case):
    leaky = _LeakyAdapter(make_env("openspiel", {"cases": [case]}).config)
    with pytest.raises(ConformanceError, match="prompt differs"):
        check_private_view(leaky, case)
