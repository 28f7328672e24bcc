"""bench/speed/rollout_sweep.sh: every setting's command (dry run) composes against verl 0.9.1's schema and passes the
pre-flight, the vLLM variants parse, bad settings lines are named, and the sweep's table reads the results."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from verl_ext.launch.preflight import check_ppo, compose

from bench_scripts import load_bench_script
from test_train_scripts import dry_run, overrides_of

REPO = Path(__file__).resolve().parents[1]
sweep_table = load_bench_script("sweep_table")
vllm_offline = load_bench_script("vllm_offline")


def sweep_dry_run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "MODEL_PATH": "/models/qwen", **env}
    return subprocess.run(["bash", str(REPO / "bench" / "speed" / "rollout_sweep.sh"), "realistic", "--dry-run", *args],
                          capture_output=True, text=True, env=environ, cwd=REPO)


@pytest.mark.slow
def test_every_setting_composes_and_passes_preflight():
    done = sweep_dry_run()
    assert done.returncode == 0, done.stderr
    *commands, table = [shlex.split(line) for line in done.stdout.splitlines()]
    settings = sweep_table.read_settings(REPO / "bench" / "speed" / "rollout_sweep.settings")
    assert len(commands) == len(settings) and table[1] == "bench/speed/sweep_table.py"
    configs = {}
    for setting, argv in zip(settings, commands):
        index = argv.index("bash")
        env = dict(item.split("=", 1) for item in argv[1:index])
        assert env.pop("OUT") == f"outputs/rollout_sweep/{setting.name}"
        assert argv[index + 1:index + 4] == ["bench/speed/train_speed.sh", "realistic", setting.kind]
        extra = argv[index + 4:]
        if setting.kind == "vllm":
            vllm_offline.parse_args(["--model", "m", "--data", "d", "--out", "o", *extra])
            continue
        cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", *extra, RUN_PROFILE="smoke", **env)))
        assert check_ppo(cfg, check_imports=False) == [], setting.name
        configs[setting.name] = cfg
    rollout = configs["measured_1123"].actor_rollout_ref.rollout
    assert rollout.max_num_seqs == 1024 and rollout.max_num_batched_tokens == 16384
    assert configs["baseline"].trainer.v1.sampler.sampler_kwargs.poll_interval == 0.02  # the default
    assert dict(configs["poll_off"].trainer.v1.sampler.sampler_kwargs) == {}  # verl's built-in sampler
    assert configs["baseline"].actor_rollout_ref.model.lora.merge is True  # the default since 2026-11-24
    assert configs["lora_adapter"].actor_rollout_ref.model.lora.merge is False
    assert configs["baseline"].actor_rollout_ref.rollout.max_num_seqs == 256  # verl's rollout.yaml default
    assert configs["keep_cache"].actor_rollout_ref.rollout.free_cache_engine is False
    assert configs["reward_workers14"].reward.num_workers == 14
    assert configs["no_compile"].actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config.mode == 0


def test_sweep_names_what_is_wrong(tmp_path):
    assert "no setting named 'nope'" in sweep_dry_run("nope").stderr
    bad = tmp_path / "bad.settings"
    bad.write_text("# comment\nok | ours | - | -\nbroken | train | - | -\n")
    done = sweep_dry_run(SETTINGS=str(bad))
    assert done.returncode == 2 and f"{bad}:3: expected 'name | ours|vllm" in done.stderr
    bad.write_text("env | ours | lowercase=1 | -\n")
    assert "environment item 'lowercase=1' is not NAME=value" in sweep_dry_run(SETTINGS=str(bad)).stderr
    picked = sweep_dry_run("poll_off", "vllm").stdout.splitlines()
    assert len(picked) == 3 and "ROLLOUT_POLL_INTERVAL=off" in picked[0] and picked[1].endswith("realistic vllm ")


def test_table_reads_each_settings_results(tmp_path):
    settings = tmp_path / "s.settings"
    settings.write_text("base | ours | - | -\nfast | ours | ROLLOUT_POLL_INTERVAL=0.1 | -\n"
                        "oom | ours | - | x=1\nvllm | vllm | - | -\n")
    steps = [{"timing_s/step": 97.0, "timing_s/gen": 42.2},
             {"timing_s/step": 60.1, "timing_s/gen": 36.2, "timing_s/update_actor": 21.5,
              "generated_tokens_per_s_of_gen": 9300.0}]
    for name, gen in (("base", 36.2), ("fast", 20.0)):
        where = tmp_path / name / "realistic"
        where.mkdir(parents=True)
        steps[1]["timing_s/gen"] = gen
        (where / "ours.json").write_text(json.dumps({"steps": steps}))
        (where / "startup.json").write_text(json.dumps({"launch_to_step1_start_s": 301.5, "vllm_reported": {
            "vllm_engine_init_s": 47.8, "vllm_graph_capture_s": 18.0}}))
    (tmp_path / "oom").mkdir()
    (tmp_path / "oom" / "FAILED").write_text("setting oom failed\n")
    (tmp_path / "vllm" / "realistic").mkdir(parents=True)
    (tmp_path / "vllm" / "realistic" / "vllm.json").write_text(json.dumps(
        {"generation_s": 18.5, "tokens_per_s": 15800.0, "engine_start_s": 31.0}))
    out = tmp_path / "realistic.md"
    assert sweep_table.main([str(tmp_path), "--load", "realistic", "--settings", str(settings),
                             "--out", str(out)]) == 0
    rows = {r["setting"]: r for r in json.loads(out.with_suffix(".json").read_text())}
    assert rows["fast"]["generation / vLLM"] == pytest.approx(20.0 / 18.5)
    assert rows["base"]["start-up to step 1 s"] == 301.5 and rows["base"]["status"] == "ok"
    assert rows["oom"]["status"] == "failed" and rows["oom"]["step s"] is None if "step s" in rows["oom"] else True
    assert rows["vllm"]["engine start s"] == 31.0
    text = out.read_text()
    assert "ceiling: vllm 18.5 s" in text
    assert "| fast | `ROLLOUT_POLL_INTERVAL=0.1` | 60.1 | 20 | 21.5 |" in text
    with pytest.raises(ValueError, match="s.settings:1: expected"):
        settings.write_text("one | two\n")
        sweep_table.read_settings(settings)
