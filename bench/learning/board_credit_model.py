"""Does one reward per whole game hold tic_tac_toe GRPO below 85 % against random, and would credit per move lift it?

Every whole-game arm on SmolLM2 ends at 72-82 % against random at tic_tac_toe, losing at the second seat; paying the
share of moves that kept the exact value (``game.value_weight``) did not help on the GPU
(docs/runs/2026-11-29-h200-boardgames-tactics-value/): the game's one scalar spreads its credit over every move, and
the share pays the good moves of a lost game. This script trains a tabular policy the way verl trains the model, on
the project's own games and reward, and compares three ways of crediting the moves:
- ``outcome``: the runs' reward (``score_game``: outcome, format share 0.1, one-ply tactics share 0.3), one GRPO
  advantage per game for all its moves (the control);
- ``value``: the same with ``game.value_weight`` 0.3 (the value arm);
- ``per-move``: the control's game advantage plus, for each move, a GRPO advantage of its own: whether it kept the
  position's exact value (``exact_values.best_actions``), normalised over the group's moves (``--move-credit``
  scales it). It is what the project's turn-level credit (``verl_ext/patches/move_credit.py``) gives.
- ``per-move-tactic``: as ``per-move``, the target being "kept the value AND played the one-ply tactic where the
  position has one" (took a win on the board; else, facing a threat, did not let it win at once: ``tactics.one_ply``
  and ``tactic_flags``, as the reward's tactics share reads them). Keeping a forced win for later, or any move of a
  lost position, no longer meets it when a win or a block is on the board.
- ``per-move-baseline``: the move advantage is ``--move-credit`` x (1[kept the value] - the share of the position's
  legal moves that keep it): a baseline per position instead of the group's normalisation, so a position where
  every move keeps the value gives 0 and finding the one good move gives most.
- ``per-move-tactic-baseline``: that baseline with ``per-move-tactic``'s target.

The model: a softmax over the legal cells of every position the policy meets, logits = a per-position term plus one
shared term per cell (one token per cell serves every position in the LLM). The start is a stand-in for the cold
start: per-position logits ``--start-keep`` for the moves that keep the value plus Gaussian noise (``--start-noise``,
seeded by position), which also serves as the KL reference. Each step plays ``--groups`` groups x 8 games through
``games.match.Match`` (the agent loop's rules and records), half against random and half against MCTS(50) as the
runs' tic_tac_toe mix, seats alternating by group; the games of a group share their seed (verl's rollouts of one
prompt share its ``extra_info``). Loss per move, token-mean: ``-A log pi`` plus KL 0.1 (k3, verl's ``low_var_kl``) to
the start, two Adam steps a step (the minibatches), gradients clipped to norm 1. Eval: ``--eval-games`` greedy games
against random, seats alternating, as the arena plays them, with the share of moves that kept the value, the share
of the policy's turns with a one-move win on the board where it took one ("took the win"), the share with a threat
to block where it blocked, and the second seat's W/D/L.

It is a model of credit assignment, not of SmolLM2: a table learns each position on its own (the shared term
aside), where the LLM generalises across positions and sees the earlier moves in its conversation.

    .venv/bin/python bench/learning/board_credit_model.py --variants outcome,value,per-move --seeds 2 \\
        --out docs/runs/X/credit.json --plot docs/runs/X/credit.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verl_ext.envs import make_env
from verl_ext.envs.episode import parse_opponent
from verl_ext.envs.exact_values import best_actions
from verl_ext.envs.tactics import one_ply, tactic_flags
from verl_ext.evaluation.stats import proportion
from verl_ext.games.match import Match, MatchRules, credit_target_met
from verl_ext.games.scoring import score_game
from verl_ext.seeding import stable_seed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from poker_grpo_model import TableOptimiser, group_advantages, masked_softmax  # noqa: E402  (bench/ is not a package)

CASE = "tic_tac_toe"
CELLS = 9
GROUP = 8
# tic_tac_toe has 4,520 non-terminal positions; the policy meets those where it is to move
MAX_POSITIONS = 4600
TARGETS = ("kept", "tactic")  # a move's credit target: kept the value / kept it and played the one-ply tactic
BASELINES = ("group", "position")  # (v - mean) / (std + 1e-6) over the group's moves / v - the position's share


@dataclass(frozen=True)
class Credit:
    """How a variant credits moves: the reward's ``value_weight``, the per-move target (None: whole-game credit
    only) and the per-move baseline."""

    value_weight: float = 0.0
    target: str | None = None
    baseline: str = "group"

    def __post_init__(self) -> None:
        if self.target not in (None, *TARGETS) or self.baseline not in BASELINES:
            raise ValueError(f"credit target {self.target!r} / baseline {self.baseline!r}")


VARIANTS = {
    "outcome": Credit(),
    "value": Credit(value_weight=0.3),
    "per-move": Credit(target="kept"),
    "per-move-tactic": Credit(target="tactic"),
    "per-move-baseline": Credit(target="kept", baseline="position"),
    "per-move-tactic-baseline": Credit(target="tactic", baseline="position"),
}
OPPONENTS = ("random", "mcts:50")


@dataclass
class Moves:
    """The policy's moves of a batch of games: position row, action, game index, kept the exact value, kept it and
    played the one-ply tactic (``TabularPolicy.tactic``)."""

    rows: list[int] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    games: list[int] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    tactic: list[float] = field(default_factory=list)

    def values(self, target: str) -> list[float]:
        """The 0/1 per move of ``target`` (``TARGETS``)."""
        return self.kept if target == "kept" else self.tactic


def tactic_moves(state) -> np.ndarray:
    """Per cell: whether the move plays the position's one-ply tactic (``tactic_flags``, as the agent loop's
    ``move_tactics`` reads it): takes a win where one is on the board, else does not let a threat win at once where
    one must be blocked; every legal move where the position has neither."""
    tactics = one_ply(CASE, state.serialize())
    out = np.zeros(CELLS, dtype=bool)
    for action in state.legal_actions():
        # the agent loop's own rule (reply_values), asked as if the move kept the value: the tactic part alone
        out[action] = credit_target_met(True, tactic_flags(tactics, action))
    return out


class TabularPolicy:
    """Per-position logits (made on first sight from the stand-in cold start) plus one shared logit per cell."""

    def __init__(self, keep_logit: float, noise: float, seed: int) -> None:
        self.keep_logit, self.noise, self.seed = keep_logit, noise, seed
        self.rows: dict[str, int] = {}
        self.per_state = np.zeros((MAX_POSITIONS, CELLS))
        self.legal = np.zeros((MAX_POSITIONS, CELLS), dtype=bool)
        self.kept = np.zeros((MAX_POSITIONS, CELLS), dtype=bool)
        self.tactic = np.zeros((MAX_POSITIONS, CELLS), dtype=bool)  # kept the value and played the one-ply tactic
        self.shared = np.zeros(CELLS)
        self.reference = np.zeros((MAX_POSITIONS, CELLS))

    def row(self, state) -> int:
        key = str(state)  # the board: move orders that reach one position share its row
        if key not in self.rows:
            row = self.rows[key] = len(self.rows)
            legal = state.legal_actions()
            self.legal[row, legal] = True
            self.kept[row, sorted(best_actions(CASE, state))] = True
            self.tactic[row] = self.kept[row] & tactic_moves(state)
            noise = np.random.default_rng(stable_seed(self.seed, key)).normal(0.0, self.noise, CELLS)
            self.per_state[row] = np.where(self.legal[row], self.keep_logit * self.kept[row] + noise, 0.0)
            self.reference[row] = masked_softmax(self.per_state[row][None], self.legal[row][None])[0]
        return self.rows[key]

    def target(self, target: str) -> np.ndarray:
        """The per-position mask of the moves meeting ``target`` (``TARGETS``)."""
        return self.kept if target == "kept" else self.tactic

    def probs(self, rows: np.ndarray | list[int]) -> np.ndarray:
        rows = np.asarray(rows, dtype=int)
        return masked_softmax(self.per_state[rows] + self.shared, self.legal[rows])


def play(policy: TabularPolicy, env, seed: int, seat: int, opponent: str, rng: np.random.Generator | None,
         moves: Moves | None = None, game_index: int = 0):
    """One game through ``Match``; the policy samples (``rng``) or plays greedily (None). Returns its record."""
    match = Match(env.start_episode(CASE, seed, seat), parse_opponent(opponent, "opponent"), MatchRules())
    while match.next_request() is not None:
        state = match.episode.state
        row = policy.row(state)
        p = policy.probs([row])[0]
        action = int(rng.choice(CELLS, p=p)) if rng is not None else int(np.argmax(p))
        if moves is not None:
            moves.rows.append(row)
            moves.actions.append(action)
            moves.games.append(game_index)
            moves.kept.append(float(policy.kept[row, action]))
            moves.tactic.append(float(policy.tactic[row, action]))
        match.submit(f"<answer>{state.action_to_string(seat, action)}</answer>")
    return match.record


def move_advantages(moves: Moves, group_of_game: np.ndarray, target: str = "kept") -> np.ndarray:
    """Per move: whether it met ``target`` (kept the value), normalised over its group's moves (0 where every move
    agreed)."""
    kept, groups = np.array(moves.values(target), dtype=float), group_of_game[np.array(moves.games, dtype=int)]
    out = np.zeros_like(kept)
    for g in np.unique(groups):
        mine = groups == g
        std = kept[mine].std(ddof=1) if mine.sum() > 1 else 0.0
        if std > 1e-9:
            out[mine] = (kept[mine] - kept[mine].mean()) / (std + 1e-6)
    return out


def position_advantages(moves: Moves, policy: TabularPolicy, target: str = "kept") -> np.ndarray:
    """Per move: whether it met ``target`` less the share of its position's legal moves that meet it (0 where every
    move does, or none)."""
    rows, actions = np.array(moves.rows, dtype=int), np.array(moves.actions, dtype=int)
    mask, legal = policy.target(target)[rows], policy.legal[rows]
    share = (mask & legal).sum(axis=1) / legal.sum(axis=1)
    return mask[np.arange(len(rows)), actions] - share


def credit_advantages(credit: Credit, moves: Moves, policy: TabularPolicy, group_of_game: np.ndarray) -> np.ndarray:
    """The per-move advantage ``credit`` adds to the game's (unscaled; zeros for whole-game credit)."""
    if credit.target is None:
        return np.zeros(len(moves.rows))
    if credit.baseline == "position":
        return position_advantages(moves, policy, credit.target)
    return move_advantages(moves, group_of_game, credit.target)


def group_seat(group: int, game_seed: int, second_seat: float) -> int:
    """The policy's seat in training group ``group``: at a share of 0.5 alternating every two groups (each opponent
    meets both seats, as the runs' rows alternate), else second with probability ``second_seat``, drawn from the
    group's seed (as ``game.seat_weights`` draws a row's seat)."""
    if second_seat == 0.5:
        return (group // 2) % 2
    return int(np.random.default_rng(stable_seed(game_seed, "seat")).random() < second_seat)


def evaluate(policy: TabularPolicy, env, games: int, seed: int) -> dict:
    """Greedy games against random, seats alternating: wins, second-seat W/D/L, share of moves that kept the value,
    share of the turns with a one-move win on the board where the policy took one (``took_win``) and of those with a
    threat to block where it blocked (``blocked``), each with its turn count."""
    results, second = {"win": 0, "draw": 0, "loss": 0}, {"win": 0, "draw": 0, "loss": 0}
    counts = dict.fromkeys(("kept", "turns", "taken", "win_chances", "blocks", "block_chances"), 0)
    for game in range(games):
        record = play(policy, env, stable_seed(seed, "eval", game), game % 2, "random", None)
        results[record.result] += 1
        if game % 2:
            second[record.result] += 1
        for key, value in (("kept", record.values_kept), ("turns", record.value_turns), ("taken", record.wins_taken),
                           ("win_chances", record.win_chances), ("blocks", record.blocks_made),
                           ("block_chances", record.block_chances)):
            counts[key] += value
    return {"win": proportion(results["win"], games), "second_seat": second, "kept": _share(counts, "kept", "turns"),
            "took_win": _share(counts, "taken", "win_chances"), "win_chances": counts["win_chances"],
            "blocked": _share(counts, "blocks", "block_chances"), "block_chances": counts["block_chances"]}


def _share(counts: dict[str, int], hits: str, chances: str) -> float | None:
    return counts[hits] / counts[chances] if counts[chances] else None


def train(variant: str, steps: int, seed: int, lr: float, beta: float, groups: int, move_credit: float,
          keep_logit: float, noise: float, every: int, eval_games: int, second_seat: float = 0.5) -> list[dict]:
    """One run; a record every ``every`` steps (step 0: the start). ``second_seat``: the share of training groups
    in which the policy plays second (0.5: seats alternate by group, as the runs' rows do by default; else drawn
    per group, as ``game.seat_weights`` draws them per row)."""
    credit = VARIANTS[variant]
    env = make_env("openspiel", {"cases": [CASE], "task_mode": "game",
                                 "game": {"tactics_weight": 0.3, "value_weight": credit.value_weight}})
    settings = env.game_settings
    policy = TabularPolicy(keep_logit, noise, seed)
    rng = np.random.default_rng(stable_seed(seed, variant))
    optimiser, records = TableOptimiser(policy.shared, policy.per_state), []
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            records.append({"step": step, **evaluate(policy, env, eval_games, seed), "positions": len(policy.rows)})
        if step == steps:
            break
        for half in np.array_split(np.arange(groups), 2):
            moves, scores, group_of_game = Moves(), [], []
            for g in half:
                opponent, game_seed = OPPONENTS[int(g) % 2], stable_seed(seed, variant, step, int(g))
                seat = group_seat(int(g), game_seed, second_seat)
                for _ in range(GROUP):
                    record = play(policy, env, game_seed, seat, opponent, rng, moves, len(scores))
                    scores.append(score_game(record, settings, valued=True).score)
                    group_of_game.append(int(g))
            if not moves.rows:
                continue
            adv = group_advantages(np.array(scores), GROUP)[np.array(moves.games)]
            if credit.target is not None:
                adv = adv + move_credit * credit_advantages(credit, moves, policy, np.array(group_of_game))
            rows, actions = np.array(moves.rows), np.array(moves.actions)
            optimiser.step(rows, actions, adv, policy.probs(rows), policy.legal[rows], policy.reference[rows, actions],
                           beta, 0.0, lr)
    return records


def plot(results: dict[str, list[list[dict]]], path: Path, title: str) -> None:
    """Wins against random, moves kept and wins taken, per variant: the mean over seeds and the min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    reads = (lambda r: 100 * r["win"]["rate"], lambda r: 100 * r["kept"],
             lambda r: 100 * r["took_win"] if r.get("took_win") is not None else np.nan)
    for variant, runs in results.items():
        steps = [r["step"] for r in runs[0]]
        for ax, read in zip(axes, reads):
            values = np.array([[read(r) for r in run] for run in runs])
            line, = ax.plot(steps, values.mean(axis=0), marker="o", ms=3, label=variant)
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.15)
    axes[0].axhline(85, color="grey", ls="--", lw=1, label="issue 45's 85 %")
    axes[0].set(xlabel="GRPO step", ylabel="greedy wins vs random (%)", title="tic_tac_toe wins against random")
    axes[1].set(xlabel="GRPO step", ylabel="moves that kept the value (%)", title="moves that kept the exact value")
    axes[2].set(xlabel="GRPO step", ylabel="wins taken (%)", title="turns with a one-move win where it took one")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):5.1f}" if values else "  n/a"


def print_curves(variant: str, runs: list[list[dict]], eval_games: int) -> None:
    """One line per eval step: means over seeds (wins with min-max) and each seed's second-seat losses."""
    for i, record in enumerate(runs[0]):
        wins = [100 * run[i]["win"]["rate"] for run in runs]
        kept = [100 * run[i]["kept"] for run in runs]
        losses = [run[i]["second_seat"]["loss"] for run in runs]
        took = [100 * run[i]["took_win"] for run in runs if run[i].get("took_win") is not None]
        blocked = [100 * run[i]["blocked"] for run in runs if run[i].get("blocked") is not None]
        print(f"{variant:24s} step {record['step']:3d} | wins vs random {np.mean(wins):5.1f} "
              f"[{min(wins):.1f}, {max(wins):.1f}] | kept {np.mean(kept):5.1f} | took win {_mean(took)} | "
              f"blocked {_mean(blocked)} | second-seat losses {'/'.join(map(str, losses))} of "
              f"{eval_games // 2}", flush=True)


def final_table(results: dict[str, list[list[dict]]]) -> str:
    """A markdown table at each variant's last eval: mean [min, max] over seeds of wins against random (%),
    second-seat losses (games), took the win, blocked and kept the value (% of the turns)."""
    reads = {"wins vs random": lambda r: 100 * r["win"]["rate"],
             "second-seat losses": lambda r: r["second_seat"]["loss"],
             "took the win": lambda r: _percent(r.get("took_win")), "blocked": lambda r: _percent(r.get("blocked")),
             "kept the value": lambda r: _percent(r["kept"])}
    lines = [f"| variant | step | seeds | {' | '.join(reads)} |", "|---" * (len(reads) + 3) + "|"]
    for variant, runs in results.items():
        cells = []
        for read in reads.values():
            values = [v for v in (read(run[-1]) for run in runs) if v is not None]
            cells.append(f"{np.mean(values):.1f} [{min(values):.1f}, {max(values):.1f}]" if values else "n/a")
        lines.append(f"| {variant} | {runs[0][-1]['step']} | {len(runs)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def join(paths: list[Path]) -> tuple[dict[str, list[list[dict]]], dict[str, str]]:
    """The runs of several ``--out`` files, each variant's seeds concatenated in the files' order, and the first
    file's arguments."""
    files = [json.loads(path.read_text()) for path in paths]
    results: dict[str, list[list[dict]]] = {}
    for data in files:
        for variant, runs in data["results"].items():
            results.setdefault(variant, []).extend(runs)
    return results, files[0]["args"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="outcome,value,per-move", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam's step in logit space")
    parser.add_argument("--beta", type=float, default=0.1, help="KL (k3) to the start, as the runs' kl_loss_coef")
    parser.add_argument("--groups", type=int, default=16, help="tic_tac_toe groups of 8 games a step (the runs: ~16)")
    parser.add_argument("--move-credit", type=float, default=1.0, help="per-move*: the move advantage's scale")
    parser.add_argument("--second-seat", type=float, default=0.5,
                        help="share of training groups with the policy in the second seat (game.seat_weights)")
    parser.add_argument("--start-keep", type=float, default=1.0, help="start logit of the moves keeping the value")
    parser.add_argument("--start-noise", type=float, default=1.0, help="start logits' Gaussian noise (std)")
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--eval-games", type=int, default=400)
    parser.add_argument("--out", type=Path, help="every record as JSON")
    parser.add_argument("--plot", type=Path, help="the curves as PNG")
    parser.add_argument("--join", type=Path, nargs="+", help="train nothing: join these --out files (seeds "
                        "concatenated per variant), print them, write --out and --plot")
    args = parser.parse_args(argv)
    if args.join:
        results, settings = join(args.join)
        for variant, runs in results.items():
            print_curves(variant, runs, int(settings["eval_games"]))
        print(final_table(results))
        _save(results, settings, args.out, args.plot)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: one or more of {', '.join(VARIANTS)}, got {args.variants!r}")
    if not 0.0 <= args.second_seat <= 1.0:
        parser.error(f"--second-seat: a share in [0, 1], got {args.second_seat}")
    started, results = time.perf_counter(), {}
    for variant in variants:
        runs = [train(variant, args.steps, seed, args.lr, args.beta, args.groups, args.move_credit, args.start_keep,
                      args.start_noise, args.every, args.eval_games, args.second_seat)
                for seed in range(args.first_seed, args.first_seed + args.seeds)]
        results[variant] = runs
        print_curves(variant, runs, args.eval_games)
    print(final_table(results))
    _save(results, {k: str(v) for k, v in vars(args).items()}, args.out, args.plot)
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


def _save(results: dict[str, list[list[dict]]], settings: dict[str, str], out: Path | None, png: Path | None) -> None:
    """Every record as JSON (with the run's arguments) to ``out`` and the curves to ``png``, each where given."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"args": settings, "results": results}))
    if png:
        seeds = len(next(iter(results.values())))
        plot(results, png, f"tabular GRPO on tic_tac_toe vs random:0.5,mcts:50:0.5 (Adam lr {settings['lr']}, KL "
             f"{settings['beta']}, {settings['groups']} groups x 8 a step, {seeds} seeds)")


if __name__ == "__main__":
    raise SystemExit(main())
