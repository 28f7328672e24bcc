"""``verl-ext eval``: held-out single-move tasks, full games against OpenSpiel bots, logic puzzles, and the
exploitability of the model's policy in small poker games.

Example (base vs LoRA-trained, transformers or vLLM backend picked automatically)::

    verl-ext eval --config eval.yaml --models base=Qwen2.5-0.5B-Instruct \\
        trained=Qwen2.5-0.5B-Instruct,adapter=checkpoints/lora --opponents random,mcts:200 --out outputs/eval

The YAML holds the env section used for training (``env:`` or ``data: {env: ...}``, or the whole file)
and optionally an ``eval:`` section with defaults for any flag below (``games_per_case: 50``).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

from ..envs.config import ConfigError, to_plain
from ..mixture import EnvMixture, config_dict
from .backends import BACKENDS, DTYPES, SCORING_DTYPES, GenerationSettings
from .single_move import POSITIONS

SUITES = ("single", "arena", "logic", "exploitability")
SUITE_KEYS = {"single": "single_move", "arena": "arena", "logic": "logic", "exploitability": "exploitability"}
# The env of `--suites exploitability` when no env section is given at all.
EXPLOITABILITY_ENV = {"openspiel": {"cases": ["kuhn_poker", "leduc_poker"]}}
SCHEMA_VERSION = 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl-ext eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML with the env section (as in training) and optional 'eval:' defaults")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="env override, e.g. --set openspiel.game_types=[tic_tac_toe] (repeatable)")
    p.add_argument("--models", nargs="+", default=None, metavar="NAME=PATH[,adapter=PATH]",
                   help="models to compare: HF folders (merged checkpoints too), base+LoRA via adapter=..., "
                        "or scripted baselines scripted:first|random|illegal|tactician (tactician: a random "
                        "winning move, else one that does not let the opponent win at once; docs/eval.md)")
    p.add_argument("--adapter", help="LoRA adapter folder for the single --models entry (same as ,adapter=PATH)")
    p.add_argument("--suites", default="auto",
                   help="comma list of single,arena,logic,exploitability (auto: single+arena if openspiel is "
                        "configured, logic if logic is; exploitability only when named)")
    p.add_argument("--positions", choices=POSITIONS, default="held-out",
                   help="single suite: held-out positions (default), or training: the first val_tasks_per_case "
                        "distinct positions of the training plan, in sample (set openspiel.num_tasks_per_case and "
                        "seed as the run trained), to tell a model that did not fit from one that does not "
                        "generalise")
    p.add_argument("--cfr-solver", default="cfr+", help="exploitability suite: OpenSpiel's cfr+ or cfr solver for "
                                                        "the reference policy")
    p.add_argument("--cfr-iterations", type=int, default=1000,
                   help="exploitability suite: solver iterations (solved once, cached in $VERL_EXT_CACHE/cfr)")
    p.add_argument("--exploitability-dtype", choices=SCORING_DTYPES, default="float32",
                   help="exploitability suite: compute dtype of the teacher-forced scoring (transformers backend, "
                        "whatever --backend/--dtype generate with); bf16 logits quantize the log-probs in 1/8 nat "
                        "steps")
    p.add_argument("--games-per-case", type=int, default=20, help="games per case and opponent (seats alternate)")
    p.add_argument("--opponents", default="random,mcts:200",
                   help="comma list of random, mcts:N (N simulations), cfr:N (CFR+ policy after N iterations; "
                        "kuhn_poker and leduc_poker only), self (the model in every seat: Hanabi's team score)")
    p.add_argument("--illegal-retries", type=int, default=0,
                   help="extra tries after an illegal/unparseable move before it forfeits (default 0: forfeit)")
    p.add_argument("--max-game-moves", type=int, default=0,
                   help="stop a game after this many moves and count it a draw (0: the game's own end)")
    p.add_argument("--game-context", default="turn",
                   help="turn: a fresh prompt each turn (as single-move training); game: the whole game "
                        "conversation (as full-game training, TASK_MODE=game)")
    p.add_argument("--paired-baseline", default=None, metavar="NAME",
                   help="single suite: the model every other is compared with position by position (the change "
                        "in engine score with its interval); default sft when evaluated, else the first model")
    p.add_argument("--seed", type=int, default=0, help="seeds games, bots, chance and sampling")
    p.add_argument("--confidence", type=float, default=0.95, help="level of the Wilson intervals")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy decoding")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: vLLM if installed and a GPU is seen")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per generate call (transformers)")
    p.add_argument("--device", default="auto", help="transformers device (auto: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="generation dtype (auto: bfloat16 on GPU, float32 on CPU); the exploitability suite scores "
                        "in --exploitability-dtype")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--vllm-kv-cache-memory-bytes", type=int, default=None,
                   help="a fixed KV cache size: vLLM skips its start-up memory profile (for an eval that shares its "
                        "GPU with another process)")
    p.add_argument("--vllm-max-model-len", type=int, default=None)
    p.add_argument("--vllm-tensor-parallel-size", type=int, default=1)
    p.add_argument("--vllm-max-lora-rank", type=int, default=64)
    p.add_argument("--out", help="output folder for results.json, results.md, results.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def load_config(path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(env section, eval defaults) from a YAML file; both empty without one."""
    if not path:
        return {}, {}
    from omegaconf import OmegaConf

    if not Path(path).is_file():
        raise ConfigError(f"--config: no such file {path!r}")
    try:
        loaded = to_plain(OmegaConf.load(path))
    except Exception as err:  # yaml errors carry line numbers
        raise ConfigError(f"--config: cannot read {path!r}: {err}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"--config: {path!r} must hold a mapping, got {type(loaded).__name__}")
    eval_section = loaded.get("eval") or {}
    if not isinstance(eval_section, dict):
        raise ConfigError(f"--config: 'eval' in {path!r} must be a mapping of flag defaults")
    if "env" in loaded:
        env = loaded["env"]
    elif isinstance(loaded.get("data"), dict) and "env" in loaded["data"]:
        env = loaded["data"]["env"]
    else:
        env = {k: v for k, v in loaded.items() if k != "eval"}
    return env or {}, eval_section


def apply_overrides(section: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` dotlist overrides on top of the env section."""
    from omegaconf import OmegaConf

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set: expected KEY=VALUE (e.g. openspiel.game_types=[hex]), got {item!r}")
    if not overrides:
        return section
    merged = OmegaConf.merge(OmegaConf.create(section), OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Flags over YAML ``eval:`` defaults over built-in defaults; returns (args, env section)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    env, eval_defaults = load_config(args.config)
    if eval_defaults:
        known = {a.dest for a in parser._actions} - {"help", "config", "overrides"}
        defaults = {}
        for key, value in eval_defaults.items():
            dest = str(key).replace("-", "_")
            if dest not in known:
                raise ConfigError(f"--config: unknown key eval.{key} (known: {', '.join(sorted(known))})")
            if dest == "models" and isinstance(value, dict):
                value = [_model_entry(name, spec) for name, spec in value.items()]
            elif dest == "models" and isinstance(value, str):
                value = [value]
            elif dest in ("opponents", "suites") and isinstance(value, list):
                value = ",".join(map(str, value))
            defaults[dest] = value
        parser.set_defaults(**defaults)
        args = parser.parse_args(argv)
    return args, apply_overrides(env, list(args.overrides))


def _model_entry(name: str, spec: Any) -> str:
    """YAML ``models: {name: path}`` or ``{name: {path: ..., adapter: ...}}`` -> a --models entry."""
    if isinstance(spec, str):
        return f"{name}={spec}"
    if isinstance(spec, dict) and "path" in spec:
        extra = [f"{k}={v}" for k, v in spec.items() if k != "path"]
        return ",".join([f"{name}={spec['path']}", *extra])
    raise ConfigError(f"--config: eval.models.{name} must be a path or a mapping with 'path', got {spec!r}")


def resolve_suites(text: str, mixture: EnvMixture) -> list[str]:
    """The suites to run, checked against the configured envs."""
    if text.strip() == "auto":
        suites = (["single", "arena"] if "openspiel" in mixture.adapters else [])
        return suites + (["logic"] if "logic" in mixture.adapters else [])
    suites = [s.strip() for s in text.split(",") if s.strip()]
    if not suites:
        raise ConfigError("--suites: name at least one of single, arena, logic, exploitability")
    for suite in suites:
        if suite not in SUITES:
            raise ConfigError(f"--suites: unknown suite {suite!r} (choose from {', '.join(SUITES)}, or auto)")
        env = "logic" if suite == "logic" else "openspiel"
        if env not in mixture.adapters:
            example = {"logic": "logic.cases=[mini_sudoku]", "exploitability": "'openspiel.cases=[kuhn_poker]'"}
            raise ConfigError(f"--suites: {suite!r} needs the {env!r} env; configure it (e.g. --set "
                              f"{example.get(suite, 'openspiel.game_types=[hex]')})")
    return [s for s in SUITES if s in suites]


def single_move_section(env_section: dict[str, Any]) -> dict[str, Any]:
    """The env section with full-game training settings dropped: held-out tasks are single moves, and the
    arena's games follow its own flags (--opponents, --illegal-retries, --max-game-moves, --game-context)."""
    section = dict(env_section or {})
    if isinstance(section.get("openspiel"), dict):
        section["openspiel"] = {k: v for k, v in section["openspiel"].items()
                                if k not in ("task_mode", "game_share", "game")}
    return section


def run(argv: list[str] | None = None) -> int:
    """Parse, evaluate every model, write the outputs. Raises ConfigError on bad input."""
    from .arena import Arena, ArenaSettings, legal_adapter, parse_opponents
    from .exploitability import (build_references, make_scorer, reference_results, scoring_backend,
                                 scoring_settings, supported_cases)
    from .logic import evaluate_logic
    from .paired import choose_baseline, paired_changes
    from .policies import make_policy, parse_model_specs
    from .report import markdown, write_all
    from .single_move import engine_adapter, evaluate_single_move, fixed_move_baselines, position_tasks

    args, env_section = parse_args(argv)
    if not args.out:
        raise ConfigError("--out: required (folder for results.json, results.md, results.png)")
    if not args.models:
        raise ConfigError("--models: name at least one model (e.g. --models base=/path/to/model)")
    entries = list(args.models)
    if args.adapter:
        if len(entries) != 1:
            raise ConfigError("--adapter: applies to a single --models entry; with several, write "
                              "name=path,adapter=PATH per model")
        entries[0] += f",adapter={args.adapter}"
    specs = parse_model_specs(entries)
    baseline = choose_baseline([spec.name for spec in specs], args.paired_baseline)
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence: must be in (0, 1), got {args.confidence}")
    generation = GenerationSettings(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        batch_size=args.batch_size, device=args.device, dtype=args.dtype,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_kv_cache_memory_bytes=args.vllm_kv_cache_memory_bytes, vllm_max_model_len=args.vllm_max_model_len,
        vllm_tensor_parallel_size=args.vllm_tensor_parallel_size, vllm_max_lora_rank=args.vllm_max_lora_rank)
    generation.validate()
    if not env_section and args.suites.replace(" ", "") == "exploitability":
        env_section = EXPLOITABILITY_ENV
    mixture = EnvMixture(single_move_section(env_section), where="env")
    suites = resolve_suites(args.suites, mixture)
    arena = None
    if "arena" in suites:
        arena_settings = ArenaSettings(games_per_case=args.games_per_case,
                                       opponents=tuple(parse_opponents(args.opponents)),
                                       illegal_retries=args.illegal_retries, max_game_moves=args.max_game_moves,
                                       seed=args.seed, confidence=args.confidence, context=args.game_context)
        arena = Arena(legal_adapter(mixture), arena_settings)
    engine, engine_skipped = engine_adapter(mixture) if "single" in suites else (None, {})
    progress = not args.no_progress
    references: dict[str, Any] = {}
    poker_skipped: dict[str, str] = {}
    if "exploitability" in suites:
        from ..envs.cfr_policy import check_solver

        try:
            check_solver(args.cfr_solver, args.cfr_iterations, "--cfr-solver/--cfr-iterations")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        poker_cases, poker_skipped = supported_cases(mixture.adapters["openspiel"])
        if not poker_cases:
            raise ConfigError(f"--suites exploitability: none of the openspiel cases {list(poker_skipped)} is "
                              "two-player kuhn_poker or leduc_poker (e.g. --set 'openspiel.cases=[kuhn_poker,"
                              "leduc_poker]')")
        started = time.perf_counter()
        references = build_references(mixture.adapters["openspiel"], poker_cases, args.cfr_solver,
                                      args.cfr_iterations)
        print(f"verl-ext eval: exploitability references ({', '.join(poker_cases)}) in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)

    results: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "settings": {
            "seed": args.seed,
            "confidence": args.confidence,
            "suites": suites,
            "games_per_case": args.games_per_case,
            "opponents": [o.label for o in arena.settings.opponents] if arena else [],
            "illegal_retries": args.illegal_retries,
            "max_game_moves": args.max_game_moves,
            "game_context": args.game_context,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "positions": args.positions,
        },
        "env": mixture.settings,
        "env_resolved": {name: config_dict(adapter) for name, adapter in mixture.adapters.items()},
        "cases": {name: adapter.cases() for name, adapter in mixture.adapters.items()},
        "val_tasks_per_case": mixture.val_tasks_per_case,
        "models": {},
    }
    if engine is not None:
        results["single_move_baseline"] = fixed_move_baselines(
            engine, position_tasks(mixture, "openspiel", args.positions), engine_skipped)
    if references:
        results["exploitability_reference"] = reference_results(references, poker_skipped, args.cfr_solver,
                                                                args.cfr_iterations, args.exploitability_dtype)
    # Teacher-forced scoring runs on a transformers backend in the scoring dtype: when nothing else needs
    # generation, the policy's own backend is that one (one load per model).
    backend_kind, policy_settings = args.backend, generation
    if suites == ["exploitability"]:
        backend_kind, policy_settings = "transformers", scoring_settings(generation, args.exploitability_dtype)
    for spec in specs:
        started = time.perf_counter()
        policy = make_policy(spec, backend_kind, policy_settings)
        backend = getattr(getattr(policy, "backend", None), "name", "scripted")
        model: dict[str, Any] = {"spec": spec.describe(), "backend": backend}
        try:
            if "single" in suites:
                model["single_move"] = evaluate_single_move(policy, mixture, engine, engine_skipped, args.seed,
                                                            args.confidence, progress, args.positions)
            if arena is not None:
                model["arena"] = arena.play(policy, progress)
            if "logic" in suites:
                model["logic"] = evaluate_logic(policy, mixture, args.seed, args.confidence, progress)
            own = scoring_backend(policy, args.exploitability_dtype)
            if references and (spec.scripted or own is not None):
                model["exploitability"] = _exploitability(policy, references, Path(args.out), own)
        finally:
            policy.close()
        if references and "exploitability" not in model:  # generated with vLLM or in bf16: a scorer after it
            from .policies import ModelPolicy

            scorer = make_scorer(spec, generation, args.exploitability_dtype)
            try:
                model["exploitability"] = _exploitability(ModelPolicy(spec.name, scorer), references, Path(args.out),
                                                          scorer)
            finally:
                scorer.close()
        results["models"][spec.name] = model
        paired = paired_changes(results["models"], baseline, args.confidence)
        if paired:
            results["single_move_paired"] = {"baseline": baseline, "models": paired}
        paths = write_all(results, Path(args.out))  # after every model: a later failure keeps earlier results
        print(f"verl-ext eval: {spec.name} done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print(markdown(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _exploitability(policy: Any, references: dict[str, Any], out: Path, scorer: Any = None) -> dict[str, Any]:
    """The exploitability suite for one policy, a model scored by ``scorer``; its full tabular policies go to
    ``out/exploitability/``."""
    import json

    from .exploitability import evaluate_exploitability
    from .report import _atomic_write

    summary, tables = evaluate_exploitability(policy, references, scorer)
    for case, table in tables.items():
        name = f"exploitability/{policy.name}.{re.sub(r'[^A-Za-z0-9_.-]+', '_', case).strip('_')}.json"
        _atomic_write(out / name, (json.dumps(table, indent=1, sort_keys=True) + "\n").encode())
        summary["cases"][case]["policy_file"] = name
    return summary


def main(argv: list[str] | None = None) -> int:
    """Console entry (``verl-ext eval``): 0 on success, 2 on a configuration error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(argv)
    except ConfigError as err:
        print(f"verl-ext eval: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
