"""The cold start's distribution over its legal first tic_tac_toe answers at temperature 1 (from
``first_move_logprobs.py``'s summed log-probabilities), before and after the spread-teacher SFT, beside the share of
each first move in the SFT rows that open the game.

    python plot_first_moves.py      # reads first_move_logprobs_{before,after}.txt, writes first_moves.png
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent
MOVES = [f"x({r},{c})" for r in range(3) for c in range(3)]
# first moves of the 67 seat-0 rows among the 128 SFT rows (sft_rows_first_moves.txt)
ROWS = {"x(2,2)": 22, "x(0,2)": 19, "x(2,0)": 16, "x(1,1)": 10}


def shares(name: str) -> list[float]:
    logprobs = {}
    for line in (HERE / name).read_text().splitlines():
        move, value = line.split()[:2]
        if move in MOVES:
            logprobs[move] = float(value)
    total = sum(math.exp(v) for v in logprobs.values())
    return [math.exp(logprobs[m]) / total for m in MOVES]


def main() -> None:
    before, after = shares("first_move_logprobs_before.txt"), shares("first_move_logprobs_after.txt")
    rows = [ROWS.get(m, 0) / sum(ROWS.values()) for m in MOVES]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.27
    for k, (values, label) in enumerate(((before, "fitted cold start (engine's one move)"),
                                        (after, "after 16 SFT steps on the spread teacher's games"),
                                        (rows, "the spread teacher's first moves in those rows"))):
        ax.bar([i + (k - 1) * width for i in range(len(MOVES))], values, width, label=label)
    ax.set_xticks(range(len(MOVES)), MOVES)
    ax.set(ylabel="share of first answers (T = 1)", ylim=(0, 1.05),
           title="tic_tac_toe, empty board: the first move of the cold start")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "first_moves.png", dpi=110)


if __name__ == "__main__":
    main()
