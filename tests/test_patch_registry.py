"""The patch registry (verl_ext/patches/registry.py, issue 46): the train scripts compose the same main_ppo command
as before the patches moved, PATCHES=off composes plain verl, a patch refuses a verl / vLLM it was not written for
(before Ray starts, naming its switch), and ``verl-ext patches`` / ``--dry-run`` list what a run applies."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.patches import registry
from verl_ext.patches.registry import BY_MODULE, BY_NAME, PATCHES, version_problems

from patch_switch_cases import CASES, FIXED_ENV, SCRIPTS, command

REPO = Path(__file__).resolve().parents[1]
FIXTURE = json.loads((REPO / "tests/fixtures/patch_commands.json").read_text())
MOVED = ("attention|call_hooks|compiled_layers|gc_freeze|import_hook|lora_backup|lora_base_weights|lora_merged_sync|"
         "on_policy_update|phase_timer|replay_buffer|response_cut|response_logits|unsharded_actor|step_signal|"
         "vllm_worker_fork|transfer_queue_start|task_runner")


def renamed(arg: str) -> str:
    """A recorded argument with the module paths of before the move (verl_ext.X, verl_ext.launch.X)."""
    return re.sub(rf"verl_ext\.(launch\.)?({MOVED})\b", r"verl_ext.patches.\2", arg)


# default-on patches added after the fixture was recorded: (module, switch, its off value, the modules it follows in
# VERL_USE_EXTERNAL_MODULES, nearest first); a case the fixture lacks is the recorded default with the patch off
ADDED = (("verl_ext.patches.tied_groups", "GRPO_TIED_GROUPS", "verl", ("verl_ext.patches.step_signal",)),
         ("verl_ext.patches.move_credit", "MOVE_CREDIT", "off",
          ("verl_ext.patches.tied_groups", "verl_ext.patches.step_signal")))


def recorded(script: str, case: str) -> list[str]:
    """The fixture's command for ``case``, renamed, with the patches added since then where the case has them on."""
    env = CASES[case]
    argv = [renamed(arg) for arg in FIXTURE[script].get(case, FIXTURE[script]["default"])]
    for module, switch, off, after in ADDED:
        if env.get(switch) == off or env.get("PATCHES") == "off":
            continue
        for i, arg in enumerate(argv):
            key, sep, value = arg.partition("VERL_USE_EXTERNAL_MODULES=")
            if sep:
                modules = value.strip("'").split(",")
                present = [m for m in after if m in modules]
                modules.insert(modules.index(present[0]) + 1 if present else 0, module)
                argv[i] = f"{key}{sep}'{','.join(modules)}'"
    return argv


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_composed_command_is_the_one_recorded_before_the_move(script, case):
    assert command(script, CASES[case]) == recorded(script, case)


@pytest.mark.parametrize("script", SCRIPTS)
def test_patches_off_composes_plain_verl(script):
    argv = command(script, {"PATCHES": "off"})
    text = " ".join(argv)
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "verl_ext.patches" not in text and "VERL_USE_EXTERNAL_MODULES" not in text
    assert "external_lib" not in text and "custom_sampler" not in text and "VERL_EXT_" not in text
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in argv
    # the plugins stay: they fill verl's config slots and replace nothing of verl
    assert "data.custom_cls.path=pkg://verl_ext.dataset" in argv
    assert "reward.custom_reward_function.path=pkg://verl_ext.reward" in argv
    assert command(script, {"PATCHES": "off", "SIGNAL_CHECK": "off"}) == argv  # a switch at its off value is fine


@pytest.mark.parametrize("switch, value", [("GC_FREEZE", "1"), ("ACTOR_COMPILE", "layers"),
                                           ("VERL_USE_EXTERNAL_MODULES", "verl_ext.patches.phase_timer")])
def test_patches_off_refuses_a_switch_that_asks_for_a_patch(switch, value):
    import os

    environ = {k: v for k, v in os.environ.items() if k not in ("PATCHES", switch)}
    result = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                            env={**environ, **FIXED_ENV, "PATCHES": "off", switch: value},
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert f"PATCHES=off runs plain verl, but {switch}={value}" in result.stderr


def test_every_patch_module_lives_in_the_patches_package_and_names_its_evidence_and_test():
    for patch in PATCHES:
        assert patch.module == f"verl_ext.patches.{patch.name}"
        assert (REPO / patch.module.replace(".", "/")).with_suffix(".py").is_file()
        assert (REPO / patch.test).is_file(), patch.test
        for folder in patch.evidence:
            assert (REPO / folder).is_dir(), folder
        for helper in patch.helpers:
            assert (REPO / helper.replace(".", "/")).with_suffix(".py").is_file(), helper
        assert patch.verl == registry.VERL and patch.replaces and patch.effect
        if patch.default == patch.off:  # not a default: the registry says which documented user need keeps it
            assert "opt-in" in patch.effect or "diagnostic" in patch.effect, patch.name
            assert "docs/training.md" in patch.effect, patch.name
        elif not patch.effect.startswith("not for speed"):  # a default for speed: its measured gain and evidence
            assert patch.evidence and any(char.isdigit() for char in patch.effect), patch.name
    # the forwarding modules are gone; nothing of the patches stays flat in verl_ext/ or verl_ext/launch/
    for patch in PATCHES:
        assert not (REPO / "verl_ext" / f"{patch.name}.py").exists()
        assert not (REPO / "verl_ext/launch" / f"{patch.name}.py").exists()


def test_a_patch_refuses_another_verl_naming_its_switch():
    problems = version_problems(BY_NAME["response_logits"], {"verl": "0.9.2", "vllm": None})
    assert len(problems) == 1
    assert "written for verl 0.9.1, and verl 0.9.2 is installed" in problems[0]
    assert "LM_HEAD_POSITIONS=all" in problems[0] and "PATCHES=off" in problems[0]
    assert version_problems(BY_NAME["vllm_worker_fork"], {"verl": "0.9.1", "vllm": "0.25.0"})[0].count(
        "ROLLOUT_WORKER_START=spawn") == 1
    assert version_problems(BY_NAME["response_logits"], {"verl": "0.9.1", "vllm": "0.25.0"}) == []
    assert "out of VERL_USE_EXTERNAL_MODULES" in version_problems(BY_NAME["phase_timer"], {"verl": "1.0"})[0]


def test_the_preflight_refuses_a_patch_for_another_verl_before_ray_starts(monkeypatch):
    from verl_ext.launch.preflight import compose
    from verl_ext.launch.switches import check_switches, patch_modules
    from test_train_scripts import overrides_of

    cfg = compose("ppo_trainer", overrides_of(command("openspiel-ppo.sh", {})))
    assert set(patch_modules(cfg)) == {p.module for p in PATCHES if p.default and p.default != p.off
                                       and p.loaded_by != "launcher"}
    assert not [p for p in check_switches(cfg, {}, check_imports=False) if "written for" in p]
    monkeypatch.setattr(registry, "installed", lambda package: {"verl": "0.9.2"}.get(package))
    problems = [p for p in check_switches(cfg, {}, check_imports=False) if "written for" in p]
    assert len(problems) == len(patch_modules(cfg))
    assert any("GC_FREEZE=0" in p for p in problems)


def test_ppo_main_refuses_the_launcher_patches_for_another_verl(monkeypatch, capsys):
    from verl_ext.launch import ppo_main

    monkeypatch.setattr(registry, "installed", lambda package: {"verl": "0.9.2"}.get(package))
    ran = []
    status = ppo_main.main(["--no-preflight", "--task-runner", "driver"], run_verl=lambda *a: ran.append(a))
    assert status == 2 and not ran
    assert "TASK_RUNNER=actor" in capsys.readouterr().err


def test_a_patch_module_applies_only_when_verl_imports_it_by_name_and_checks_first(monkeypatch):
    monkeypatch.setattr(registry, "_INSTALLS", {})
    monkeypatch.setattr(registry, "_APPLIED", set())
    applied = []
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    assert not registry.apply_if_named("verl_ext.patches.response_logits", lambda: applied.append("head"))
    assert applied == []
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_own.module,verl_ext.patches.on_policy_update,"
                                                    "verl_ext.patches.response_logits")
    # response_logits imported first: it waits for on_policy_update, then both install in the variable's order
    assert not registry.apply_if_named("verl_ext.patches.response_logits", lambda: applied.append("head"))
    assert registry.apply_if_named("verl_ext.patches.on_policy_update", lambda: applied.append("policy"))
    assert applied == ["policy", "head"]
    registry.apply_pending()
    assert applied == ["policy", "head"]  # once each


def test_a_patch_refuses_to_install_on_another_verl(monkeypatch):
    monkeypatch.setattr(registry, "_INSTALLS", {})
    monkeypatch.setattr(registry, "_APPLIED", set())
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "verl_ext.patches.response_logits")
    monkeypatch.setattr(registry, "installed", lambda package: {"verl": "0.10.0"}.get(package))
    applied = []
    with pytest.raises(registry.VersionMismatch, match="LM_HEAD_POSITIONS=all"):
        registry.apply_if_named("verl_ext.patches.response_logits", lambda: applied.append(1))
    assert applied == []


def test_the_listing_of_verl_ext_patches_and_of_the_dry_run_agree():
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHES", "GC_", "ACTOR_", "VERL_"))}
    cli = subprocess.run([sys.executable, "-m", "verl_ext.cli", "patches"], capture_output=True, text=True,
                         env={**environ, "ACTOR_COMPILE": "layers"}, cwd=REPO, check=True).stdout
    dry = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                         text=True, env={**environ, **FIXED_ENV, "PYTHON": sys.executable, "ACTOR_COMPILE": "layers"},
                         cwd=REPO, check=True).stderr
    rows = [line for line in cli.splitlines() if line.startswith("  ")]
    assert len(rows) == len(PATCHES) and all(row in dry for row in rows)
    assert "ON  compiled_layers       ACTOR_COMPILE=layers (default off" in cli
    assert "ON  gc_freeze" in cli and "off phase_timer" in cli
    assert "response_cut" not in " ".join(row.split()[1] for row in rows) and "idle_spin" not in cli
    off = subprocess.run([sys.executable, "-m", "verl_ext.cli", "patches"], capture_output=True, text=True,
                         env={**environ, "PATCHES": "off"}, cwd=REPO, check=True).stdout
    assert "PATCHES=off: plain verl" in off and "  ON " not in off


def test_every_module_of_the_patches_package_is_a_patch_or_a_helper_of_one():
    helpers = {h for p in PATCHES for h in p.helpers} | set(BY_MODULE)
    modules = {f"verl_ext.patches.{path.stem}" for path in (REPO / "verl_ext/patches").glob("*.py")}
    assert modules - helpers == {"verl_ext.patches.__init__", "verl_ext.patches.registry",
                                 "verl_ext.patches.listing"}


@pytest.mark.parametrize("script", ["openspiel-ppo.sh", "logic-grpo.sh", "sft.sh"])
@pytest.mark.parametrize("switch, value", [("LOSS_RESPONSE_CUT", "gather"), ("LOSS_RESPONSE_CUT", "verl"),
                                           ("ROLLOUT_IDLE_SPIN_S", "0.05")])
def test_a_switch_removed_under_issue_46_is_refused_naming_it_and_why(script, switch, value):
    # its patch did not pay and went (git history keeps it): a run that still sets it stops before anything starts
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHES", "LOSS_", "ROLLOUT_"))}
    result = subprocess.run(["bash", str(REPO / "train/scripts" / script), "--dry-run"],
                            env={**environ, **FIXED_ENV, switch: value}, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and " -m " not in result.stdout
    assert f"{switch}={value}: this switch was removed in issue 46" in result.stderr
    assert "did not pay" in result.stderr and f"Unset {switch}" in result.stderr
    # with PATCHES=off as well (plain verl): the same refusal, not a silent run
    off = subprocess.run(["bash", str(REPO / "train/scripts" / script), "--dry-run"], capture_output=True, text=True,
                         env={**environ, **FIXED_ENV, "PATCHES": "off", switch: value}, cwd=REPO)
    assert off.returncode == 2 and "removed in issue 46" in off.stderr


def test_the_removed_switches_are_no_patch_switch_and_their_modules_are_gone():
    assert set(registry.REMOVED) == {"LOSS_RESPONSE_CUT", "ROLLOUT_IDLE_SPIN_S"}
    assert not set(registry.REMOVED) & {p.switch for p in PATCHES} and not set(registry.REMOVED) & set(
        registry.off_values())
    assert not any(switch in name for name in CASES for switch in registry.REMOVED)
    assert "vllm_idle_spin" not in BY_NAME and not (REPO / "verl_ext/patches/vllm_idle_spin.py").exists()
    assert "response_cut" not in BY_NAME  # its module stays: the gathers of on_policy_update and response_logits
    assert registry.removed_problems({"LOSS_RESPONSE_CUT": "", "ROLLOUT_IDLE_SPIN_S": ""}) == []
    assert [p.split(":")[0] for p in registry.removed_problems({"ROLLOUT_IDLE_SPIN_S": "0"})] == [
        "ROLLOUT_IDLE_SPIN_S=0"]
