"""The documented switches whose composed main_ppo command tests/test_patch_registry.py pins (recorded from the
train scripts' --dry-run before the patches moved to verl_ext/patches/: tests/fixtures/patch_commands.json).

Run ``python tests/patch_switch_cases.py`` to print today's commands as that fixture's JSON."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ("openspiel-ppo.sh", "logic-grpo.sh")
# every value of a patch's switch that is not its default, plus the start-up levers and ENABLE_LORA=0 (the switches
# removed under issue 46, LOSS_RESPONSE_CUT and ROLLOUT_IDLE_SPIN_S, left the fixture with their patches: the scripts
# now refuse them, tests/test_patch_registry.py)
CASES: dict[str, dict[str, str]] = {
    "default": {},
    "ROLLOUT_WORKER_START=spawn": {"ROLLOUT_WORKER_START": "spawn"},
    "OLD_LOG_PROB_PASS=always": {"OLD_LOG_PROB_PASS": "always"},
    "LM_HEAD_POSITIONS=all": {"LM_HEAD_POSITIONS": "all"},
    "ACTOR_FSDP=on": {"ACTOR_FSDP": "on"},
    "ACTOR_FSDP=off": {"ACTOR_FSDP": "off"},
    "ACTOR_COMPILE=layers": {"ACTOR_COMPILE": "layers"},
    "GC_FREEZE=0": {"GC_FREEZE": "0"},
    "ROLLOUT_POLL_INTERVAL=off": {"ROLLOUT_POLL_INTERVAL": "off"},
    "SIGNAL_CHECK=off": {"SIGNAL_CHECK": "off"},
    "SIGNAL_CHECK=abort": {"SIGNAL_CHECK": "abort"},
    "GRPO_TIED_GROUPS=verl": {"GRPO_TIED_GROUPS": "verl"},
    "ATTN_IMPLEMENTATION=sdpa": {"ATTN_IMPLEMENTATION": "sdpa"},
    "LORA_MERGE_BACKUP=verl": {"LORA_MERGE_BACKUP": "verl"},
    "LORA_MERGE_SYNC=in_place": {"LORA_MERGE_SYNC": "in_place"},
    "ROLLOUT_LORA_MERGE=0": {"ROLLOUT_LORA_MERGE": "0"},
    "ENABLE_LORA=0": {"ENABLE_LORA": "0"},
    "TASK_RUNNER=actor": {"TASK_RUNNER": "actor"},
    "TRANSFER_QUEUE_START=serial": {"TRANSFER_QUEUE_START": "serial"},
    "ROLLOUT_MODEL_INFO=off": {"ROLLOUT_MODEL_INFO": "off"},
    "PREFLIGHT_IN_PROCESS=0": {"PREFLIGHT_IN_PROCESS": "0"},
}
# what the environment of every recorded command held, so that the machine's own settings do not leak in
FIXED_ENV = {"RUN_PROFILE": "smoke", "PYTHON": "python3", "LOGGER_CHECK": "off", "CHECKPOINT_DIR": "/ckpt",
             "LOG_DIR": "/logs"}
# environment variables the scripts read that the recorded commands must not see
CLEARED_PREFIXES = ("RUN_PROFILE", "GAME_", "TASK_", "MAX_", "VERL_", "PATCHES", "VLLM_", "RAY_", "ROLLOUT_",
                    "ACTOR_", "LORA_", "GC_", "LOSS_", "LM_HEAD", "OLD_LOG", "SIGNAL_", "ATTN_", "ENABLE_LORA",
                    "TRANSFER_QUEUE", "PREFLIGHT", "FSDP", "N_GPUS", "NNODES", "MODEL_PATH", "LOGGERS")


def command(script: str, env: dict[str, str]) -> list[str]:
    """The argv that ``script --dry-run`` prints with ``env`` on top of FIXED_ENV."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(CLEARED_PREFIXES)}
    environ.update(FIXED_ENV)
    environ.update(env)
    out = subprocess.run(["bash", str(REPO / "train" / "scripts" / script), "--dry-run"], check=True,
                         capture_output=True, text=True, env=environ, cwd=REPO).stdout
    lines = [line for line in out.splitlines() if " -m " in line]
    return shlex.split(lines[-1])


def record() -> dict[str, dict[str, list[str]]]:
    return {script: {name: command(script, env) for name, env in CASES.items()} for script in SCRIPTS}


if __name__ == "__main__":
    print(json.dumps(record(), indent=1))
