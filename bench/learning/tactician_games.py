"""What do one-ply tactics alone win in whole games? A scripted tactician (a random winning move, else a random move
that does not let the opponent win at once, else a random move: verl_ext/envs/tactics.py) against the eval's bots,
seats alternating, through the same episode code as the arena (OpenSpiel plays every move; the bots are the
arena's `random` and `mcts:N`, with its tie-breaking). `--player engine` plays the reward's engine move instead
(`OpenSpielAdapter.best_move`, what reference SFT rows teach): the level a model that imitates it perfectly reaches.

    python bench/learning/tactician_games.py --cases tic_tac_toe,connect_four --opponents random,mcts:50 --games 200

The reference for issue 45's full-game targets (>= 85 % wins against random): a model that has learnt these
tactics and nothing else would win about this often. Prints a table; --out writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from verl_ext.envs import make_env
from verl_ext.envs.episode import parse_opponent
from verl_ext.envs.tactics import one_ply
from verl_ext.evaluation.stats import proportion
from verl_ext.seeding import stable_seed


def tactician_move(case: str, state_str: str, legal: list[int], rng: random.Random) -> int:
    """The scripted tactician's action in a position (random among its tactical moves)."""
    tactics = one_ply(case, state_str)
    pool = sorted(tactics.tactical_moves()) if tactics is not None else sorted(legal)
    return rng.choice(pool)


def play(case: str, opponent_text: str, games: int, seed: int = 0, mcts_simulations: int = 300,
         player: str = "tactician") -> dict:
    """``games`` games of ``player`` (tactician or engine) against ``opponent_text``, game ``i`` in seat ``i % 2``."""
    adapter = make_env("openspiel", {"game_types": [case], "mcts_simulations": mcts_simulations})
    opponent = parse_opponent(opponent_text, "--opponents")
    results = {"win": 0, "draw": 0, "loss": 0}
    for game in range(games):
        seat = game % 2
        episode = adapter.start_episode(case, stable_seed(seed, case, opponent.label, game), seat)
        rng = random.Random(stable_seed(seed, "tactician", case, game))
        while not episode.is_over():
            if episode.current_player() == seat:
                state = episode.state
                if player == "engine":
                    episode.play(adapter.best_move(case, state.serialize()))
                else:
                    action = tactician_move(case, state.serialize(), state.legal_actions(), rng)
                    episode.play(state.action_to_string(seat, action))
            else:
                episode.play_bot(opponent)
        mine, theirs = episode.state.returns()[seat], episode.state.returns()[1 - seat]
        results["win" if mine > theirs else "loss" if mine < theirs else "draw"] += 1
    return {"case": case, "player": player, "opponent": opponent.label, "games": games,
            **{k: proportion(v, games) for k, v in results.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="tic_tac_toe,connect_four")
    parser.add_argument("--opponents", default="random,mcts:50")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--player", choices=("tactician", "engine"), default="tactician")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = [play(case, opponent, args.games, args.seed, player=args.player)
            for case in args.cases.split(",") for opponent in args.opponents.split(",")]
    print("| case | player | opponent | games | win % [95 % Wilson] | draw % | loss % |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        win = row["win"]
        print(f"| {row['case']} | {row['player']} | {row['opponent']} | {row['games']} | {100 * win['rate']:.1f} "
              f"[{100 * win['ci_low']:.1f}, {100 * win['ci_high']:.1f}] | {100 * row['draw']['rate']:.1f} | "
              f"{100 * row['loss']['rate']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
