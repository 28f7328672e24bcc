"""verl-ext: GRPO on games (OpenSpiel) and logic puzzles (reasoning-gym) with verl."""

__version__ = "0.1.0"
