"""What do one-ply tactics alone win in whole games? A scripted tactician (a random winning move, else a random move
that does not let the opponent win at once, else a random move: verl_ext/envs/tactics.py) against the eval's bots,
seats alternating, through the same episode code as the arena (OpenSpiel plays every move; the bots are the
arena's `random` and `mcts:N`, with its tie-breaking). `--player engine` plays the reward's engine move instead
(`OpenSpielAdapter.best_move`, what reference SFT rows teach): the level a model that imitates it perfectly reaches.
`--player best-response` plays OpenSpiel's exact best response to the uniform random policy (`BestResponsePolicy`:
the most return a player can expect against the `random` bot, so the ceiling of a win rate against it); it walks the
whole game tree, so only small games (tic_tac_toe: ~10 s a seat on 2 cores; connect_four does not fit).
`--player optimal` plays a random move among those of the best game-theoretic value (OpenSpiel's alpha-beta search,
`verl_ext/envs/exact_values.py`): never a move that loses a drawn or won position, no preference among the rest. It
is what a reward paying every value-keeping move would teach; same small games only.

    python bench/learning/tactician_games.py --cases tic_tac_toe,connect_four --opponents random,mcts:50 --games 200

The reference for issue 45's full-game targets (>= 85 % wins against random): a model that has learnt these
tactics and nothing else would win about this often. Prints a table; --out writes the numbers as JSON. The
tactician also plays in `verl-ext eval`'s own arena, on the model evals' games (`--models t=scripted:tactician`,
docs/eval.md); the engine and best-response players are only here.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from open_spiel.python.algorithms.best_response import BestResponsePolicy
from open_spiel.python.policy import UniformRandomPolicy

from verl_ext.envs import make_env
from verl_ext.envs.episode import parse_opponent
from verl_ext.envs.exact_values import best_actions, exact_problem_of
from verl_ext.envs.openspiel_env import load_game
from verl_ext.envs.tactics import one_ply
from verl_ext.evaluation.report import wdl_text
from verl_ext.evaluation.stats import proportion
from verl_ext.seeding import stable_seed


def tactician_move(case: str, state_str: str, legal: list[int], rng: random.Random) -> int:
    """The scripted tactician's action in a position (random among its tactical moves)."""
    tactics = one_ply(case, state_str)
    pool = sorted(tactics.tactical_moves()) if tactics is not None else sorted(legal)
    return rng.choice(pool)


def optimal_move(case: str, state, rng: random.Random) -> int:
    """A random action among those of the best exact value for the player to move (alpha-beta to the end)."""
    return rng.choice(sorted(best_actions(case, state)))


PLAYERS = ("tactician", "engine", "best-response", "optimal")
# games whose whole tree BestResponsePolicy can walk in seconds (connect_four's ~4.5e12 states cannot be)
BEST_RESPONSE_CASES = ("tic_tac_toe",)


class BestResponse:
    """OpenSpiel's best response to the uniform random policy, one per seat, built on first use."""

    def __init__(self, case: str) -> None:
        if case not in BEST_RESPONSE_CASES:
            raise SystemExit(f"--player best-response walks the whole game tree; case {case!r} is too large for it "
                             f"(it runs on {', '.join(BEST_RESPONSE_CASES)})")
        self.game = load_game(case)
        self.by_seat: dict[int, BestResponsePolicy] = {}

    def action(self, state, seat: int) -> int:
        """The best response's action for ``seat`` in ``state`` (a pyspiel state, ``seat`` to move)."""
        if seat not in self.by_seat:
            self.by_seat[seat] = BestResponsePolicy(self.game, seat, UniformRandomPolicy(self.game))
        return self.by_seat[seat].best_response_action(state.information_state_string(seat))


def play(case: str, opponent_text: str, games: int, seed: int = 0, mcts_simulations: int = 300,
         player: str = "tactician", best_response: BestResponse | None = None) -> dict:
    """``games`` games of ``player`` (one of ``PLAYERS``) against ``opponent_text``, game ``i`` in seat ``i % 2``
    (``best_response``: one already built for ``case``, reused across opponents)."""
    if player not in PLAYERS:
        raise SystemExit(f"--player: one of {', '.join(PLAYERS)}, got {player!r}")
    adapter = make_env("openspiel", {"game_types": [case], "mcts_simulations": mcts_simulations})
    opponent = parse_opponent(opponent_text, "--opponents")
    if player != "best-response":
        best_response = None  # only the best-response player consults one
    elif best_response is None:
        best_response = BestResponse(case)
    if player == "optimal":
        problem = exact_problem_of(case)
        if problem:
            raise SystemExit(f"--player optimal searches to the end of the game; case {case!r} cannot be: {problem}")
    results = {"win": 0, "draw": 0, "loss": 0}
    by_seat = [{"win": 0, "draw": 0, "loss": 0} for _ in range(2)]
    for game in range(games):
        seat = game % 2
        episode = adapter.start_episode(case, stable_seed(seed, case, opponent.label, game), seat)
        rng = random.Random(stable_seed(seed, "tactician", case, game))
        while not episode.is_over():
            if episode.current_player() == seat:
                state = episode.state
                if player == "engine":
                    episode.play(adapter.best_move(case, state.serialize()))
                elif player == "optimal":
                    episode.play(state.action_to_string(seat, optimal_move(case, state, rng)))
                elif best_response is not None:
                    episode.play(state.action_to_string(seat, best_response.action(state, seat)))
                else:
                    action = tactician_move(case, state.serialize(), state.legal_actions(), rng)
                    episode.play(state.action_to_string(seat, action))
            else:
                episode.play_bot(opponent)
        mine, theirs = episode.state.returns()[seat], episode.state.returns()[1 - seat]
        outcome = "win" if mine > theirs else "loss" if mine < theirs else "draw"
        results[outcome] += 1
        by_seat[seat][outcome] += 1
    return {"case": case, "player": player, "opponent": opponent.label, "games": games,
            **{k: proportion(v, games) for k, v in results.items()}, "by_seat": by_seat}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="tic_tac_toe,connect_four")
    parser.add_argument("--opponents", default="random,mcts:50")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--player", choices=PLAYERS, default="tactician")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        best_response = BestResponse(case) if args.player == "best-response" else None
        rows += [play(case, opponent, args.games, args.seed, player=args.player, best_response=best_response)
                 for opponent in args.opponents.split(",")]
    print("| case | player | opponent | games | win % [95 % Wilson] | draw % | loss % | first seat W/D/L | "
          "second seat W/D/L |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        win = row["win"]
        print(f"| {row['case']} | {row['player']} | {row['opponent']} | {row['games']} | {100 * win['rate']:.1f} "
              f"[{100 * win['ci_low']:.1f}, {100 * win['ci_high']:.1f}] | {100 * row['draw']['rate']:.1f} | "
              f"{100 * row['loss']['rate']:.1f} | " +
              " | ".join(wdl_text(seat) for seat in row["by_seat"]) + " |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
