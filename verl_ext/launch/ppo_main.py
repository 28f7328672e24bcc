"""Our pre-flight, then verl's ``main_ppo``, in one interpreter (``PREFLIGHT_IN_PROCESS=1`` in the train scripts).

    python -m verl_ext.launch.ppo_main [--no-preflight] [--task-runner actor|driver]
        [--transfer-queue-start serial|overlap] [--vllm-model-info off|warm] [hydra overrides]

With ``PREFLIGHT_IN_PROCESS=0`` the train scripts run the pre-flight as its own process and then verl's
``main_ppo``: both import verl, torch and (for a LoRA run with vLLM, through verl's ``validate_config``) vLLM. On the lent H100
that separate pre-flight took 24-34 s of a 304-359 s start-up (docs/runs/2026-11-23-h100-speed/). Here the checks
run first and, when they pass, verl's own Hydra entry point runs in the same process with the same overrides;
a failing check exits 2 before verl starts, as before. ``--no-preflight`` leaves the checks out (the scripts
ran them in a process of their own: ``PREFLIGHT_IN_PROCESS=0``); ``--task-runner driver`` runs verl's
TaskRunner in this process instead of a Ray actor (``TASK_RUNNER=driver``, ``verl_ext/patches/task_runner.py``);
``--transfer-queue-start overlap`` starts TransferQueue while the trainer starts its workers instead of before them
(``TRANSFER_QUEUE_START=overlap``, ``verl_ext/patches/transfer_queue_start.py``). The train scripts pass both by
default (docs/runs/speed-lab-notes/0m-startup-levers.md, section 0m); run directly, this module keeps verl's order unless told otherwise.
``--vllm-model-info warm`` first starts, in the background, the inspection of the model that vLLM's server would
otherwise run in a fresh interpreter on a machine's first run (``ROLLOUT_MODEL_INFO=warm``,
``verl_ext/launch/vllm_model_info.py``; docs/runs/2026-11-26-h100-smoke-levers/NOTES.md, section 0q).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ..patches.registry import BY_NAME, version_problems
from . import preflight, vllm_model_info

PREFLIGHT_DONE = "[verl-ext] launch: pre-flight done in process, starting verl"
TASK_RUNNERS = ("actor", "driver")
TRANSFER_QUEUE_STARTS = ("serial", "overlap")  # here: transfer_queue_start.py imports verl, so only after the checks
MODEL_INFO_STARTS = ("off", "warm")
CHOICES = {"--task-runner": ("task_runner", TASK_RUNNERS, "TASK_RUNNER"),
           "--transfer-queue-start": ("transfer_queue_start", TRANSFER_QUEUE_STARTS, "TRANSFER_QUEUE_START"),
           "--vllm-model-info": ("vllm_model_info", MODEL_INFO_STARTS, "ROLLOUT_MODEL_INFO")}
USAGE = ("python -m verl_ext.launch.ppo_main [--no-preflight] [--task-runner actor|driver] "
         "[--transfer-queue-start serial|overlap] [--vllm-model-info off|warm] [hydra overrides]")


def _verl_main(task_runner: str = "actor", transfer_queue_start: str = "serial") -> None:
    import verl.trainer.main_ppo as main_ppo  # hydra.main: reads the overrides from sys.argv

    if transfer_queue_start == "overlap":  # before the driver stand-in, which wraps whatever class is there
        from ..patches.transfer_queue_start import use_overlapped_transfer_queue

        use_overlapped_transfer_queue(main_ppo)
    if task_runner == "driver":
        from ..patches.task_runner import use_driver_task_runner

        use_driver_task_runner(main_ppo)
    main_ppo.main()


def split_options(argv: Sequence[str]) -> tuple[dict[str, object], list[str]]:
    """Our leading options (``--no-preflight``, ``--task-runner X``, ``--transfer-queue-start X``,
    ``--vllm-model-info X``) and the Hydra overrides after them."""
    options: dict[str, object] = {"preflight": True, "task_runner": "actor", "transfer_queue_start": "serial",
                                  "vllm_model_info": "off"}
    rest = list(argv)
    while rest and rest[0].startswith("--"):
        flag = rest.pop(0)
        if flag == "--":
            break
        if flag == "--no-preflight":
            options["preflight"] = False
        elif (name := flag.partition("=")[0]) in CHOICES:
            key, allowed, variable = CHOICES[name]
            value = flag.partition("=")[2] if "=" in flag else (rest.pop(0) if rest else "")
            if value not in allowed:
                raise ValueError(f"{name} ({variable}) must be one of {', '.join(allowed)}, got {value!r}")
            options[key] = value
        else:
            raise ValueError(f"unknown option {flag!r}: {USAGE}")
    return options, rest


def main(argv: Sequence[str] | None = None, run_verl: Callable[[str, str], None] = _verl_main) -> int:
    """Check the overrides; on success hand them to verl's ``main_ppo`` (``run_verl``) and return 0, else 2."""
    try:
        options, overrides = split_options(sys.argv[1:] if argv is None else argv)
    except ValueError as err:
        print(f"pre-flight: {err}", file=sys.stderr)
        return 2
    warming = None
    if options["vllm_model_info"] == "warm":  # first: it has the pre-flight's and Ray's start to run in
        warming = vllm_model_info.start_in_background(overrides)
    if options["preflight"]:
        status = preflight.main(["--config-name", "ppo_trainer", "--", *overrides])
        if status:
            vllm_model_info.stop(warming)  # no run: no output from it after the pre-flight's report
            return status
        print(PREFLIGHT_DONE, flush=True)
    launcher_patches = [name for name, on in (("task_runner", options["task_runner"] == "driver"),
                                              ("transfer_queue_start", options["transfer_queue_start"] == "overlap"))
                        if on]
    problems = [problem for name in launcher_patches for problem in version_problems(BY_NAME[name])]
    if problems:  # before Ray starts: these two replace verl's main_ppo objects in this process
        for problem in problems:
            print(f"pre-flight: {problem}", file=sys.stderr)
        vllm_model_info.stop(warming)
        return 2
    sys.argv = [sys.argv[0], *overrides]
    run_verl(str(options["task_runner"]), str(options["transfer_queue_start"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
