"""Issue 45's whole-game run files for the board games (bench/learning/runs/smollm2-boardgames-*.env) before a lent
GPU sees them: sourced as bench/learning/gpu_shared_cold_start.sh sources them, the cold start teaches engine
moves half in whole games with room for the longest game row measured, the GRPO commands pass verl's config and the
pre-flight checks, the runs differ only in their opponents, and the eval's flags parse into the targets'
match-ups."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.evaluation.arena import parse_opponents
from verl_ext.evaluation.cli import parse_args, resolve_suites, single_move_section
from verl_ext.launch.preflight import check_ppo, compose
from verl_ext.export import load_env_section
from verl_ext.mixture import EnvMixture

from test_card_runs import dry_run as files_dry_run
from test_train_scripts import overrides_of

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "bench" / "learning" / "runs"
BASE = RUNS / "smollm2-boardgames-base.env"


def dry_run(tmp_path: Path, run: str | None, run_dir: str | None = None) -> dict[str, list[list[str]]]:
    """The recipe's --dry-run of the base stages (run None) or of one run's stages, sourced as the driver does."""
    spec = None if run is None else RUNS / f"smollm2-boardgames-{run}.env"
    return files_dry_run(tmp_path, run, base=BASE, spec=spec, run_dir=run_dir)


def assert_only_set_added(theirs: list[str], ours: list[str], setting: str) -> None:
    """``ours`` is the command ``theirs`` with ``--set setting`` added and nothing else changed."""
    at = ours.index(setting)
    assert ours[at - 1] == "--set" and ours[:at - 1] + ours[at + 1:] == theirs


def test_the_base_teaches_engine_moves_half_in_whole_games_against_the_training_mixture(tmp_path):
    stages = dry_run(tmp_path, None)
    export = stages["export"][0]
    assert export[export.index("--answers") + 1] == "reference"
    assert "openspiel.task_mode=mixed" in export and "openspiel.game_share=0.5" in export
    assert "openspiel.num_tasks_per_case=2400" in export
    # the engine's games are played against the mixture GRPO trains against: longer games, more full columns
    assert "openspiel.game.opponent=random:0.5,mcts:50:0.5" in export
    sft = compose("sft_trainer_engine", overrides_of(stages["sft"][0]))
    assert float(sft.optim.lr) == 3e-4 and sft.trainer.total_epochs == 2
    assert sft.data.max_length >= 3215  # the longest connect_four game row measured against it (SmolLM2 tokens)


@pytest.mark.parametrize("run", ["mix", "random", "bycase", "bycase-filter", "bycase-grpo100",
                                 "bycase-filter-grpo100"])
def test_each_run_composes_and_its_eval_measures_the_targets(tmp_path, run):
    stages = dry_run(tmp_path, run)
    assert list(stages) == ["grpo", "merge", "eval", "plot"]
    cfg = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    assert check_ppo(cfg, check_imports=False) == []
    env = OmegaConf.to_container(cfg.data.env, resolve=True)
    spiel = env["openspiel"]
    assert spiel["task_mode"] == "game" and sorted(spiel["game_types"]) == ["connect_four", "tic_tac_toe"]
    assert spiel["game"]["opponent"] == ("random" if run == "random" else "random:0.5,mcts:50:0.5")
    mixture = EnvMixture(env, where="data.env")  # the opponents and cases as the workers build them
    settings = mixture.adapters["openspiel"].game_settings
    connect_four = settings.opponent_mixture_at("game", "connect_four").shares()
    assert connect_four == ({"random": 0.5, "mcts:50": 0.5} if run == "mix" else {"random": 1.0} if run == "random"
                            else {"random": 0.5, "mcts:5": 0.5})
    assert settings.opponent_mixture_at("game", "tic_tac_toe").shares() == (
        {"random": 1.0} if run == "random" else {"random": 0.5, "mcts:50": 0.5})
    assert cfg.data.train_batch_size == 32 and cfg.actor_rollout_ref.rollout.n == 8
    if run.endswith("grpo100"):  # issue 45's >= 100 steps, from the kept cold start
        assert cfg.trainer.total_training_steps == 100 and cfg.trainer.test_freq == 20 and cfg.trainer.save_freq == 10
    else:
        assert cfg.trainer.total_training_steps == 30 and cfg.trainer.test_freq == 10
    actor = cfg.actor_rollout_ref.actor
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.1 and actor.clip_ratio_high == 0.28

    argv = stages["eval"][0]
    args, eval_env = parse_args(argv[argv.index("eval") + 1:])
    assert resolve_suites(args.suites, EnvMixture(single_move_section(eval_env), where="env")) == ["single", "arena"]
    assert [m.split("=")[0] for m in args.models] == ["sft", "grpo", "random"]
    assert [o.label for o in parse_opponents(args.opponents)] == (
        ["random", "mcts:5", "mcts:50"] if run in ("bycase", "bycase-filter") else ["random", "mcts:50"])
    assert args.games_per_case == 200 and args.game_context == "game" and args.illegal_retries == 1


def test_the_runs_differ_only_in_their_opponents(tmp_path):
    configs = {run: OmegaConf.to_container(compose("ppo_trainer", overrides_of(
        dry_run(tmp_path, run, run_dir="same")["grpo"][0]))) for run in ("mix", "random", "bycase")}
    for config in configs.values():
        config["data"]["env"]["openspiel"]["game"].pop("opponent")
        config["data"]["env"]["openspiel"]["game"].pop("opponents_by_case", None)
    assert configs["mix"] == configs["random"] == configs["bycase"]


def test_the_filter_arm_is_the_bycase_run_with_dapo_group_filtering_on_verls_sampler(tmp_path):
    """smollm2-boardgames-bycase-filter.env: algorithm.filter_groups on the canonical reward, which verl gives only
    to its own sampler (the project's poll sampler off); every other setting is the bycase run's."""
    grpo = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase", "bycase-filter", "bycase-filter-grpo100")}
    filtered = grpo["bycase-filter"]
    assert filtered.algorithm.filter_groups.enable is True and filtered.algorithm.filter_groups.metric == "reward"
    assert not filtered.trainer.v1.sampler.get("custom_sampler", {}).get("path")
    assert check_ppo(filtered, check_imports=False) == []
    assert grpo["bycase"].trainer.v1.sampler.custom_sampler.path == "pkg://verl_ext.patches.replay_buffer"
    configs = {run: OmegaConf.to_container(cfg) for run, cfg in grpo.items()}
    for config in configs.values():
        config["algorithm"].pop("filter_groups")
        config["trainer"]["v1"].pop("sampler")
    assert configs["bycase"] == configs["bycase-filter"]
    assert grpo["bycase-filter-grpo100"].algorithm.filter_groups.enable is True


def test_the_tactical_mix_arm_adds_one_ply_positions_to_the_bycase_games(tmp_path):
    """smollm2-boardgames-tactical-mix-grpo100.env: the bycase 100-step arm with ~16 positions that have a win to
    take or a threat to block added to its ~32 whole games a step, scored by the engine; every other setting (the
    opponents, KL, clip, steps) is the bycase arm's, and the plan the workers build holds both kinds of rows."""
    grpo = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-grpo100", "tactical-mix-grpo100")}
    mix = grpo["tactical-mix-grpo100"]
    assert check_ppo(mix, check_imports=False) == []
    env = OmegaConf.to_container(mix.data.env, resolve=True)
    spiel = env["openspiel"]
    assert spiel["task_mode"] == "mixed" and spiel["game_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert env["train_positions"] == "tactical" and spiel["reward_mode"] == "engine"
    assert mix.data.train_batch_size == mix.actor_rollout_ref.actor.ppo_mini_batch_size == 48
    assert mix.trainer.total_training_steps == 100
    configs = {run: OmegaConf.to_container(cfg) for run, cfg in grpo.items()}
    for config in configs.values():
        config["data"]["env"]["openspiel"].pop("task_mode")
        config["data"]["env"]["openspiel"].pop("game_share", None)
        config["data"]["env"]["openspiel"].pop("reward_mode")
        config["data"]["env"].pop("train_positions", None)
        config["data"].pop("train_batch_size")
        config["actor_rollout_ref"]["actor"].pop("ppo_mini_batch_size")
    assert configs["bycase-grpo100"] == configs["tactical-mix-grpo100"]

    from verl_ext.envs.tactics import one_ply

    spiel["num_tasks_per_case"] = 60  # the workers' plan, smaller
    mixture = EnvMixture(env, where="data.env")
    kinds = {"game": 0, "position": 0}
    for ref in mixture.plan("train"):
        task = mixture.build(ref)
        if task.info.get("mode") == "game":
            kinds["game"] += 1
        else:
            tactics = one_ply(task.case, task.state)
            assert tactics.win_available or tactics.must_block, task.messages
            kinds["position"] += 1
    assert kinds["game"] + kinds["position"] == 120 and 0.55 < kinds["game"] / 120 < 0.78
    # validation stays mostly whole games: a single move enters it only where its position is held out
    val_games = [mixture.build(ref).info.get("mode") == "game" for ref in mixture.plan("val")]
    assert len(val_games) == 128 and sum(val_games) >= 110


def _val_games_hold_the_bycase_arms(bycase, arm) -> None:
    """The arm validates on 256 games a game, among them the bycase arm's 64 (the same task refs, so the same seeds
    and games), which val_passes.py --baseline pairs."""
    assert bycase.data.env.val_tasks_per_case == 64 and arm.data.env.val_tasks_per_case == 256
    plans = []
    for cfg in (bycase, arm):
        env = OmegaConf.to_container(cfg.data.env, resolve=True)
        env["openspiel"]["num_tasks_per_case"] = 400  # the workers' plan, smaller; the held-out seeds stay
        plans.append({str(ref) for ref in EnvMixture(env, where="data.env").plan("val")})
    assert len(plans[0]) == 128 and len(plans[1]) == 512 and plans[0] <= plans[1]


def test_the_ladder_arm_gives_tic_tac_toe_three_opponent_strengths_and_leaves_connect_four_alone(tmp_path):
    """smollm2-boardgames-bycase-ladder-grpo100.env: tic_tac_toe's games against random, MCTS(5) and MCTS(50), a
    third each, as the workers draw them; connect_four's random and MCTS(5) (every other setting: the 2 x 2 test
    below)."""
    ladder = compose("ppo_trainer", overrides_of(dry_run(tmp_path, "bycase-ladder-grpo100")["grpo"][0]))
    env = OmegaConf.to_container(ladder.data.env, resolve=True)
    settings = EnvMixture(env, where="data.env").adapters["openspiel"].game_settings
    shares = settings.opponent_mixture_at("game", "tic_tac_toe").shares()
    assert shares == pytest.approx({"random": 0.34, "mcts:5": 0.33, "mcts:50": 0.33})
    assert settings.opponent_mixture_at("game", "connect_four").shares() == {"random": 0.5, "mcts:5": 0.5}
    drawn = {settings.opponent_for(seed, "tic_tac_toe").label for seed in range(200)}
    assert {"random", "mcts:5", "mcts:50"} <= drawn


def test_the_next_arms_are_a_two_by_two_of_learning_rate_and_tic_tac_toe_opponents(tmp_path):
    """The next session's arms: lr 6e-5 (smollm2-boardgames-bycase-lr6e5-grpo100.env), the ladder, both, and on
    four GPUs the control with the arms' 256 validation games; the control is the bycase 100-step run with those
    256 games only (its 64 among them, so val_passes.py --baseline pairs with the earlier runs), and each cell
    differs from the control in its own keys only."""
    grpo = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-grpo100", "bycase-val256-grpo100", "bycase-lr6e5-grpo100", "bycase-ladder-grpo100",
                        "bycase-lr6e5-ladder-grpo100")}
    bycase = grpo.pop("bycase-grpo100")
    for cfg in grpo.values():
        assert check_ppo(cfg, check_imports=False) == [] and cfg.data.env.val_tasks_per_case == 256
    assert float(bycase.actor_rollout_ref.actor.optim.lr) == 3e-5
    lrs = {run: float(cfg.actor_rollout_ref.actor.optim.lr) for run, cfg in grpo.items()}
    assert lrs == {"bycase-val256-grpo100": 3e-5, "bycase-lr6e5-grpo100": 6e-5, "bycase-ladder-grpo100": 3e-5,
                   "bycase-lr6e5-ladder-grpo100": 6e-5}
    ladders = {run: OmegaConf.to_container(cfg.data.env.openspiel.game.opponents_by_case)
               for run, cfg in grpo.items()}
    assert ladders["bycase-ladder-grpo100"] == ladders["bycase-lr6e5-ladder-grpo100"]
    assert ladders["bycase-ladder-grpo100"] != ladders["bycase-val256-grpo100"]
    assert ladders["bycase-val256-grpo100"] == ladders["bycase-lr6e5-grpo100"]
    control = [OmegaConf.to_container(cfg) for cfg in (bycase, grpo["bycase-val256-grpo100"])]
    for config in control:
        config["data"]["env"].pop("val_tasks_per_case")
    assert control[0] == control[1]
    for arm in ("bycase-lr6e5-grpo100", "bycase-ladder-grpo100"):
        _val_games_hold_the_bycase_arms(bycase, grpo[arm])
    configs = {run: OmegaConf.to_container(cfg) for run, cfg in grpo.items()}
    for config in configs.values():
        config["actor_rollout_ref"]["actor"]["optim"].pop("lr")
        config["data"]["env"]["openspiel"]["game"].pop("opponents_by_case")
    assert len({repr(config) for config in configs.values()}) == 1


def test_the_cold_start_eval_run_judges_the_cold_start_as_the_arms_judge_their_models(tmp_path):
    """smollm2-boardgames-coldstart-eval.env: no GRPO, the arms' eval (same suites, games, opponents, retries and
    256 held-out positions) with the cold start as its one trained model, beside the scripted random mover."""
    alone = dry_run(tmp_path, "coldstart-eval")
    assert list(alone) == ["eval", "plot"]
    arm = dry_run(tmp_path, "bycase-lr6e5-grpo100")["eval"][0]
    argv = alone["eval"][0]
    args, _ = parse_args(argv[argv.index("eval") + 1:])
    arm_args, _ = parse_args(arm[arm.index("eval") + 1:])
    assert [m.split("=")[0] for m in args.models] == ["sft", "random"]
    assert args.models[0].split("=", 1)[1].endswith("sft_hf")
    for key in ("suites", "games_per_case", "opponents", "game_context", "illegal_retries", "max_new_tokens",
                "temperature", "seed"):
        assert getattr(args, key) == getattr(arm_args, key), key
    assert "val_tasks_per_case=256" in argv and "val_tasks_per_case=256" in arm


def test_the_entropy_arm_is_the_lr6e5_arm_with_an_entropy_bonus(tmp_path):
    """smollm2-boardgames-bycase-lr6e5-ent01-grpo100.env: the lr 6e-5 arm whose entropy halved in 70 steps, with
    actor.entropy_coeff 0.01 and nothing else changed."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-lr6e5-grpo100", "bycase-lr6e5-ent01-grpo100")}
    entropy = arms["bycase-lr6e5-ent01-grpo100"]
    assert check_ppo(entropy, check_imports=False) == []
    assert float(entropy.actor_rollout_ref.actor.entropy_coeff) == 0.01
    assert float(arms["bycase-lr6e5-grpo100"].actor_rollout_ref.actor.entropy_coeff) == 0.0
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    for config in configs:
        config["actor_rollout_ref"]["actor"].pop("entropy_coeff")
    assert configs[0] == configs[1]


def test_the_tactics_arm_is_the_val256_control_with_a_tactics_term_the_reward_reads(tmp_path):
    """smollm2-boardgames-bycase-tactics-grpo100.env: the lr 3e-5 control with game.tactics_weight 0.3 and nothing
    else changed; the workers' adapter (and so the reward's) carries the weight."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-val256-grpo100", "bycase-tactics-grpo100")}
    tactics = arms["bycase-tactics-grpo100"]
    assert check_ppo(tactics, check_imports=False) == []
    env = OmegaConf.to_container(tactics.data.env, resolve=True)
    assert EnvMixture(env, where="data.env").adapters["openspiel"].game_settings.tactics_weight == 0.3
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    configs[1]["data"]["env"]["openspiel"]["game"].pop("tactics_weight")
    assert configs[0] == configs[1]


def test_the_tactics_entropy_arm_is_the_tactics_arm_with_an_entropy_bonus(tmp_path):
    """smollm2-boardgames-bycase-tactics-ent01-grpo100.env: the tactics arm with actor.entropy_coeff 0.01 only."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-tactics-grpo100", "bycase-tactics-ent01-grpo100")}
    entropy = arms["bycase-tactics-ent01-grpo100"]
    assert check_ppo(entropy, check_imports=False) == []
    assert float(entropy.actor_rollout_ref.actor.entropy_coeff) == 0.01
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    for config in configs:
        config["actor_rollout_ref"]["actor"].pop("entropy_coeff")
    assert configs[0] == configs[1]


def test_the_random75_arm_is_the_tactics_arm_with_tic_tac_toe_mostly_against_random(tmp_path):
    """smollm2-boardgames-bycase-tactics-random75-grpo100.env: the tactics arm with tic_tac_toe's games 3 in 4
    against random and 1 in 4 against MCTS(50) (the arm's: half and half), connect_four's mix and every other setting
    unchanged."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-tactics-grpo100", "bycase-tactics-random75-grpo100")}
    random75 = arms["bycase-tactics-random75-grpo100"]
    assert check_ppo(random75, check_imports=False) == []
    env = OmegaConf.to_container(random75.data.env, resolve=True)
    settings = EnvMixture(env, where="data.env").adapters["openspiel"].game_settings
    assert settings.opponent_mixture_at("game", "tic_tac_toe").shares() == pytest.approx(
        {"random": 0.75, "mcts:50": 0.25})
    assert settings.opponent_mixture_at("game", "connect_four").shares() == {"random": 0.5, "mcts:5": 0.5}
    assert settings.tactics_weight == 0.3
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    for config in configs:
        config["data"]["env"]["openspiel"]["game"]["opponents_by_case"].pop("tic_tac_toe", None)
    assert configs[0] == configs[1]


def test_the_columns_arm_is_the_tactics_arm_on_boards_with_a_line_per_column(tmp_path):
    """smollm2-boardgames-columns-base.env + smollm2-boardgames-columns-tactics-grpo100.env: the raw-board cold start
    and tactics run with openspiel.board_text=columns in every stage (SFT rows, GRPO, eval), and room for the
    longest columns-board game row measured (5,830 SmolLM2 tokens); nothing else changed."""
    columns_base = RUNS / "smollm2-boardgames-columns-base.env"
    base_stages = files_dry_run(tmp_path, None, base=columns_base)
    export = base_stages["export"][0]
    # the same rows otherwise
    assert_only_set_added(dry_run(tmp_path, None)["export"][0], export, "openspiel.board_text=columns")
    sft = compose("sft_trainer_engine", overrides_of(base_stages["sft"][0]))
    stages = files_dry_run(tmp_path, "columns-tactics-grpo100", base=columns_base,
                           spec=RUNS / "smollm2-boardgames-columns-tactics-grpo100.env", run_dir="same")
    columns = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
    assert check_ppo(columns, check_imports=False) == []
    assert sft.data.max_length == columns.data.max_prompt_length + columns.data.max_response_length >= 5830
    assert "openspiel.board_text=columns" in stages["eval"][0]
    raw = compose("ppo_trainer", overrides_of(dry_run(tmp_path, "bycase-tactics-grpo100", run_dir="same")["grpo"][0]))
    configs = [OmegaConf.to_container(cfg) for cfg in (raw, columns)]
    assert configs[1]["data"]["env"]["openspiel"].pop("board_text") == "columns"
    for config in configs:
        config["data"].pop("max_response_length")
    assert configs[0] == configs[1]


def test_the_value_arm_is_the_tactics_arm_with_an_exact_value_share_for_tic_tac_toe(tmp_path):
    """smollm2-boardgames-bycase-tactics-value-grpo100.env: the tactics arm with game.value_weight 0.3 and nothing
    else changed; the workers' adapter carries it, and only tic_tac_toe's games can be valued exactly."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-tactics-grpo100", "bycase-tactics-value-grpo100")}
    value = arms["bycase-tactics-value-grpo100"]
    assert check_ppo(value, check_imports=False) == []
    env = OmegaConf.to_container(value.data.env, resolve=True)
    adapter = EnvMixture(env, where="data.env").adapters["openspiel"]
    assert adapter.game_settings.value_weight == 0.3 and adapter.game_settings.tactics_weight == 0.3
    assert adapter.values_exactly("tic_tac_toe") and not adapter.values_exactly("connect_four")
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    configs[1]["data"]["env"]["openspiel"]["game"].pop("value_weight")
    assert configs[0] == configs[1]


def test_the_seat_arm_is_the_tactics_arm_with_the_second_seat_in_three_games_of_four(tmp_path):
    """smollm2-boardgames-bycase-tactics-seat13-grpo100.env: the tactics arm with game.seat_weights [1, 3] and nothing
    else changed; the workers' rows put the policy in the second seat about 3 times in 4, in both games."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-tactics-grpo100", "bycase-tactics-seat13-grpo100")}
    seats = arms["bycase-tactics-seat13-grpo100"]
    assert check_ppo(seats, check_imports=False) == []
    env = OmegaConf.to_container(seats.data.env, resolve=True)
    mixture = EnvMixture(env, where="data.env")
    assert mixture.adapters["openspiel"].game_settings.seat_weights == [1.0, 3.0]
    plan = mixture.plan("train")
    for case in ("tic_tac_toe", "connect_four"):
        refs = [ref for ref in plan if ref.case == case][:300]
        mine = [mixture.row(ref, "train", i)["extra_info"]["seat"] for i, ref in enumerate(refs)]
        assert len(mine) == 300 and 0.65 < sum(mine) / len(mine) < 0.85
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    configs[1]["data"]["env"]["openspiel"]["game"].pop("seat_weights")
    assert configs[0] == configs[1]



def test_the_no_kl_arm_is_the_tactics_arm_without_the_kl_anchor(tmp_path):
    """smollm2-boardgames-bycase-tactics-nokl-grpo100.env: the tactics arm with actor.use_kl_loss off and nothing else
    changed (issue 45's KL comparison over 100 steps)."""
    arms = {run: compose("ppo_trainer", overrides_of(dry_run(tmp_path, run, run_dir="same")["grpo"][0]))
            for run in ("bycase-tactics-grpo100", "bycase-tactics-nokl-grpo100")}
    no_kl = arms["bycase-tactics-nokl-grpo100"]
    assert check_ppo(no_kl, check_imports=False) == []
    assert no_kl.actor_rollout_ref.actor.use_kl_loss is False
    assert arms["bycase-tactics-grpo100"].actor_rollout_ref.actor.use_kl_loss is True
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    for config in configs:
        config["actor_rollout_ref"]["actor"].pop("use_kl_loss")
    assert configs[0] == configs[1]


@pytest.mark.parametrize("run, weight", [("bycase-tactics-credit-grpo100", 1.0), ("bycase-tactics-credit2-grpo100", 2.0),
                                         ("bycase-tactics-credit-tactic-grpo100", 1.0)])
def test_the_credit_arms_are_the_tactics_arm_with_credit_per_move_in_tic_tac_toe(tmp_path, run, weight):
    """smollm2-boardgames-bycase-tactics-credit(2, -tactic)-grpo100.env: the tactics arm with game.move_credit 1.0
    (2.0) and nothing else changed (the tactic arm differs from the 1.0 arm by the code's credit target only); the run
    loads the patch that turns the records' reply values into advantages."""
    stages = {name: dry_run(tmp_path, name, run_dir="same")["grpo"][0] for name in ("bycase-tactics-grpo100", run)}
    arms = {name: compose("ppo_trainer", overrides_of(argv)) for name, argv in stages.items()}
    credit = arms[run]
    assert check_ppo(credit, check_imports=False) == []
    env = OmegaConf.to_container(credit.data.env, resolve=True)
    assert EnvMixture(env, where="data.env").adapters["openspiel"].game_settings.move_credit == weight
    modules = credit.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES
    assert "verl_ext.patches.move_credit" in modules.split(",")
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    configs[1]["data"]["env"]["openspiel"]["game"].pop("move_credit")
    assert configs[0] == configs[1]


def test_the_tic_tac_toe_arms_are_the_tactics_arm_on_one_game_raw_and_with_every_line_written_out(tmp_path):
    """smollm2-ttt-base.env + smollm2-ttt-tactics-grpo100.env: the board-game cold start and tactics run on
    tic_tac_toe alone (connect_four's opponents entry gone with its case); smollm2-ttt-lines-*.env: the same with
    openspiel.board_text=lines in every stage (SFT rows, GRPO, eval) and nothing else changed."""
    ttt_base, lines_base = RUNS / "smollm2-ttt-base.env", RUNS / "smollm2-ttt-lines-base.env"
    raw_export = files_dry_run(tmp_path, None, base=ttt_base)["export"][0]
    lines_export = files_dry_run(tmp_path, None, base=lines_base)["export"][0]
    assert "openspiel.game_types=[tic_tac_toe]" in raw_export
    assert_only_set_added(raw_export, lines_export, "openspiel.board_text=lines")
    arms = {}
    for name, base in (("ttt-tactics-grpo100", ttt_base), ("ttt-lines-tactics-grpo100", lines_base)):
        stages = files_dry_run(tmp_path, name, base=base, spec=RUNS / f"smollm2-{name}.env", run_dir="same")
        arms[name] = compose("ppo_trainer", overrides_of(stages["grpo"][0]))
        assert check_ppo(arms[name], check_imports=False) == []
        env = OmegaConf.to_container(arms[name].data.env, resolve=True)
        assert env["openspiel"]["game_types"] == ["tic_tac_toe"] and env["openspiel"]["task_mode"] == "game"
        settings = EnvMixture(env, where="data.env").adapters["openspiel"].game_settings
        assert settings.tactics_weight == 0.3
        assert settings.opponent_mixture_at("game", "tic_tac_toe").shares() == {"random": 0.5, "mcts:50": 0.5}
    assert "openspiel.board_text=lines" in stages["eval"][0]
    # the same run as the two-game tactics arm otherwise: lr, KL anchor, clip, batch, steps
    two_game_stages = dry_run(tmp_path, "bycase-tactics-grpo100", run_dir="same")
    two_games = compose("ppo_trainer", overrides_of(two_game_stages["grpo"][0]))
    raw = arms["ttt-tactics-grpo100"]
    for key in ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.kl_loss_coef",
                "actor_rollout_ref.actor.clip_ratio_high", "data.train_batch_size", "actor_rollout_ref.rollout.n",
                "trainer.total_training_steps"):
        assert OmegaConf.select(raw, key) == OmegaConf.select(two_games, key), key
    configs = [OmegaConf.to_container(cfg) for cfg in arms.values()]
    assert configs[1]["data"]["env"]["openspiel"].pop("board_text") == "lines"
    configs[0]["data"]["env"]["openspiel"].pop("board_text", None)
    assert configs[0] == configs[1]


def assert_fitted_differs_only_in_sft_batch_and_epochs(tmp_path: Path, control: str, fitted: str) -> None:
    """Base file ``fitted`` makes the cold start of base file ``control`` from the same rows with the same lr and
    length, only with batches of 32 rows and 4 epochs instead of 128 and 2."""
    stages = [files_dry_run(tmp_path, None, base=RUNS / name) for name in (control, fitted)]
    assert stages[1]["export"] == stages[0]["export"]
    configs = [compose("sft_trainer_engine", overrides_of(each["sft"][0])) for each in stages]
    assert [(c.data.train_batch_size, c.trainer.total_epochs) for c in configs] == [(128, 2), (32, 4)]
    plain = [OmegaConf.to_container(cfg) for cfg in configs]
    for config in plain:
        config["data"].pop("train_batch_size")
        config["trainer"].pop("total_epochs")
    assert plain[0] == plain[1]


def test_the_fitted_tic_tac_toe_cold_start_differs_from_its_control_only_in_sft_steps(tmp_path):
    """smollm2-ttt-fit-base.env: the tic_tac_toe cold start with batches of 32 rows and 4 epochs (300 optimizer steps
    instead of 36); the same rows, lr and length; its GRPO run file is the control's."""
    assert_fitted_differs_only_in_sft_batch_and_epochs(tmp_path, "smollm2-ttt-base.env", "smollm2-ttt-fit-base.env")
    runs = [files_dry_run(tmp_path, name, base=base, spec=RUNS / f"smollm2-{name}.env", run_dir="same")["grpo"][0]
            for name, base in (("ttt-tactics-grpo100", RUNS / "smollm2-ttt-base.env"),
                               ("ttt-fit-tactics-grpo100", RUNS / "smollm2-ttt-fit-base.env"))]
    assert runs[0] == runs[1]


def test_the_control_cold_start_is_judged_alone_with_the_fitted_runs_eval(tmp_path):
    """smollm2-ttt-coldstart-eval.env: the control cold start (smollm2-ttt-base.env) runs only the eval stage, judges
    the cold start alone, and asks what the fitted run's eval asks (held-out set, games, opponents, seed), with its
    vLLM engine capped to share the GPU with the fitted driver."""
    control = files_dry_run(tmp_path, "ttt-coldstart-eval", base=RUNS / "smollm2-ttt-base.env",
                            spec=RUNS / "smollm2-ttt-coldstart-eval.env", run_dir="same")
    fitted = files_dry_run(tmp_path, "ttt-fit-tactics-grpo100", base=RUNS / "smollm2-ttt-fit-base.env",
                           spec=RUNS / "smollm2-ttt-fit-tactics-grpo100.env", run_dir="same")
    assert list(control) == ["eval"]
    (ours,), (theirs,) = control["eval"], fitted["eval"]  # one eval each: their arena plays whole games already

    def models(argv: list[str]) -> list[str]:
        return [m.split("=")[0] for m in argv[argv.index("--models") + 1:argv.index("--suites")]]

    caps = ("--vllm-gpu-memory-utilization", "--vllm-kv-cache-memory-bytes")

    def without_models_and_cap(argv: list[str]) -> list[str]:
        argv = argv[:argv.index("--models")] + argv[argv.index("--suites"):]
        for flag in caps:
            at = argv.index(flag) if flag in argv else len(argv)
            argv = argv[:at] + argv[at + 2:]
        return argv

    assert [ours[ours.index(flag) + 1] for flag in caps] == ["0.3", "4294967296"]
    assert not any(flag in theirs for flag in caps)
    assert without_models_and_cap(ours) == without_models_and_cap(theirs)
    assert models(ours) == ["sft", "random"] and models(theirs) == ["sft", "grpo", "random"]


def test_the_fitted_two_game_cold_start_differs_from_the_kept_one_only_in_sft_steps(tmp_path):
    """smollm2-boardgames-fit-base.env: the two-game cold start with batches of 32 rows and 4 epochs, as
    smollm2-ttt-fit-base.env fitted tic_tac_toe's; the same rows, lr and length."""
    assert_fitted_differs_only_in_sft_batch_and_epochs(tmp_path, "smollm2-boardgames-base.env",
                                                        "smollm2-boardgames-fit-base.env")


def test_the_spread_cold_start_is_the_fitted_one_taught_by_a_teacher_that_varies(tmp_path):
    """smollm2-ttt-spread-base.env: smollm2-ttt-fit-base.env's cold start (same rows, batch, epochs, lr) with the
    export's answers drawn within 0.1 of the engine's best (openspiel.reference_margin, in train and val rows alike);
    its GRPO run is the tactics run, and the smaller plan's file runs the signal check and judges the cold start
    alone with that run's settings."""
    fitted, spread = (files_dry_run(tmp_path, None, base=RUNS / name)
                      for name in ("smollm2-ttt-fit-base.env", "smollm2-ttt-spread-base.env"))
    assert spread["sft"] == fitted["sft"]
    for theirs, ours in zip(fitted["export"], spread["export"], strict=True):
        assert_only_set_added(theirs, ours, "openspiel.reference_margin=0.1")
    runs = {name: files_dry_run(tmp_path, name, base=base, spec=RUNS / f"smollm2-{name}.env", run_dir="same")
            for name, base in (("ttt-tactics-grpo100", RUNS / "smollm2-ttt-base.env"),
                               ("ttt-spread-tactics-grpo100", RUNS / "smollm2-ttt-spread-base.env"),
                               ("ttt-spread-coldstart", RUNS / "smollm2-ttt-spread-base.env"))}
    assert runs["ttt-spread-tactics-grpo100"]["grpo"] == runs["ttt-tactics-grpo100"]["grpo"]
    smaller = runs["ttt-spread-coldstart"]
    assert list(smaller) == ["signal", "eval"]
    eval_argv = smaller["eval"][0]
    models = [m.split("=")[0] for m in eval_argv[eval_argv.index("--models") + 1:eval_argv.index("--suites")]]
    assert models == ["sft", "random"]


def test_the_two_game_spread_cold_start_sets_a_margin_per_game(tmp_path):
    """smollm2-boardgames-spread-base.env: the fitted two-game cold start with tic_tac_toe's answers drawn within 0.1
    and connect_four's within 0.05 of the engine's best; nothing else changed, and the export takes the mapping."""
    fitted, spread = (files_dry_run(tmp_path, None, base=RUNS / name)
                      for name in ("smollm2-boardgames-fit-base.env", "smollm2-boardgames-spread-base.env"))
    assert spread["sft"] == fitted["sft"]
    for theirs, ours in zip(fitted["export"], spread["export"], strict=True):
        assert_only_set_added(theirs, ours, "openspiel.reference_margin={tic_tac_toe: 0.1, connect_four: 0.05}")
    sets = [ours[i + 1] for i, flag in enumerate(ours) if flag == "--set"]
    section = load_env_section(None, sets)
    adapter = EnvMixture(section, where="env").adapters["openspiel"]
    assert (adapter.reference_margin_of("tic_tac_toe"), adapter.reference_margin_of("connect_four")) == (0.1, 0.05)
