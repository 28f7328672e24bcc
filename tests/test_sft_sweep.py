"""bench/learning/gpu_sft_sweep.sh and its run files before a lent GPU sees them: every variant's chain composes
(engine-move export, its own SFT learning rate and epochs, an eval of the cold start alone against the fixed-move
line's random mover), with the base file and the variant sourced as the sweep sources them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.launch.preflight import compose

from test_recipe import stage_commands
from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "bench" / "learning" / "runs"
SWEEP = REPO / "bench" / "learning" / "gpu_sft_sweep.sh"
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
