"""Our pre-flight, then verl's ``main_ppo``, in one interpreter (``PREFLIGHT_IN_PROCESS=1`` in the train scripts).

    python -m verl_ext.launch.ppo_main [hydra overrides]

By default the train scripts run the pre-flight as its own process and then ``python -m verl.trainer.main_ppo``:
both import verl, torch and (for a LoRA run with vLLM, through verl's ``validate_config``) vLLM. On the lent H100
that separate pre-flight took 24-34 s of a 304-359 s start-up (docs/runs/2026-11-23-h100-speed/). Here the checks
run first and, when they pass, verl's own Hydra entry point runs in the same process with the same overrides;
a failing check exits 2 before verl starts, as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from . import preflight

PREFLIGHT_DONE = "[verl-ext] launch: pre-flight done in process, starting verl"


def _verl_main() -> None:
    from verl.trainer.main_ppo import main as verl_main  # hydra.main: reads the overrides from sys.argv

    verl_main()


def main(argv: Sequence[str] | None = None, run_verl: Callable[[], None] = _verl_main) -> int:
    """Check the overrides; on success hand them to verl's ``main_ppo`` (``run_verl``) and return 0, else 2."""
    overrides = list(sys.argv[1:] if argv is None else argv)
    status = preflight.main(["--config-name", "ppo_trainer", "--", *overrides])
    if status:
        return status
    print(PREFLIGHT_DONE, flush=True)
    sys.argv = [sys.argv[0], *overrides]
    run_verl()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
