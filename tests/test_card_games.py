"""Poker and Hanabi as training episodes (issue 47 items 1 and 4, CPU part): prompts in words from the acting
player's own view (never another player's cards), the named small cases, whole hands played and rewarded by
OpenSpiel's returns, and the reference moves of cold-start rows (a CFR+ average policy for poker, a random legal
move for Hanabi)."""

from __future__ import annotations

import collections
import itertools
import random
from pathlib import Path

import pyspiel
import pytest

from verl_ext.envs import ConfigError, make_env
from verl_ext.envs import cfr_policy as cfr
from verl_ext.envs.base import Task
from verl_ext.envs.card_games import NAMED_CASES, SMALL_HANABI, SMALL_HOLDEM
from verl_ext.envs.conformance import hostile_responses
from verl_ext.envs.episode import Opponent
from verl_ext.export import build_rows
from verl_ext.games import RECORD_FIELD
from verl_ext.games.demonstration import play_demonstration
from verl_ext.games.match import Match, MatchRules
from verl_ext.games.record_check import trusted_record
from verl_ext.mixture import EnvMixture
from verl_ext.reward import compute_score

CARD_CASES = ["kuhn_poker", "leduc_poker", SMALL_HOLDEM, SMALL_HANABI]
POKER = CARD_CASES[:3]


@pytest.fixture
def cfr_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A private CFR cache and an empty in-process memory (the reference solves are short ones)."""
    monkeypatch.setenv("VERL_EXT_CACHE", str(tmp_path / "cache"))
    cfr.forget_memory()
    yield tmp_path / "cache" / "cfr"
    cfr.forget_memory()


def _state(case: str, actions: list[int]) -> pyspiel.State:
    state = pyspiel.load_game(case).new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state


def _prompt(case: str, actions: list[int], **settings) -> str:
    adapter = make_env("openspiel", {"cases": [case], **settings})
    return adapter.position_prompt(case, _state(case, actions))


# ------------------------------------------------------------------------------------------ prompts
def test_kuhn_prompts_name_the_card_and_the_betting_in_words():
    # deal: player 0 the King (2), player 1 the Queen (1); player 0 passes (0)
    prompt = _prompt("kuhn_poker", [2, 1, 0])
    assert prompt.startswith("You are playing Kuhn Poker (kuhn_poker()) as player 1 of 2. It is your turn (move 3).\n"
                             "Your view of the game:\n"
                             "Your card: Queen.\n"
                             "Betting so far: player 0 checked (Pass).\n"
                             "Pot: 2 chips (player 0 put in 1, you put in 1).\n\n"
                             "Legal moves (write yours exactly as listed): Pass, Bet\n")
    # then player 1 bets (1): player 0 sees its King, its own check and the bet
    prompt = _prompt("kuhn_poker", [2, 1, 0, 1])
    assert ("Your card: King.\nBetting so far: you checked (Pass); player 1 bet 1 chip (Bet).\n"
            "Pot: 3 chips (you put in 1, player 1 put in 2).") in prompt
    assert "Queen" not in prompt and "2pb" not in prompt  # neither the opponent's card nor OpenSpiel's raw text


def test_leduc_and_holdem_prompts_show_rounds_public_cards_and_raises():
    # Leduc: player 0 King (4), player 1 Queen (2); check, raise, re-raise, call; public Jack (0); check
    prompt = _prompt("leduc_poker", [4, 2, 1, 2, 2, 1, 0, 1])
    assert ("Your card: Queen.\nPublic card: Jack.\n"
            "Round 1 betting: player 0 checked (Call); you bet 2 chips (Raise); player 0 raised to 5 chips (Raise); "
            "you called 2 chips (Call).\n"
            "Round 2 betting: player 0 checked (Call).\n"
            "Pot: 10 chips (player 0 put in 5, you put in 5).") in prompt
    assert "King" not in prompt
    # hold'em: player 0 gets 4d 2d, player 1 3c 3d; player 0 (small blind) raises; player 1 calls; board 2c
    game = pyspiel.load_game(SMALL_HOLDEM)
    state = game.new_initial_state()
    for card in ("4d", "2d", "3c", "3d"):
        state.apply_action(next(a for a in state.legal_actions() if state.action_to_string(a).endswith(card)))
    state.apply_action(2)  # player=0 move=Bet
    state.apply_action(1)  # player=1 move=Call
    state.apply_action(next(a for a in state.legal_actions() if state.action_to_string(a).endswith("2c")))
    prompt = make_env("openspiel", {"cases": [SMALL_HOLDEM]}).position_prompt(SMALL_HOLDEM, state)
    assert ("Your cards: 3 of diamonds, 3 of clubs.\nBoard: 2 of clubs.\n"
            "Round 1 betting: player 0 raised to 4 chips (player=0 move=Bet); "
            "you called 2 chips (player=1 move=Call).\n"
            "Round 2 betting: none yet.\nPot: 8 chips (player 0 put in 4, you put in 4).") in prompt
    assert "diamonds, 2" not in prompt and "4 of diamonds" not in prompt


@pytest.mark.parametrize("case, first, second, viewer_actions", [
    # Kuhn: player 0 holds the King; player 1 the Jack or the Queen
    ("kuhn_poker", [2, 0], [2, 1], [0]),
    # Leduc: player 0 holds a King, player 1 a Queen or a Jack; a raise, a call and the public King, or a check
    # and a raise; player 0 to move
    ("leduc_poker", [4, 2, 2, 1, 5], [4, 0, 2, 1, 5], [1]),
    ("leduc_poker", [4, 2, 1, 2], [4, 1, 1, 2], []),
])
def test_states_differing_only_in_the_opponents_card_give_the_same_prompt(case, first, second, viewer_actions):
    a, b = _state(case, first), _state(case, second)
    player = a.current_player()
    assert a.history() != b.history() and player == b.current_player()
    assert a.information_state_string(player) == b.information_state_string(player)
    adapter = make_env("openspiel", {"cases": [case]})
    assert adapter.position_prompt(case, a) == adapter.position_prompt(case, b)
    for action in viewer_actions:  # and after the player's next move (the opponent to act: its prompts differ)
        a.apply_action(action), b.apply_action(action)
        assert adapter.position_prompt(case, a) != adapter.position_prompt(case, b)


def test_holdem_and_hanabi_prompts_ignore_cards_the_player_cannot_see():
    adapter = make_env("openspiel", {"cases": [SMALL_HOLDEM, SMALL_HANABI]})
    game = pyspiel.load_game(SMALL_HOLDEM)
    prompts = set()
    for opponent_cards in (("3c", "3d"), ("4c", "3d"), ("2c", "4c")):  # player 1's hole cards
        state = game.new_initial_state()
        for card in ("4d", "2d", *opponent_cards):
            state.apply_action(next(a for a in state.legal_actions() if state.action_to_string(a).endswith(card)))
        assert state.current_player() == 0
        prompts.add(adapter.position_prompt(SMALL_HOLDEM, state))
    assert len(prompts) == 1 and "4 of diamonds, 2 of diamonds" in prompts.pop()
    # Hanabi: player 0 to move never sees its own two cards; player 1's hand stays the same
    game = pyspiel.load_game(SMALL_HANABI)
    prompts = set()
    for own in (("R1", "R1"), ("Y2", "R3"), ("Y1", "Y3")):
        state = game.new_initial_state()
        for card in (*own, "R2", "Y1"):  # player 0's two cards are dealt first, then player 1's
            state.apply_action(next(a for a in state.legal_actions() if state.action_to_string(a) == f"(Deal {card})"))
        assert state.current_player() == 0
        prompts.add(adapter.position_prompt(SMALL_HANABI, state))
    assert len(prompts) == 1


def test_hanabi_prompts_show_the_last_moves_and_the_legend_once():
    adapter = make_env("openspiel", {"cases": [SMALL_HANABI], "task_mode": "game"})
    episode = adapter.start_episode(SMALL_HANABI, 3, 0)
    assert "Last moves: none yet." in episode.prompt()
    first = episode.legal_moves()[0]
    episode.play(first)
    partner = episode.play_random()
    prompt = episode.prompt()
    assert f"Last moves: you: {first}; player 1: {partner}." in prompt
    assert "Hanabi is cooperative" in prompt and "at most 6 here" in prompt and "Info tokens:" in prompt
    compact = episode.prompt(compact=True)
    assert "Hanabi is cooperative" not in compact and "<answer>" not in compact and f"you: {first}" in compact


def test_every_listed_move_is_accepted_by_the_parser():
    for case in CARD_CASES:
        adapter = make_env("openspiel", {"cases": [case]})
        for seed in range(5):
            task = adapter.make_task(case, seed, seed)
            listed = task.messages[0]["content"].split("Legal moves (write yours exactly as listed): ")[1]
            assert listed.split("\n")[0] == ", ".join(task.legal_moves)
            for move in task.legal_moves:
                assert adapter.score(case, task.state, f"<answer>{move}</answer>").valid


def test_hanabi_answers_match_their_move_without_the_parentheses_case_or_a_trailing_mark():
    """Measured on the H200 (2026-11-27): a third of the rejected Hanabi replies named one legal move in other
    formatting (`Play 0` for `(Play 0)`). Such a reply is that move, in the game and in a single-move score; a
    reply naming no legal move, or not exactly one, is still rejected."""
    case = SMALL_HANABI
    adapter = make_env("openspiel", {"cases": [case]})
    episode = adapter.start_episode(case, 3, 0)
    legal = episode.legal_moves()
    assert "(Play 0)" in legal and "(Discard 0)" not in legal  # all information tokens left: no discard
    for answer in ("Play 0", "(play 0)", "(Play 0):", "  play   0. ", "(Play 0", "PLAY 0)", "Play 0!!"):
        check = episode.check(f"<answer>{answer}</answer>")
        assert (check.legal, check.move, check.reason) == (True, "(Play 0)", "ok"), answer
    for answer in ("Discard 0", "Play", "Play 0 or Play 1", "(Play 0)(Play 1)", "0", "Play 00", "Play 0 now"):
        check = episode.check(f"<answer>{answer}</answer>")
        assert not check.legal and check.reason == "illegal_move", answer
    task = adapter.make_task(case, 3, 3)
    scored = adapter.score(case, task.state, f"<answer>{task.legal_moves[0].strip('()').lower()}</answer>")
    exact = adapter.score(case, task.state, f"<answer>{task.legal_moves[0]}</answer>")
    assert scored.valid and scored == exact


def test_moves_outside_parentheses_stay_exact():
    """Letter case names another move in chess (`Bxc3` is not `bxc3`), so only moves written in parentheses match
    loosely: kuhn's `Bet` is not `bet`."""
    adapter = make_env("openspiel", {"cases": ["kuhn_poker"]})
    episode = adapter.start_episode("kuhn_poker", 0, 0)
    while episode.current_player() != 0:  # the deal
        episode.play_random()
    assert episode.check("<answer>Bet</answer>").legal
    for answer in ("bet", "Bet.", "(Bet)"):
        assert not episode.check(f"<answer>{answer}</answer>").legal, answer


# ------------------------------------------------------------------------------------------ cases
def test_game_types_name_the_small_cases(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GAME_TYPES", "kuhn_poker,leduc_poker,holdem_small,hanabi_small")
    assert make_env("openspiel", {"task_mode": "game"}).cases() == ["leduc_poker", "kuhn_poker", SMALL_HOLDEM,
                                                                     SMALL_HANABI]
    monkeypatch.delenv("GAME_TYPES")
    assert len(make_env("openspiel", {}).cases()) == 13  # named cases join only when named
    assert make_env("openspiel", {"game_types": ["universal_poker"]}).cases()[0].startswith(
        "universal_poker(betting=nolimit")  # the short name keeps meaning the built-in case
    assert make_env("openspiel", {"cases": [SMALL_HOLDEM, "kuhn_poker"], "game_types": ["holdem_small"]}).cases() == [
        SMALL_HOLDEM]
    with pytest.raises(ConfigError, match=r"game_types: 'holdem' matches no case \(available: .*hanabi_small, "
                                          r"hex, holdem_small, kuhn_poker"):
        make_env("openspiel", {"game_types": ["holdem"]})
    with pytest.raises(ConfigError, match="reference_cfr_iterations: must be in 1..1000000, got 0"):
        make_env("openspiel", {"reference_cfr_iterations": 0})


def test_game_rows_alternate_seats_and_always_preview_a_prompt():
    mixture = EnvMixture({"openspiel": {"game_types": list(NAMED_CASES) + ["leduc_poker"], "task_mode": "game",
                                        "num_tasks_per_case": 20}})
    rows = [mixture.row(ref, "train", i) for i, ref in enumerate(mixture.plan("train"))]
    for case in CARD_CASES:
        mine = [row for row in rows if row["extra_info"]["case"] == case]
        assert [row["extra_info"]["seat"] for row in mine] == [row["extra_info"]["task_id"] % 2 for row in mine]
        assert {row["extra_info"]["seat"] for row in mine} == {0, 1}
        assert all("<answer>" in row["prompt"][0]["content"] for row in mine)  # folds before the seat acts too


# ------------------------------------------------------------------------------------------ whole hands
def _policy(seed: int):
    """Mostly legal moves, sometimes a hostile reply (a retry, or a forfeit after two)."""
    rng = random.Random(seed)

    def reply(turn) -> object:
        if rng.random() < 0.2:
            task = Task("openspiel", "x", 0, 0, (), "", "", legal_moves=turn.legal_moves)
            return rng.choice(hostile_responses(task, rng, turn.legal_moves[-1]))
        return f"Reasoning.\n<answer>{rng.choice(turn.legal_moves)}</answer>"

    return reply


@pytest.mark.parametrize("case", CARD_CASES, ids=["kuhn", "leduc", "holdem_small", "hanabi_small"])
def test_whole_hands_are_rewarded_by_the_normalised_return(case: str, cfr_cache: Path):
    game = pyspiel.load_game(case)
    opponents = ["random", "self"] + (["cfr:30"] if case in POKER else [])
    mixture = EnvMixture({"openspiel": {"cases": [case], "task_mode": "game", "num_tasks_per_case": 12,
                                        "game": {"opponent": ",".join(opponents), "illegal_retries": 1}}})
    adapter = mixture.adapters["openspiel"]
    utility = adapter.utility_range(case)
    assert (utility.low, utility.high) == (game.min_utility(), game.max_utility())
    seen = set()
    for index, ref in enumerate(mixture.plan("train")):
        row = mixture.row(ref, "train", index)
        info = row["extra_info"]
        opponent = adapter.game_settings.opponent_for(info["seed"])
        match = Match(adapter.start_episode(case, info["seed"], info["seat"]), opponent,
                      MatchRules(illegal_retries=1))
        reply = _policy(index)
        while (turn := match.next_request()) is not None:
            match.submit(reply(turn))
        record = match.record
        checked = trusted_record(record.to_dict(), utility, case, opponent.label)
        scored = compute_score(row["data_source"], "the conversation", "", {**info, RECORD_FIELD: record.to_dict()})
        assert scored["failed"] == 0.0 and scored["game"] == 1.0
        if record.forfeit:
            assert scored["score"] == 0.0 and checked.result == "loss"
        else:
            mine = record.returns[record.seat]
            assert scored["score"] == pytest.approx((mine - game.min_utility()) / (game.max_utility() -
                                                                                    game.min_utility()))
            if case == SMALL_HANABI:  # the team score over the most it can be; one score for both seats
                assert record.returns[0] == record.returns[1] and record.result == "draw"
                assert scored["score"] == pytest.approx(mine / game.max_utility())
            else:
                assert sum(record.returns) == 0
        seen.add(opponent.label)
    assert seen == set(opponents)


@pytest.mark.parametrize("case", CARD_CASES, ids=["kuhn", "leduc", "holdem_small", "hanabi_small"])
def test_hostile_replies_never_crash_a_hand(case: str):
    adapter = make_env("openspiel", {"cases": [case], "task_mode": "game"})
    rng = random.Random(0)
    for seed, opponent in itertools.product(range(3), ("random", "self")):
        for seat in (0, 1):
            match = Match(adapter.start_episode(case, seed, seat), Opponent(opponent), MatchRules(illegal_retries=1))
            while (turn := match.next_request()) is not None:
                task = Task("openspiel", case, 0, 0, (), "", "", legal_moves=turn.legal_moves)
                match.submit(rng.choice(hostile_responses(task, rng, turn.legal_moves[-1])))
            assert match.record.done and match.record.model_moves == 0
            trusted_record(match.record.to_dict(), adapter.utility_range(case), case, opponent)


# ------------------------------------------------------------------------------------------ cold start
def test_poker_references_are_draws_from_the_cfr_average_policy(cfr_cache: Path):
    adapter = make_env("openspiel", {"cases": ["kuhn_poker"], "reference_cfr_iterations": 300})
    solved = cfr.cfr_policy("kuhn_poker", "cfr+", 300).policy
    # player 1 with the King facing a bet always calls, with the Jack always folds (CFR+ 300: probability > 0.99)
    for deal, expected in (([0, 2, 1], "Bet"), ([2, 0, 1], "Pass")):
        state = _state("kuhn_poker", deal)
        assert max(solved.action_probabilities(state).values()) > 0.99
        assert {adapter.reference_move("kuhn_poker", state, seed) for seed in range(20)} == {expected}
    # player 0 with the Jack bets with the policy's (mixed) probability, over 2,000 seeded draws
    state = _state("kuhn_poker", [0, 1])
    bet = solved.action_probabilities(state)[1]
    draws = [adapter.reference_move("kuhn_poker", state, seed) for seed in range(2000)]
    assert 0.05 < bet < 0.35 and abs(draws.count("Bet") / 2000 - bet) < 0.03
    # single-move rows: the task's own seeded draw, so an export is the same every time
    task = adapter.make_task("kuhn_poker", 3, 3)
    assert adapter.reference_answer(task) == adapter.reference_answer(task)
    assert adapter.reference_answer(task).removeprefix("<answer>").removesuffix("</answer>") in task.legal_moves
    assert sorted(p.name.split("-")[0] for p in cfr_cache.glob("*.json")) == ["kuhn_poker"]


def test_hanabi_and_holdem_references(cfr_cache: Path):
    adapter = make_env("openspiel", {"cases": [SMALL_HOLDEM, SMALL_HANABI], "reference_cfr_iterations": 20})
    episode = adapter.start_episode(SMALL_HANABI, 0, 0)
    moves = {adapter.reference_move(SMALL_HANABI, episode.state, seed) for seed in range(200)}
    assert moves == set(episode.legal_moves())  # a uniformly random legal move: every one comes up
    state = adapter.start_episode(SMALL_HOLDEM, 0, 0).state
    solved = cfr.cfr_policy(SMALL_HOLDEM, "cfr+", 20).policy.action_probabilities(state)
    draws = collections.Counter(adapter.reference_move(SMALL_HOLDEM, state, seed) for seed in range(400))
    support = {state.action_to_string(a) for a, p in solved.items() if p > 0}
    assert set(draws) <= support and len(draws) >= 1  # drawn from the hold'em CFR+ policy, nothing outside it


@pytest.mark.parametrize("case", CARD_CASES, ids=["kuhn", "leduc", "holdem_small", "hanabi_small"])
def test_sft_export_of_whole_hands_and_single_moves(case: str, cfr_cache: Path):
    settings = {"cases": [case], "num_tasks_per_case": 6, "reference_cfr_iterations": 20}
    games = EnvMixture({"openspiel": {**settings, "task_mode": "game", "game": {"opponent": "random"}}})
    rows, skipped = build_rows(games, "train", "sft", progress=False)
    assert rows and skipped <= 2  # a hold'em seat whose opponent folds first has no turn to demonstrate
    adapter = games.adapters["openspiel"]
    for row in rows:
        info = row["extra_info"]
        episode = adapter.start_episode(case, info["seed"], info["seat"])
        messages, record = play_demonstration(episode, Opponent("random"), MatchRules(illegal_retries=1))
        assert row["messages"] == messages and record.model_moves == record.model_turns > 0
    moves = EnvMixture({"openspiel": settings})
    reference, _ = build_rows(moves, "train", "sft", progress=False, answers="reference")
    rules, _ = build_rows(moves, "train", "sft", progress=False, answers="rules")
    single = moves.adapters["openspiel"]
    for ref_row, rules_row, ref in zip(reference, rules, moves.plan("train")):
        task = single.make_task(ref.case, ref.index, ref.seed)
        assert ref_row["response"] == single.reference_answer(task)
        assert rules_row["response"].removeprefix("<answer>").removesuffix("</answer>") in task.legal_moves
    # rules on whole hands: the same deals, a random legal move at every turn (tests/test_game_demonstrations.py)
    random_hands, _ = build_rows(games, "train", "sft", progress=False, answers="rules")
    assert [r["prompt"] for r in random_hands] == [r["prompt"] for r in rows]
    assert all(r["messages"][-1]["role"] == "assistant" for r in random_hands)
