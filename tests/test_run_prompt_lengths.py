"""Every GRPO run file in bench/learning/runs/ starts its GRPO stage: the run's train and val prompts, tokenized by
the real SmolLM2 as the stage's DynamicEnvDataset does at start-up, fit its data.max_prompt_length. Before this
test, smollm2-columns-tactical-grpo60.env failed on a lent GPU (2026-11-27): a 292-token connect_four prompt with
the columns board against the recipe's default of 256."""

from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from verl_ext.dataset import DynamicEnvDataset
from verl_ext.launch.preflight import compose

from test_card_runs import dry_run
from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "bench" / "learning" / "runs"
# Run files whose base the name does not give. The SFT sweep's THEN_RUN runs GRPO from the sweep's shared settings
# plus the best variant's (bench/learning/gpu_sft_sweep.sh); the variants set only SFT_LR / SFT_EPOCHS.
BASE_OF = {"smollm2-sft-then-grpo.env": "smollm2-sft-sweep-base.env"}
# Files of the run pattern without a GRPO stage: the SFT sweep's variants (gpu_sft_sweep.sh runs export sft hf eval).
NOT_GRPO = "smollm2-sft-lr*.env"


def setting(path: Path, name: str) -> str | None:
    """The value a run file gives NAME (its last `NAME=...` line, unquoted), or None."""
    values = [line.split("=", 1)[1] for line in path.read_text().splitlines() if line.startswith(f"{name}=")]
    return " ".join(shlex.split(values[-1])) if values else None


def base_of(run: Path) -> Path:
    """The run's base file: BASE_OF's, else the longest smollm2-<prefix>-base.env whose prefix starts the run's name,
    else smollm2-base.env."""
    if run.name in BASE_OF:
        return RUNS / BASE_OF[run.name]
    prefixes = [p.name[:-len("base.env")] for p in RUNS.glob("smollm2-*-base.env")]
    matching = [prefix for prefix in prefixes if run.name.startswith(prefix)]
    return RUNS / (f"{max(matching, key=len)}base.env" if matching else "smollm2-base.env")


def grpo_runs() -> list[str]:
    """Run files (not bases) whose RUN_STAGES, the run file's over its base's, default grpo merge eval plot, hold grpo."""
    runs = []
    for path in sorted(RUNS.glob("*.env")):
        if path.name.endswith("base.env") or fnmatch.fnmatch(path.name, NOT_GRPO):
            continue
        stages = setting(path, "RUN_STAGES") or setting(base_of(path), "RUN_STAGES") or "grpo merge eval plot"
        if "grpo" in stages.split():
            runs.append(path.name)
    return runs


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_the_runs_are_found_with_their_bases():
    runs = grpo_runs()
    assert "smollm2-columns-tactical-grpo60.env" in runs and len(runs) >= 20
    assert base_of(RUNS / "smollm2-columns-tactical-grpo60.env").name == "smollm2-columns-base.env"
    assert base_of(RUNS / "smollm2-games-ref-kl.env").name == "smollm2-games-ref-base.env"
    assert base_of(RUNS / "smollm2-games-kl100.env").name == "smollm2-base.env"  # not games-ref: the shared base
    assert base_of(RUNS / "smollm2-split-tactical-grpo100.env").name == "smollm2-split-base.env"
    assert all(base_of(RUNS / run).is_file() for run in runs)


# (split, data.env, data.seed, data.max_prompt_length): what DynamicEnvDataset reads -> its start-up error, or None.
# Many runs share their data settings (the games runs, the split arms), and a train plan takes up to ~20 s.
_CHECKED: dict[tuple[str, str, str, str], str | None] = {}


def start_up_error(files: Any, tokenizer: Any, data: DictConfig) -> str | None:
    """The ValueError the GRPO stage's DynamicEnvDataset raises at start-up for these data settings, or None."""
    key = (str(files), OmegaConf.to_yaml(data.env), str(data.get("seed")), str(data.max_prompt_length))
    if key not in _CHECKED:
        try:
            DynamicEnvDataset(files, tokenizer, config=data)
            _CHECKED[key] = None
        except ValueError as error:  # "data.max_prompt_length=N is too small: task ... has a M-token prompt"
            _CHECKED[key] = str(error)
    return _CHECKED[key]


@pytest.mark.parametrize("run", grpo_runs())
def test_the_runs_prompts_fit_its_max_prompt_length(tmp_path, monkeypatch, smollm2_tokenizer, run):
    monkeypatch.delenv("MAX_PROMPT_LENGTH", raising=False)  # the run files' value or the recipe's default only
    spec = RUNS / run
    stages = dry_run(tmp_path, spec.stem, base=base_of(spec), spec=spec)
    cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    errors = [error for files in (cfg.data.train_files, cfg.data.val_files)
              if (error := start_up_error(files, smollm2_tokenizer, cfg.data))]
    assert not errors, f"{run} (base {base_of(spec).name}): {errors[0]}"
