"""Arena evaluation (``verl-ext eval``): held-out single-move tasks, full games against OpenSpiel bots,
and reasoning-gym accuracy, for one or more models side by side. See docs/eval.md."""
