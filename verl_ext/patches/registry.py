"""The one list of verl-ext's runtime patches of verl / vLLM internals, as data (issue 46).

Each :class:`Patch` names its switch (an environment variable of the train scripts) and default, when it is on,
how verl loads it, the verl / vLLM objects it replaces, its measured effect with the evidence folder under
``docs/runs/``, its test, and the verl (and vLLM) versions it was written for. The train scripts
(``train/scripts/lib/common.sh``) ask this module which modules go into ``VERL_USE_EXTERNAL_MODULES`` and
``actor_rollout_ref.model.external_lib`` and which sampler verl gets; the pre-flight refuses a patch whose versions
do not match the installed ones (naming the switch that turns it off); ``verl-ext patches`` and the scripts'
``--dry-run`` print the list. ``PATCHES=off`` sets every switch to its off value: plain verl.

This file imports only the standard library: the train scripts run it as a file with whatever ``$PYTHON`` is.

    python verl_ext/patches/registry.py compose    # KEY=VALUE lines for common.sh, from the resolved switches
    python verl_ext/patches/registry.py off        # VAR=VALUE: every switch at its off value (PATCHES=off)
    python verl_ext/patches/registry.py list       # the table ``verl-ext patches`` prints
    python verl_ext/patches/registry.py removed    # exit 2 naming each removed switch (REMOVED) still set
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Mapping

VERL = "0.9.1"
VLLM = "0.24.0"
ANY = "*"  # a condition value: the variable is set and not empty


@dataclass(frozen=True)
class Patch:
    name: str
    module: str
    loaded_by: str  # external_modules | external_lib | sampler | launcher (verl_ext.launch.ppo_main's options)
    switch: str  # the train scripts' variable
    default: str  # its default ("" = unset)
    off: str  # the value that runs verl's own code
    when: tuple[tuple[str, tuple[str, ...]], ...]  # on when every variable holds one of its values
    replaces: tuple[str, ...]
    effect: str  # measured effect, or why it is an opt-in
    evidence: tuple[str, ...]
    test: str
    verl: str = VERL
    vllm: str | None = None  # the vLLM version, where it patches vLLM
    helpers: tuple[str, ...] = ()  # other modules of this package it needs

    def is_on(self, env: Mapping[str, str]) -> bool:
        for var, values in self.when:
            value = env.get(var, "")
            if var == "VERL_USE_EXTERNAL_MODULES":  # a diagnostic named there by the user
                if not set(values) & {m.strip() for m in value.split(",")}:
                    return False
                continue
            if not (value != "" if values == (ANY,) else value in values):
                return False
        return True


# In the order the modules go into VERL_USE_EXTERNAL_MODULES / external_lib (the order the scripts always used).
PATCHES: tuple[Patch, ...] = (
    Patch("step_signal", "verl_ext.patches.step_signal", "external_modules", "SIGNAL_CHECK", "warn", "off",
          (("SIGNAL_CHECK", ("warn", "abort")),),
          ("verl.trainer.ppo.v1 trainer's step metrics (wraps its fit step through verl_ext.patches.import_hook)",),
          "not for speed: per-step signal/* and collapse/* metrics and console warnings (abort: stop after a "
          "step with no GRPO group whose rewards differ); docs/training.md 'Learning signal and collapse'",
          (), "tests/test_step_signal.py", helpers=("verl_ext.patches.import_hook",)),
    Patch("tied_groups", "verl_ext.patches.tied_groups", "external_modules", "GRPO_TIED_GROUPS", "zero", "verl",
          (("GRPO_TIED_GROUPS", ("zero",)),),
          ("verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage / compute_grpo_vectorized_outcome_advantage "
           "(and their grpo / grpo_vectorized registry entries): a group whose rewards are all equal gets advantage 0",),
          "not for speed: verl's float32 mean and std gave tied groups advantages up to 0.106 per reply (median 0.056, "
          "864 of 1,447 connect_four engine rewards); now exactly 0, every other row unchanged bit for bit",
          ("docs/runs/2026-11-27-cpu-advantage-pull/",), "tests/test_tied_groups.py",
          helpers=("verl_ext.patches.import_hook",)),
    Patch("move_credit", "verl_ext.patches.move_credit", "external_modules", "MOVE_CREDIT", "on", "off",
          (("MOVE_CREDIT", ("on",)),),
          ("verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage and the module's "
           "compute_advantage_for_multi_trajectories: each reply of a whole game whose record asks for it "
           "(game.move_credit > 0) gets an advantage of its own for keeping the position's value",),
          "not for speed: inert unless game.move_credit > 0 (then one TransferQueue read a step); not yet measured "
          "on a GPU, a tabular model of the runs puts it ~2 points of wins above whole-game credit at step 100",
          ("docs/runs/2026-11-29-cpu-board-credit-model/",), "tests/test_move_credit.py",
          helpers=("verl_ext.patches.import_hook",)),
    Patch("vllm_worker_fork", "verl_ext.patches.vllm_worker_fork", "external_modules", "ROLLOUT_WORKER_START",
          "fork", "spawn", (("ROLLOUT_WORKER_START", ("fork",)),),
          ("vllm.v1.executor.multiproc_executor: the GPU worker's multiprocessing start method",),
          "engine core starting -> GPU worker created 18-21 -> 2-3 s; with the other start-up levers 108-121 s to "
          "step 1 against 164-198 s in verl's order (three pairs, two H100s)",
          ("docs/runs/2026-11-25-h100-startup-fork/", "docs/runs/2026-11-25-h100-startup-confirm/"),
          "tests/test_vllm_worker_fork.py", vllm=VLLM, helpers=("verl_ext.patches.import_hook",)),
    Patch("on_policy_update", "verl_ext.patches.on_policy_update", "external_modules", "OLD_LOG_PROB_PASS", "auto",
          "always", (("OLD_LOG_PROB_PASS", ("auto",)),),
          ("verl's trainer old-log-prob pass (skipped for one mini-batch, one epoch)",
           "verl.workers.utils.losses.ppo_loss (old log-probs = the update's own, detached)"),
          "smoke step 1.55 / 1.71 / 1.79 s against 1.73 / 1.95 / 2.33 s with verl's pass (three pairs, one H100)",
          ("docs/runs/2026-11-25-h100-on-policy/",), "tests/test_on_policy_update.py",
          helpers=("verl_ext.patches.import_hook", "verl_ext.patches.response_cut")),
    Patch("response_logits", "verl_ext.patches.response_logits", "external_modules", "LM_HEAD_POSITIONS",
          "response", "all", (("LM_HEAD_POSITIONS", ("response",)),),
          ("verl's fused LM head (torch backend): logits and log-probs at the response positions only",),
          "the head 0.132 -> 0.040 s per smoke micro batch, smoke update 0.553 / 0.651 -> 0.479 / 0.476 s",
          ("docs/runs/2026-11-26-h100-lm-head/",), "tests/test_response_logits.py",
          helpers=("verl_ext.patches.import_hook", "verl_ext.patches.response_cut")),
    Patch("unsharded_actor", "verl_ext.patches.unsharded_actor", "external_modules", "ACTOR_FSDP", "auto", "on",
          (("ACTOR_FSDP", ("off",)),),
          ("verl's FSDP2 build of the actor (a plain module for a one-GPU LoRA actor)",),
          "smoke step 1.23 / 1.25 s against 1.57 / 1.47 s with FSDP2 (two pairs), weight sync 0.10-0.13 vs "
          "0.24-0.29 s; equal bit for bit on the CPU",
          ("docs/runs/2026-11-26-h100-no-fsdp/", "docs/runs/2026-11-26-h100-input-cast-poll/"),
          "tests/test_unsharded_actor.py", helpers=("verl_ext.patches.import_hook",)),
    Patch("compiled_layers", "verl_ext.patches.compiled_layers", "external_modules", "ACTOR_COMPILE", "off", "off",
          (("ACTOR_COMPILE", ("layers",)),),
          ("verl's FSDP2 actor build: torch.compile of each decoder layer",),
          "opt-in for long runs at the realistic load or larger, where ~95 s of compilation in step 1 is repaid "
          "(realistic update 10.3 -> 8.55 s in one pair: repaid after ~55 steps); not a default: no smoke gain in four "
          "pairs; docs/training.md 'Knobs'",
          ("docs/runs/2026-11-26-h100-compile/",), "tests/test_compiled_layers.py",
          helpers=("verl_ext.patches.import_hook", "verl_ext.patches.attention")),
    Patch("gc_freeze", "verl_ext.patches.gc_freeze", "external_modules", "GC_FREEZE", "1", "0",
          (("GC_FREEZE", ("1", "watch")),),
          ("gc.freeze() in verl's actor worker / trainer / vLLM's GPU worker (wraps their start-up through "
           "verl_ext.patches.call_hooks); GC_FREEZE=watch only reports collections of 0.05 s or longer",),
          "removes the 0.3-0.6 s update spikes at Python's full collections; vLLM's start-up collections "
          "4.6-5.6 s -> 0.65 s or none",
          ("docs/runs/2026-11-26-h100-smoke-levers/",), "tests/test_gc_freeze.py",
          helpers=("verl_ext.patches.call_hooks", "verl_ext.patches.import_hook")),
    Patch("phase_timer", "verl_ext.patches.phase_timer", "external_modules", "VERL_USE_EXTERNAL_MODULES", "", "",
          (("VERL_USE_EXTERNAL_MODULES", ("verl_ext.patches.phase_timer",)),),
          ("verl's actor worker update_actor / weight sync (timed through verl_ext.patches.call_hooks)",),
          "a diagnostic, never a default, for profiling where a step's time goes: prints the worker's update and "
          "weight-sync phases each step (it synchronizes the GPU); docs/training.md 'Speed'",
          ("docs/runs/2026-11-25-h100-phases/",), "tests/test_phase_timer.py",
          helpers=("verl_ext.patches.call_hooks", "verl_ext.patches.import_hook")),
    Patch("attention", "verl_ext.patches.attention", "external_lib", "ATTN_IMPLEMENTATION", "torch_varlen", "sdpa",
          (("ATTN_IMPLEMENTATION", ("torch_varlen",)),),
          ("transformers' attention registry: torch_varlen (PyTorch's varlen kernel for verl's packed rows)",),
          "packed micro batches: update 20-22 -> 11.9 s at 128 x 8 x 512 (one H100)",
          ("docs/runs/2026-11-24-h100-varlen/",), "tests/test_varlen_attention.py"),
    Patch("lora_backup", "verl_ext.patches.lora_backup", "external_lib", "LORA_MERGE_BACKUP", "pinned", "verl",
          (("ENABLE_LORA", ("1",)), ("ROLLOUT_LORA_MERGE", ("1",)), ("LORA_MERGE_BACKUP", ("pinned",))),
          ("verl's merged LoRA sync: the base-weight backup (pinned host buffers reused)",),
          "backup and restore 0.84 -> 0.06 s a step (H100, 0.5B)",
          ("docs/runs/2026-11-24-h100-resident/",), "tests/test_lora_backup.py",
          helpers=("verl_ext.patches.lora_base_weights",)),
    Patch("lora_merged_sync", "verl_ext.patches.lora_merged_sync", "external_lib", "LORA_MERGE_SYNC",
          "out_of_place", "in_place",
          (("ENABLE_LORA", ("1",)), ("ROLLOUT_LORA_MERGE", ("1",)), ("LORA_MERGE_SYNC", ("out_of_place",))),
          ("verl's merged LoRA sync: base + PEFT's delta computed out of place",),
          "the actor's side of one sync 0.143 -> 0.082 s (bench/micro/lora_sync_bench.py)",
          ("docs/runs/2026-11-26-h100-smoke-levers/",), "tests/test_lora_merged_sync.py",
          helpers=("verl_ext.patches.import_hook", "verl_ext.patches.unsharded_actor")),
    Patch("replay_buffer", "verl_ext.patches.replay_buffer", "sampler", "ROLLOUT_POLL_INTERVAL", "0.02", "off",
          (("ROLLOUT_POLL_INTERVAL", (ANY,)),),
          ("verl.trainer.ppo.v1.replay_buffer's fixed 2 s poll (trainer.v1.sampler.custom_sampler)",),
          "generation 1.06x / 1.01x vLLM's offline ceiling with 0.02 s against 1.17-1.29x with 0.1 s",
          ("docs/runs/2026-11-26-h100-input-cast-poll/",), "tests/test_replay_poll.py"),
    Patch("task_runner", "verl_ext.patches.task_runner", "launcher", "TASK_RUNNER", "driver", "actor",
          (("TASK_RUNNER", ("driver",)),),
          ("verl.trainer.main_ppo.TaskRunner (a Ray actor) -> the same runner in the driver process",),
          "Ray started -> TaskRunner running 9.4 -> 1.6 s (CPU), 23.5 -> 6.8 s (H100); a default with the other "
          "start-up levers",
          ("docs/runs/2026-11-25-cpu-task-runner/", "docs/runs/2026-11-25-h100-startup-fork/"),
          "tests/test_task_runner.py"),
    Patch("transfer_queue_start", "verl_ext.patches.transfer_queue_start", "launcher", "TRANSFER_QUEUE_START",
          "overlap", "serial", (("TRANSFER_QUEUE_START", ("overlap",)),),
          ("verl.trainer.main_ppo.TaskRunnerV1.run: TransferQueue started beside the trainer's workers",),
          "19-21 s of TransferQueue start hidden behind the FSDP worker's; a default with the other start-up levers",
          ("docs/runs/2026-11-25-h100-startup-overlap/", "docs/runs/2026-11-25-h100-startup-fork/"),
          "tests/test_transfer_queue_start.py", helpers=("verl_ext.patches.task_runner",)),
)
BY_NAME = {patch.name: patch for patch in PATCHES}
BY_MODULE = {patch.module: patch for patch in PATCHES}
# patches of vLLM that install at any import of their module (vLLM's processes import them through verl): they do
# not wait for the order above, which only the patches of verl's own objects need
IMPORT_INSTALLS = ("verl_ext.patches.vllm_worker_fork",)
# Switches removed under issue 46 (item 2: a patch is on by default with a measured gain, or removed, unless a
# documented user need keeps it as an opt-in): why each went. git history keeps their patches. The train scripts
# refuse a removed switch that is still set (``python verl_ext/patches/registry.py removed``), so that a run does not
# silently go without what it asked for.
REMOVED: dict[str, str] = {
    "LOSS_RESPONSE_CUT": (
        "its patch (one gather on the device for verl's PPO loss's cut of the responses out of the packed "
        "forward, LOSS_RESPONSE_CUT=gather) did not pay as a default: one win at the smoke load (update 0.619 vs "
        "0.717 s), one tie, no realistic gain (docs/runs/2026-11-25-h100-fsdp1-smoke/, "
        "docs/runs/2026-11-26-h100-lm-head/); verl's own cut always runs now"),
    "ROLLOUT_IDLE_SPIN_S": (
        "its patch (verl_ext/patches/vllm_idle_spin.py, a shorter busy spin of vLLM's shared-memory queue readers) "
        "did not pay: 0.05 s gave no smoke gain (docs/runs/2026-11-26-h100-lm-head/); vLLM's own 1 s always runs now"),
}
# not patches of verl: what the launcher does with PATCHES=off as well (its own pre-flight, vLLM's own inspection)
LAUNCH_OFF = {"PREFLIGHT_IN_PROCESS": "0", "ROLLOUT_MODEL_INFO": "off"}


class VersionMismatch(RuntimeError):
    pass


def installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def version_problems(patch: Patch, versions: Mapping[str, str | None] | None = None) -> list[str]:
    """Why ``patch`` must not apply to the installed verl / vLLM (empty: it may). A package that is not installed
    is not checked: nothing of it runs to be patched."""
    versions = versions if versions is not None else {"verl": installed("verl"), "vllm": installed("vllm")}
    problems = []
    for package, wanted in (("verl", patch.verl), ("vllm", patch.vllm)):
        have = versions.get(package)
        if wanted and have and have != wanted:
            off = f"{patch.switch}={patch.off}" if patch.off else f"{patch.switch} unset"
            if patch.loaded_by == "external_modules" and patch.switch == "VERL_USE_EXTERNAL_MODULES":
                off = f"{patch.module} out of VERL_USE_EXTERNAL_MODULES"
            problems.append(f"patch {patch.name} ({patch.module}) was written for {package} {wanted}, and {package} "
                            f"{have} is installed: it replaces {'; '.join(patch.replaces)}. Check it against "
                            f"{package} {have} and update verl_ext/patches/registry.py, or turn it off with {off} "
                            "(PATCHES=off turns every patch off)")
    return problems


def active(env: Mapping[str, str]) -> list[Patch]:
    """The patches a run with the train scripts' resolved switches ``env`` applies."""
    named = {m.strip() for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()}
    return [p for p in PATCHES if p.is_on(env) or (p.loaded_by == "external_modules" and p.module in named)]


def check(patch: Patch) -> None:
    """Refuse, loudly, to apply ``patch`` to a verl / vLLM it was not written for."""
    problems = version_problems(patch)
    if problems:
        raise VersionMismatch("[verl-ext] " + "\n".join(problems))


_INSTALLS: dict[str, Callable[[], None]] = {}  # patch module -> its install, once the module is imported
_APPLIED: set[str] = set()


def apply_if_named(module: str, install: Callable[[], None]) -> bool:
    """Called at the end of each patch module that verl loads through ``VERL_USE_EXTERNAL_MODULES``: when that
    variable names it, check the versions and install it (tests import the module without applying it). Installs
    go in the variable's order, as verl's imports do, also when a patch module is imported before one named ahead
    of it (by another module that imports it first): a module waits for the patch modules named before it."""
    _INSTALLS[module] = install
    apply_pending()
    return module in _APPLIED


def apply_pending() -> None:
    """Install, in ``VERL_USE_EXTERNAL_MODULES``'s order, each named patch whose module is imported (also one that
    was imported before the variable was set: ``verl_ext.patches.task_runner`` calls this in the driver)."""
    for name in (m.strip() for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",")):
        patch = BY_MODULE.get(name)
        if patch is None or patch.loaded_by != "external_modules" or name in IMPORT_INSTALLS or name in _APPLIED:
            continue
        if name not in _INSTALLS:
            return  # not imported yet: its own import calls this again
        check(patch)
        _INSTALLS[name]()
        _APPLIED.add(name)


def removed_problems(env: Mapping[str, str]) -> list[str]:
    """One message per switch of :data:`REMOVED` that ``env`` still sets (to anything but empty)."""
    return [f"{var}={env[var]}: this switch was removed in issue 46 (each patch is on by default with a measured "
            f"gain, or removed): {why}; git history keeps the patch. Unset {var} (in the environment, .env or "
            "the run file)."
            for var, why in REMOVED.items() if env.get(var, "") != ""]


def compose(env: Mapping[str, str]) -> dict[str, str]:
    """What the train scripts pass to verl for the resolved switches ``env``: ``modules`` (added to
    ``VERL_USE_EXTERNAL_MODULES``), ``external_lib`` (the model config's), ``sampler`` (module of the custom sampler,
    or empty)."""
    on = [p for p in PATCHES if p.is_on(env) and p.switch != "VERL_USE_EXTERNAL_MODULES"]
    return {
        "modules": ",".join(p.module for p in on if p.loaded_by == "external_modules"),
        "external_lib": ",".join(p.module for p in on if p.loaded_by == "external_lib"),
        "sampler": next((p.module for p in on if p.loaded_by == "sampler"), ""),
    }


def off_values() -> dict[str, str]:
    """Every switch at the value that runs verl's own code (PATCHES=off)."""
    values = {p.switch: p.off for p in PATCHES if p.switch != "VERL_USE_EXTERNAL_MODULES"}
    values.update(LAUNCH_OFF)
    return values


def listing(env: Mapping[str, str]) -> str:
    """Which patches a run with ``env`` applies, their switch, default and why."""
    applied = {p.name for p in active(env)}
    off = env.get("PATCHES", "on") == "off"
    lines = [f"verl-ext patches (verl {installed('verl') or 'not installed'}, vllm {installed('vllm') or 'not installed'}"
             f"; PATCHES={'off: plain verl' if off else 'on'}):"]
    for p in PATCHES:
        state = "ON " if p.name in applied else "off"
        default = p.default if p.default else "unset"
        versions = f"verl {p.verl}" + (f", vllm {p.vllm}" if p.vllm else "")
        lines.append(f"  {state} {p.name:<21} {p.switch}={env.get(p.switch, '') or 'unset'} (default {default}; "
                     f"{versions}): {p.effect} [{', '.join(p.evidence) or 'no speed evidence'}]")
        problems = version_problems(p) if p.name in applied else []
        lines.extend(f"      REFUSED: {problem}" for problem in problems)
    return "\n".join(lines)


def resolved_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The train scripts' defaults under ``environ`` (a run from the shell environment without the scripts'
    resolution of ACTOR_FSDP=auto: auto counts as on for one GPU with LoRA under FSDP2, as the scripts do)."""
    env = dict(environ)
    if env.get("PATCHES", "on") == "off":
        env.update(off_values())
    for p in PATCHES:
        env.setdefault(p.switch, p.default)
    if env.get("ROLLOUT_POLL_INTERVAL") == "off":
        env["ROLLOUT_POLL_INTERVAL"] = ""
    env.setdefault("ENABLE_LORA", "1")
    env.setdefault("ROLLOUT_LORA_MERGE", "1")
    if env.get("ACTOR_FSDP") == "auto":
        one_gpu = int(env.get("N_GPUS_PER_NODE", "1") or 1) * int(env.get("NNODES", "1") or 1) == 1
        lora = env.get("ENABLE_LORA") == "1" and env.get("FSDP_STRATEGY", "fsdp2") == "fsdp2"
        env["ACTOR_FSDP"] = "off" if one_gpu and lora else "on"
    return env


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "list"
    if command == "compose":
        for key, value in compose(os.environ).items():
            print(f"{key}={value}")
    elif command == "off":
        for key, value in off_values().items():
            print(f"{key}={value}")
    elif command == "removed":  # the train scripts' pre-flight: exit 2 naming each removed switch still set
        problems = removed_problems(os.environ)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 2 if problems else 0
    elif command == "list":
        # VERL_EXT_RESOLVED=1: the train scripts pass their resolved switches (ACTOR_FSDP=auto already decided)
        resolved = os.environ.get("VERL_EXT_RESOLVED") == "1"
        print(listing(os.environ if resolved else resolved_env(os.environ)))
    else:
        print(f"usage: {sys.argv[0]} compose|off|list|removed", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
