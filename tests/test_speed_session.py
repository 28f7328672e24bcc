"""bench/speed/speed_session.sh: the plan runs the ceiling, ours and TRL per load; our runs with the settings under test
compose against verl 0.9.1's schema and pass the pre-flight; the compile-cache switch reaches verl's workers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from verl_ext.launch.preflight import check_ppo, compose
from verl_ext.patches.registry import REMOVED as REMOVED_SWITCHES

from bench_scripts import load_bench_script
from test_train_scripts import dry_run, overrides_of

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "speed" / "speed_session.sh"


def session(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO)


def plan(**env: str) -> list[list[str]]:
    done = session("run", "--dry-run", **env)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines()]


def split_command(argv: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment, [load, what], the rest) of `env K=V ... bash bench/speed/train_speed.sh LOAD WHAT ARGS`."""
    index = argv.index("bash")
    env = dict(item.split("=", 1) for item in argv[1:index])
    assert argv[index + 1] == "bench/speed/train_speed.sh"
    return env, argv[index + 2:index + 4], argv[index + 4:]


def script_knobs(env: dict[str, str]) -> dict[str, str]:
    """The train-script variables of an `ours` step: its environment without the bench's own variables."""
    return {k: v for k, v in env.items() if k not in ("OUT", "MODEL_PATH", "TRL_PYTHONPATH", "STEPS", "OURS_LABEL")}


def test_plan_measures_each_load_side_by_side():
    steps = [split_command(argv) for argv in plan(SPEED_DIR="/tmp/s", MODEL_DIR="/m")]
    assert [what for _, what, _ in steps] == [
        ["realistic", "vllm"], ["realistic", "ours"], ["realistic", "trl"], ["realistic", "compare"],
        ["smoke", "ours"], ["smoke", "trl"], ["smoke", "vllm"], ["smoke", "compare"]]
    assert all(env["OUT"] == "/tmp/s" and env["MODEL_PATH"] == "/m" for env, _, _ in steps)
    assert [env.get("STEPS") for env, _, _ in steps] == [None, "5", "3", None, "8", "5", None, None]
    assert all(not rest for _, (_, what), rest in steps if what != "ours")  # only our runs get the settings


def test_candidate_settings_compose_and_pass_preflight():
    env, _, args = split_command(plan()[1])
    knobs = script_knobs(env)
    assert knobs.pop("VLLM_LOGGING_LEVEL") == "INFO"  # vLLM's start-up lines for the breakdown
    assert knobs == {} and args == []  # the defaults are the candidate (merged LoRA, in-process pre-flight)
    argv = dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **knobs)
    assert argv[1:3] == ["-m", "verl_ext.launch.ppo_main"]
    cfg = compose("ppo_trainer", overrides_of(argv))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.actor_rollout_ref.model.lora.merge is True
    assert cfg.trainer.v1.sampler.sampler_kwargs.poll_interval == 0.02  # the default (docs/runs/2026-11-26-h100-input-cast-poll/NOTES.md, section 0u)


def test_first_session_settings_still_compose():
    first = ("actor_rollout_ref.rollout.max_num_seqs=1024 actor_rollout_ref.rollout.max_num_batched_tokens=16384 "
             "transfer_queue.backend.SimpleStorage.num_data_storage_units=2 reward.num_workers=4 "
             "+ray_kwargs.ray_init.include_dashboard=False")
    env, _, args = split_command(plan(SPEED_ENV="VLLM_DISABLE_COMPILE_CACHE=0", SPEED_ARGS=first)[1])
    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", *args, RUN_PROFILE="smoke",
                                                      VLLM_DISABLE_COMPILE_CACHE="0")))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 2
    assert cfg.reward.num_workers == 4 and cfg.ray_kwargs.ray_init.include_dashboard is False
    assert cfg.actor_rollout_ref.rollout.max_num_seqs == 1024


def test_other_settings_replace_the_candidate():
    env, _, args = split_command(plan(SPEED_ENV="ENFORCE_EAGER=True", SPEED_ARGS="reward.num_workers=2")[1])
    assert env["ENFORCE_EAGER"] == "True" and "ROLLOUT_POLL_INTERVAL" not in env
    assert args == ["reward.num_workers=2"]


def test_compile_cache_setting_reaches_verls_workers(monkeypatch):
    # verl sets VLLM_DISABLE_COMPILE_CACHE=1 in the workers' runtime env unless the launching shell has it
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    monkeypatch.delenv("VLLM_DISABLE_COMPILE_CACHE", raising=False)
    assert get_ppo_ray_runtime_env()["env_vars"]["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    monkeypatch.setenv("VLLM_DISABLE_COMPILE_CACHE", "0")
    assert "VLLM_DISABLE_COMPILE_CACHE" not in get_ppo_ray_runtime_env()["env_vars"]  # workers inherit the 0


def test_wait_and_stop_without_a_job_say_so(tmp_path):
    waited = session("wait", "1", SPEED_DIR=str(tmp_path))
    assert waited.returncode == 2 and f"nothing was detached in {tmp_path}" in waited.stderr
    stopped = session("stop", SPEED_DIR=str(tmp_path))
    assert stopped.returncode == 0 and "no detached job running" in stopped.stdout
    assert session("bogus").returncode == 2


def test_plan_can_interleave_issue_15_paths_and_refuses_unknown_lines():
    argvs = plan(SPEED_PLAN="realistic vllm -; realistic ours 4;\n paths fsdp1 full_ft ; realistic trl 3",
                 PATHS_MODEL_DIR="/sft", MODEL_DIR="/m")
    assert [split_command(a)[1] for a in (argvs[0], argvs[1], argvs[3])] == [
        ["realistic", "vllm"], ["realistic", "ours"], ["realistic", "trl"]]
    assert split_command(argvs[1])[0]["STEPS"] == "4"
    assert argvs[2] == ["env", "PATHS=fsdp1 full_ft", "MODEL_DIR=/sft", "bash", "bench/speed/paths_session.sh", "run"]
    bad = session("run", "--dry-run", SPEED_PLAN="realistic vllm -; realistic bogus 3")
    assert bad.returncode == 2 and "unknown line 'realistic bogus 3'" in bad.stderr and not bad.stdout


def test_a_bench_line_runs_a_bench_script_with_its_json_in_the_session_folder():
    argvs = plan(SPEED_PLAN="bench fused_logprob_bench --tokens 65536 --iters 3; realistic ours 3",
                 SPEED_DIR="/tmp/s", PYTHON="/venv/bin/python")
    assert argvs[0] == ["/venv/bin/python", "bench/micro/fused_logprob_bench.py", "--out",
                        "/tmp/s/bench/fused_logprob_bench.json", "--tokens", "65536", "--iters", "3"]
    assert split_command(argvs[1])[1] == ["realistic", "ours"]
    for line in ("bench no_such_script", "bench ../bench/trl_grpo"):
        bad = session("run", "--dry-run", SPEED_PLAN=line)
        assert bad.returncode == 2 and f"line '{line}': no bench/" in bad.stderr and not bad.stdout


def test_a_labelled_line_runs_another_setting_of_ours_against_the_same_trl_run():
    argvs = plan(SPEED_PLAN="realistic ours 4 nockpt GRADIENT_CHECKPOINTING=0 reward.num_workers=2; "
                            "realistic trl 3 --no-gradient-checkpointing; realistic compare - nockpt",
                 SPEED_ENV="ROLLOUT_POLL_INTERVAL=0.2", SPEED_ARGS="reward.num_workers=4")
    (ours_env, ours_what, ours_args), (trl_env, _, trl_args), (cmp_env, cmp_what, cmp_args) = map(split_command, argvs)
    assert ours_what == ["realistic", "ours"] and ours_env["OURS_LABEL"] == "nockpt"
    assert ours_env["GRADIENT_CHECKPOINTING"] == "0" and ours_env["ROLLOUT_POLL_INTERVAL"] == "0.2"
    assert ours_args == ["reward.num_workers=4", "reward.num_workers=2"]  # the line's own setting comes last
    assert "OURS_LABEL" not in trl_env and trl_args == ["--no-gradient-checkpointing"]
    assert cmp_what == ["realistic", "compare"] and cmp_env["OURS_LABEL"] == "nockpt" and cmp_args == []
    knobs = {k: v for k, v in ours_env.items() if k in ("GRADIENT_CHECKPOINTING", "ROLLOUT_POLL_INTERVAL")}
    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", *ours_args, RUN_PROFILE="smoke", **knobs)))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is False and cfg.reward.num_workers == 2


def test_plan_refuses_bad_labels_and_settings_on_compare_lines():
    for line, message in [("smoke ours 4 bad/label", "a LABEL is letters, digits"),
                          ("smoke compare - x GRADIENT_CHECKPOINTING=0", "settings go on the 'ours' line")]:
        done = session("run", "--dry-run", SPEED_PLAN=line)
        assert done.returncode == 2 and message in done.stderr and not done.stdout


def test_train_speed_compares_a_labelled_run_with_the_loads_trl_run(tmp_path):
    load = tmp_path / "smoke"
    (load / "nockpt").mkdir(parents=True)
    ours = {"num_steps": 2, "steps": [{"timing_s/step": 9.0}, {"timing_s/step": 2.0, "timing_s/gen": 1.0}]}
    trl = {"num_steps": 2, "steps": [{"timing_s/step": 5.0}, {"timing_s/step": 4.0}]}
    (load / "nockpt" / "ours.json").write_text(json.dumps(ours))
    (load / "trl.json").write_text(json.dumps(trl))
    env = {**os.environ, "OUT": str(tmp_path), "MODEL_PATH": "/unused", "OURS_LABEL": "nockpt",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(REPO / "bench" / "speed" / "train_speed.sh"), "smoke", "compare"], env=env,
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    table = (load / "nockpt" / "compare.md").read_text()
    assert "16 prompts x 4 samples x 64 tokens (nockpt)" in table and "| step s | 2 | 4 | 0.50 |" in table
    assert not (load / "compare.md").exists()
    bad = subprocess.run(["bash", str(REPO / "bench" / "speed" / "train_speed.sh"), "smoke", "compare"],
                         env={**env, "OURS_LABEL": "../x"}, capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "OURS_LABEL must be letters" in bad.stderr


def test_a_step_past_its_time_limit_is_ended_and_recorded(tmp_path):
    """A hung run must not hold the lent machine until its 30 minutes are up: the step ends, the next one runs."""
    script = (f"cd {shlex.quote(str(REPO))} && source bench/device/lent_gpu_env.sh && "
              f"session_step {shlex.quote(str(tmp_path))} slow 'sleep 30' && "
              f"session_step {shlex.quote(str(tmp_path))} quick 'true' && "
              f"SESSION_STEP_TIMEOUT=0 session_step {shlex.quote(str(tmp_path))} unlimited 'exit 3'")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SESSION_STEP_TIMEOUT": "1", "SITE": str(tmp_path / "no-site")})
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "session.txt").read_text().splitlines()
    # durations are whole seconds of the wall clock: a step that straddles a second boundary reads one more
    assert re.search(r"slow: TIMED OUT after 1 s, [12] s$", lines[0]), lines
    assert re.search(r"quick: ok, [01] s$", lines[1]), lines
    assert re.search(r"unlimited: FAILED \(exit 3\), [01] s$", lines[2]), lines


def test_plan_file_reads_like_the_plan_variable(tmp_path):
    plan_file = tmp_path / "session.plan"
    plan_file.write_text("# a comment line\nrealistic vllm -   # the ceiling\n\n"
                         "realistic ours 4 nockpt GRADIENT_CHECKPOINTING=0; realistic trl 3\n"
                         "realistic compare - nockpt\n")
    inline = ("realistic vllm -; realistic ours 4 nockpt GRADIENT_CHECKPOINTING=0; realistic trl 3;"
              " realistic compare - nockpt")
    assert plan(SPEED_PLAN_FILE=str(plan_file)) == plan(SPEED_PLAN=inline)
    both = session("run", "--dry-run", SPEED_PLAN_FILE=str(plan_file), SPEED_PLAN=inline)
    assert both.returncode == 2 and "SPEED_PLAN and SPEED_PLAN_FILE are both set" in both.stderr
    missing = session("run", "--dry-run", SPEED_PLAN_FILE="bench/speed/plans/nowhere.plan")
    assert missing.returncode == 2 and "SPEED_PLAN_FILE=bench/speed/plans/nowhere.plan: no such file" in missing.stderr


def test_every_tracked_plan_is_valid():
    plans = sorted((REPO / "bench" / "speed" / "plans").glob("*.plan"))
    assert plans
    for plan_file in plans:
        argvs = plan(SPEED_PLAN_FILE=str(plan_file.relative_to(REPO)))
        assert argvs, plan_file
        for argv in argvs:
            if argv[1].startswith("bench/") and argv[1].endswith(".py"):  # a `bench SCRIPT FLAGS` line
                load_bench_script(Path(argv[1]).stem).parse_args(argv[2:])  # its flags parse (SystemExit if not)
                continue
            assert argv[0] == "env" and "bench/speed/train_speed.sh" in argv, (plan_file, argv)


def test_stop_ends_what_the_job_left_outside_its_process_group(tmp_path, monkeypatch):
    # Ray starts its workers outside the job's process group; one stands for vLLM's engine core here
    marker = f"verl-ext-leftover-{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv("LEFTOVER_PATTERN", marker)
    job = subprocess.Popen(["setsid", "bash", "-c", f"setsid bash -c 'exec -a {marker} sleep 300' & sleep 300"],
                           stdout=subprocess.DEVNULL)
    (tmp_path / "detached.pid").write_text(str(job.pid))
    escaped = wait_for_process(f"{marker} 300")
    stopped = session("stop", SPEED_DIR=str(tmp_path))
    assert stopped.returncode == 0 and f"ended process group {job.pid}" in stopped.stdout, stopped.stderr
    assert job.wait(timeout=10) != 0  # the group was killed
    assert not Path(f"/proc/{escaped}").exists() or "Z" in Path(f"/proc/{escaped}/stat").read_text().split()[2]


def wait_for_process(command_line: str, seconds: float = 10) -> int:
    """The pid of the process whose whole command line is `command_line`, once it runs."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-xf", command_line], capture_output=True, text=True).stdout.split()
        if found:
            return int(found[0])
        time.sleep(0.1)
    raise AssertionError(f"no process '{command_line}' after {seconds} s")


def test_wait_names_the_running_step_and_the_machines_clock(tmp_path):
    # session.txt stamps a step when it ends; `wait` says which step runs since when, by the machine's clock
    marker = f"verl-ext-probe-{os.getpid()}-{tmp_path.name}"
    script = (f"source bench/device/lent_gpu_env.sh; dir={shlex.quote(str(tmp_path))}; "
              f"(session_step \"$dir\" 'realistic ours 3 probe' 'exec -a {marker} sleep 30') > /dev/null & "
              "echo $! > \"$dir/detached.pid\"; touch \"$dir/detached.log\"; sleep 1; session_wait \"$dir\" 0; "
              f"kill -- $(cat \"$dir/detached.pid\"); pkill -xf '{marker} 30' || true")  # -x: not this shell
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[0]
    assert line.startswith("wait: still running after 0 s; now 20") and line.endswith(" realistic ours 3 probe"), line
    assert "running since 20" in line


def test_wait_packs_what_the_session_has_so_far(tmp_path):
    # the device tool brings back $OUT when a call returns: each wait call then carries the evidence so far
    speed_dir, out = tmp_path / "speed", tmp_path / "out"
    (speed_dir / "realistic" / "defaults").mkdir(parents=True)
    (speed_dir / "realistic" / "defaults" / "compare.md").write_text("| step s | 45.4 |")
    (speed_dir / "realistic" / "defaults" / "ours.json").write_text(
        json.dumps({"steps": [{"timing_s/step": 60.0}, {"timing_s/step": 45.4}]}))
    (speed_dir / "session.txt").write_text("2026-11-25 04:25:33 realistic ours 3 defaults: ok, 268 s\n")
    (speed_dir / "detached.log").write_text("done\n")
    (speed_dir / "detached.pid").write_text("999999999")  # no such process: the job has ended
    waited = session("wait", "1", SPEED_DIR=str(speed_dir), OUT=str(out), PYTHON=sys.executable)
    assert waited.returncode == 0, waited.stderr
    assert "wait: ended" in waited.stdout and "wait: packed " in waited.stdout
    listing = subprocess.run(["tar", "tzf", str(out / "speed.tgz")], capture_output=True, text=True).stdout
    assert "./realistic/defaults/compare.md" in listing.splitlines() and "./session.txt" in listing.splitlines()
    assert "./session.md" in listing.splitlines()  # the session's table so far (bench/speed/session_table.py)
    assert "| defaults |  | 45.4 |" in (speed_dir / "session.md").read_text()


def test_machine_facts_count_the_sites_bytecode_and_time_an_import(tmp_path):
    # what tells machine M's doubled start-up (docs/runs/2026-11-25-h100-one-machine/NOTES.md, section 0k) from a missing bytecode install next time
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    for name in ("a", "b"):
        (site / "pkg" / f"{name}.py").write_text("x = 1\n")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(site / "pkg" / "a.py")], check=True)
    script = f"source bench/device/lent_gpu_env.sh; SITE={shlex.quote(str(site))} PYTHON={shlex.quote(sys.executable)} machine_facts"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    facts = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    tag = sys.implementation.cache_tag
    assert facts["site"].startswith(f"{site}: 2 .py files, 1 {tag} .pyc files; PYTHONDONTWRITEBYTECODE=")
    assert facts["python"].endswith(f"({tag})")
    assert float(facts["import torch"].removesuffix(" s")) > 0  # this venv has torch: a time, not an error
    assert "cores: " in facts["cpu"] and facts["memory"].endswith(" GiB")


@pytest.mark.slow
def test_next_session_plans_runs_compose_and_pass_preflight():
    # the plans meant for the next GPU session: every run of ours is a valid verl config before device time is spent
    labels = set()
    configs: dict[tuple, object] = {}  # 84 runs of ours in these plans, 24 distinct settings: each composed once
    for name in ("next-session.plan", "one-machine.plan", "startup-overlap.plan", "startup-fork.plan",
                 "startup-confirm.plan", "on-policy.plan", "phases.plan", "smoke-fsdp1.plan", "smoke-levers.plan", "startup-freeze.plan", "first-run.plan",
                 "lm-head.plan", "loss-cut.plan", "compile.plan", "compile-b.plan", "no-fsdp.plan"):
        runs = [split_command(argv) for argv in plan(SPEED_PLAN_FILE=f"bench/speed/plans/{name}")
                if "bench/speed/train_speed.sh" in argv]  # not the `bench SCRIPT` lines (test_every_tracked_plan_is_valid)
        ours = [(env, args) for env, (_, what), args in runs if what == "ours"]
        assert ours, name
        labels |= {env.get("OURS_LABEL") for env, _ in ours}
        for env, args in ours:
            removed = sorted(set(env) & set(REMOVED_SWITCHES))
            if removed:  # a past session's run of a switch removed under issue 46: the scripts now refuse it
                refused = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run", *args],
                                         capture_output=True, text=True, cwd=REPO,
                                         env={**os.environ, "RUN_PROFILE": "smoke", **script_knobs(env)})
                assert refused.returncode == 2, (name, env)
                assert all(f"{switch}={env[switch]}: this switch was removed in issue 46" in refused.stderr
                           for switch in removed), refused.stderr
                continue
            key = (tuple(sorted(script_knobs(env).items())), tuple(args))
            if key not in configs:
                configs[key] = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", *args,
                                                                           RUN_PROFILE="smoke", **script_knobs(env))))
                assert check_ppo(configs[key], check_imports=False) == [], (name, env, args)
            cfg = configs[key]
            if env.get("OURS_LABEL", "").startswith("oneunit"):
                assert_one_fsdp2_unit(cfg)
            env_vars = cfg.ray_kwargs.ray_init.get("runtime_env", {}).get("env_vars", {})
            modules = [module for module in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if module]  # kept
            modules += [module for module, on in (
                ("verl_ext.patches.step_signal", env.get("SIGNAL_CHECK", "warn") != "off"),
                ("verl_ext.patches.tied_groups", env.get("GRPO_TIED_GROUPS", "zero") == "zero"),
                ("verl_ext.patches.move_credit", env.get("MOVE_CREDIT", "on") == "on"),
                ("verl_ext.patches.vllm_worker_fork", env.get("ROLLOUT_WORKER_START", "fork") == "fork"),
                ("verl_ext.patches.on_policy_update", env.get("OLD_LOG_PROB_PASS", OLD_LOG_PROB_PASS_DEFAULT) == "auto"),
                ("verl_ext.patches.response_logits", env.get("LM_HEAD_POSITIONS", "response") == "response"),
                ("verl_ext.patches.unsharded_actor", env.get("ACTOR_FSDP", "auto") == "off" or (
                    env.get("ACTOR_FSDP", "auto") == "auto" and env.get("ENABLE_LORA", "1") == "1"
                    and env.get("FSDP_STRATEGY", "fsdp2") == "fsdp2")),  # the plans' runs are on one GPU
                ("verl_ext.patches.compiled_layers", env.get("ACTOR_COMPILE") == "layers"),
                ("verl_ext.patches.gc_freeze", env.get("GC_FREEZE", "1") in ("1", "watch")),
            ) if on]
            assert env_vars.get("VERL_USE_EXTERNAL_MODULES") == (",".join(modules) or None), (name, env)
    assert {"driver", "oneunit", "both", "fork", "all", "pass", "auto", "cut", "fsdp1", "fsdp1b", "nofreeze", "poll",
            "phases", "nockpt", "oop", "head", "cut2", "compile", "compile2", "nofsdp", "nofsdp2", "fsdp2b"} <= labels


OLD_LOG_PROB_PASS_DEFAULT = "auto"  # train/scripts/lib/common.sh


def assert_one_fsdp2_unit(cfg) -> None:
    """The FSDP engine's whole wrap path (transformer_impl.py:413-417 then apply_fsdp2): verl's wrap policy must
    find the named class (it raised for a class no module has: section 0l's RootOnly run), and apply_fsdp2 must
    then wrap that one body module instead of every decoder layer."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.fsdp_utils import _select_fsdp2_wrap_targets, get_fsdp_wrap_policy

    engine = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.fsdp_config)
    names = engine.get("wrap_policy", {})["transformer_layer_cls_to_wrap"]
    model = tiny_qwen2()
    assert len(_select_fsdp2_wrap_targets(model, model._no_split_modules)) == 2  # verl's default: each layer
    assert get_fsdp_wrap_policy(module=model, config=engine.wrap_policy, is_lora=True) is not None
    assert _select_fsdp2_wrap_targets(model, names) == [model.model]
    with pytest.raises(Exception, match="Could not find any of the transformer layer classes.*RootOnly"):
        get_fsdp_wrap_policy(module=model, config={"transformer_layer_cls_to_wrap": ["RootOnly"]}, is_lora=True)


def tiny_qwen2():
    """A two-layer Qwen2 with tied embeddings, as the 0.5B shape has them."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                        tie_word_embeddings=True))


def test_each_trl_run_is_kept_under_its_own_name(tmp_path):
    # trl.json is what `compare` reads and the next TRL run overwrites it: each run is also copied aside
    shim = tmp_path / "python"
    shim.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        if [[ "$1" == bench/speed/trl_grpo.py ]]; then  # TRL itself: write the result file it was given
          while [[ $# -gt 0 ]]; do if [[ "$1" == --out ]]; then echo '{{"run": "'$$'"}}' > "$2"; fi; shift; done
          echo "trl ran"; exit 0
        fi
        exec {sys.executable} "$@"
    """))
    shim.chmod(0o755)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": str(shim), "MODEL_PATH": "unused", "STEPS": "2"}
    for _ in range(2):
        done = subprocess.run(["bash", "bench/speed/train_speed.sh", "smoke", "trl"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        time.sleep(1.1)  # the copies are stamped to the second
    load = tmp_path / "out" / "smoke"
    kept = sorted(load.glob("trl.2*.json"))
    assert len(kept) == 2 and len(sorted(load.glob("trl.2*.log"))) == 2
    runs = [json.loads(path.read_text())["run"] for path in kept]
    assert runs[0] != runs[1] and json.loads((load / "trl.json").read_text())["run"] == runs[1]
