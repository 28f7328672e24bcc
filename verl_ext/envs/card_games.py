"""Poker and Hanabi as a player sees them: named small cases, and the acting player's view in words.

OpenSpiel's information-state strings are exact but terse (Kuhn poker's ``1pb``, Leduc's ``[Private: 3]``).
``card_game_view(game, state, player)`` turns what ``player`` may see into lines a model can follow: its own
cards by name, the public cards, the betting so far ("player 0 checked (Pass); you bet 1 chip (Bet)") and the
pot; for Hanabi the last moves and a legend of OpenSpiel's observation text. Everything comes from the player's
own view: the observer of OpenSpiel's default observation for ``player`` (Kuhn, Leduc), the player's
``information_state_string`` / ``observation_string`` (universal_poker, Hanabi) and OpenSpiel's
``action_to_string`` of the players' moves (public in these games). Chance outcomes are never read: the
history is replayed from the initial state and looked at only through ``player``'s view, so two states that
differ only in cards ``player`` cannot see give the same text (``tests/test_card_games.py``). Verbs such as
"checked" or "called" are read off the chips each move put in, as the view shows them; no game rule is coded
here.

Named cases (``NAMED_CASES``) are small configurations whose whole hands fit a training sample; ``game_types``
(``GAME_TYPES``) selects them by name beside the built-in cases.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pyspiel
from open_spiel.python.observation import make_observation

# Two-player limit hold'em on a 6-card deck (ranks 2-4, two suits): blinds 1/2, two hole cards, one board card
# in the second round, raises of 2 then 4, at most two per round. 1,890 information states: tabular CFR+ solves
# it in about a minute (0.06 s an iteration on a 2-core CPU), so it has a CFR reference policy like Leduc.
SMALL_HOLDEM = ("universal_poker(betting=limit,blind=1 2,firstPlayer=1 2,maxRaises=2 2,numBoardCards=0 1,"
                "numHoleCards=2,numPlayers=2,numRanks=3,numRounds=2,numSuits=2,raiseSize=2 4)")
# Two-player Hanabi with two colours of ranks 1-3 (12 cards), hands of two and three hint tokens (HLE's
# "Hanabi-Small" has hands of two and three hint tokens too, with ranks 1-5 and one life): a perfect game scores 6
# and lasts at most 31 moves (16 turns of the first player) where the built-in 5-colour game runs to 118; two
# uniformly random players score 1.07 on average (sd 1.47, 1,000 games).
SMALL_HANABI = "hanabi(colors=2,hand_size=2,max_information_tokens=3,players=2,ranks=3)"
# Names ``game_types`` accepts for cases outside the built-in list (a name selects its case).
NAMED_CASES: dict[str, str] = {
    "kuhn_poker": "kuhn_poker",
    "holdem_small": SMALL_HOLDEM,
    "hanabi_small": SMALL_HANABI,
}

POKER_GAMES = ("kuhn_poker", "leduc_poker", "universal_poker")
# Kuhn and Leduc cards by rank, lowest first (OpenSpiel: kuhn card i is the i-th lowest; leduc card c has rank
# c // 2, "0 = Jack1, 1 = Jack2, 2 = Queen1, ..., 5 = King2" in leduc_poker.h).
RANK_NAMES = ("Jack", "Queen", "King", "Ace")
LEDUC_SUITS = 2
# ACPC card text (universal_poker): rank character, suit character.
ACPC_RANKS = {"2": "2", "3": "3", "4": "4", "5": "5", "6": "6", "7": "7", "8": "8", "9": "9", "T": "10",
              "J": "Jack", "Q": "Queen", "K": "King", "A": "Ace"}
ACPC_SUITS = {"c": "clubs", "d": "diamonds", "h": "hearts", "s": "spades"}
HANABI_LEGEND = ("In move names, 'player +1' is the next player after the one moving. In the hands, your own cards "
                 "show as XX; after '||' is what is known of each card: its hinted colour and rank (X: not "
                 "hinted), then the colours and ranks it can still be. (Play i) and (Discard i) name the card in "
                 "position i of your hand, counting from 0 at the top.")


@dataclass(frozen=True)
class PokerView:
    """What one player sees of a poker state: its own cards, the public cards, each player's chips in the pot."""

    private: tuple[str, ...]
    public: tuple[str, ...]
    contributions: tuple[float, ...]
    stacks: tuple[float, ...] = ()  # chips each player has left, where they can run out (no-limit)


ViewFn = Callable[[pyspiel.State, int], PokerView]


def card_game_view(game: pyspiel.Game, state: pyspiel.State, player: int, raw_view: str) -> str:
    """The view of ``player`` at ``state``: for poker its cards, the betting and the pot in words (in place of
    OpenSpiel's terse ``raw_view``); for Hanabi the last moves before ``raw_view`` (OpenSpiel's observation text of
    the hands, tokens and fireworks); for any other game ``raw_view`` as is."""
    name = game.get_type().short_name
    if name in POKER_GAMES:
        return _poker_text(game, state, player, _view_fn(game))
    if name == "hanabi":
        return _hanabi_text(game, state, player) + "\n" + raw_view
    return raw_view


# ----------------------------------------------------------------------------------------------- poker
def _view_fn(game: pyspiel.Game) -> ViewFn:
    """The function reading ``PokerView`` for one game (an observer per call: observers are not thread-safe)."""
    name = game.get_type().short_name
    if name == "universal_poker":
        return _universal_view
    observer = make_observation(game)  # OpenSpiel's default observation: the player's own card, the pot
    params = game.get_parameters()
    if name == "kuhn_poker":
        names = RANK_NAMES if game.num_players() + 1 <= len(RANK_NAMES) else ()
        return lambda state, player: _observed_view(observer, state, player, lambda card: _rank(names, card))
    named = not params.get("suit_isomorphism", False) and game.num_players() + 1 <= len(RANK_NAMES)

    def leduc_card(card: int) -> str:
        return RANK_NAMES[card // LEDUC_SUITS] if named else f"card {card}"

    return lambda state, player: _observed_view(observer, state, player, leduc_card)


def _rank(names: tuple[str, ...], index: int) -> str:
    return names[index] if 0 <= index < len(names) else f"card {index}"


def _observed_view(observer, state: pyspiel.State, player: int, name: Callable[[int], str]) -> PokerView:
    """Kuhn / Leduc: OpenSpiel's default observation of ``player`` (private card, community card, pot shares)."""
    observer.set_from(state, player)
    tensors = observer.dict
    private = tuple(name(int(i)) for i in tensors["private_card"].nonzero()[0])
    public = tuple(name(int(i)) for i in tensors["community_card"].nonzero()[0]) if "community_card" in tensors else ()
    return PokerView(private, public, tuple(float(c) for c in tensors["pot_contribution"]))


_FIELD = re.compile(r"\[(\w+): ([^\]]*)\]")


def _fields(text: str) -> dict[str, str]:
    return dict(_FIELD.findall(text))


def _acpc_cards(text: str) -> tuple[str, ...]:
    cards = [text[i:i + 2] for i in range(0, len(text.strip()), 2)]
    return tuple(f"{ACPC_RANKS.get(c[0], c[0])} of {ACPC_SUITS.get(c[1:], c[1:])}" for c in cards if len(c) == 2)


def _universal_view(state: pyspiel.State, player: int) -> PokerView:
    """universal_poker: ``player``'s information-state string (its cards, the board) and observation string
    (each player's chips in the pot)."""
    info = _fields(state.information_state_string(player))
    seen = _fields(state.observation_string(player))
    contributions = tuple(float(c) for c in seen.get("PlayerContribution", "").split())
    limit = state.get_game().get_parameters().get("betting") == "limit"  # limit hold'em: stacks never bind
    stacks = () if limit else tuple(float(c) for c in seen.get("Money", "").split())
    return PokerView(_acpc_cards(info.get("Private", "").replace(" ", "")),
                     _acpc_cards(info.get("Public", "").replace(" ", "")), contributions, stacks)


def _amount(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else str(amount)


def _chips(amount: float) -> str:
    return f"{_amount(amount)} chip" if amount == 1 else f"{_amount(amount)} chips"


def _who(player: int, viewer: int) -> str:
    return "you" if player == viewer else f"player {player}"


def _bet_words(player: int, viewer: int, move: str, before: PokerView, after: PokerView) -> str:
    """One move in words, from the chips it put in: checked / folded (none), called, bet, raised to."""
    mine = before.contributions[player]
    put_in = after.contributions[player] - mine
    highest_other = max((c for p, c in enumerate(before.contributions) if p != player), default=mine)
    if put_in <= 0:
        verb = "folded" if highest_other > mine else "checked"
    elif after.contributions[player] <= highest_other:
        verb = f"called {_chips(put_in)}"
    elif highest_other > mine:
        verb = f"raised to {_chips(after.contributions[player])}"
    else:
        verb = f"bet {_chips(put_in)}"
    return f"{_who(player, viewer)} {verb} ({move})"


def _poker_text(game: pyspiel.Game, state: pyspiel.State, viewer: int, view: ViewFn) -> str:
    """Cards, the betting of every round so far and the pot, replayed through ``viewer``'s view only."""
    replay = game.new_initial_state()
    rounds: list[list[str]] = [[]]
    board: tuple[str, ...] = ()
    for step in state.full_history():
        if replay.is_chance_node():
            replay.apply_action(step.action)
            continue
        before = view(replay, viewer)
        if len(before.public) > len(board):  # public cards came since the last move: a new betting round
            board = before.public
            rounds.append([])
        move = replay.action_to_string(step.player, step.action)
        replay.apply_action(step.action)
        rounds[-1].append(_bet_words(step.player, viewer, move, before, view(replay, viewer)))
    now = view(state, viewer)
    if len(now.public) > len(board):
        rounds.append([])
    lines = [f"Your card{'s' if len(now.private) != 1 else ''}: {', '.join(now.private) or 'none'}."]
    if game.get_type().short_name != "kuhn_poker":
        label = "Public card" if game.get_type().short_name == "leduc_poker" else "Board"
        lines.append(f"{label}: {', '.join(now.public) or 'none yet'}.")
    if len(rounds) == 1:
        lines.append(f"Betting so far: {'; '.join(rounds[0]) or 'none yet'}.")
    else:
        lines += [f"Round {i} betting: {'; '.join(moves) or 'none yet'}." for i, moves in enumerate(rounds, 1)]
    shares = ", ".join(f"{_who(p, viewer)} put in {_amount(c)}" for p, c in enumerate(now.contributions))
    lines.append(f"Pot: {_chips(sum(now.contributions))} ({shares}).")
    if now.stacks:
        left = ", ".join(f"{_who(p, viewer)} {_amount(c)}" for p, c in enumerate(now.stacks))
        lines.append(f"Chips left: {left}.")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- hanabi
def card_game_notes(game: pyspiel.Game) -> str | None:
    """What a first prompt adds before its instructions (later turns of a compact game leave it out): for Hanabi
    the shared goal and the legend of OpenSpiel's observation text; None for other games."""
    if game.get_type().short_name != "hanabi":
        return None
    score = int(game.max_utility()) if float(game.max_utility()).is_integer() else game.max_utility()
    return (f"Hanabi is cooperative: all {game.num_players()} players share one score, the cards played onto the "
            f"fireworks (at most {score} here). {HANABI_LEGEND}")


def _hanabi_text(game: pyspiel.Game, state: pyspiel.State, viewer: int) -> str:
    """The moves since ``viewer``'s last turn, its own last move first."""
    replay = game.new_initial_state()
    moves: list[tuple[int, str]] = []
    for step in state.full_history():
        if not replay.is_chance_node():
            moves.append((step.player, replay.action_to_string(step.player, step.action)))
        replay.apply_action(step.action)
    start = max((i for i, (p, _) in enumerate(moves) if p == viewer), default=0)
    recent = "; ".join(f"{_who(p, viewer)}: {m}" for p, m in moves[start:]) or "none yet"
    return f"Last moves: {recent}."
