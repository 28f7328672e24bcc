"""``verl-ext signal``: before a GRPO run, sample the train prompts as the run will and say whether GRPO can learn.

For ``--prompts`` train prompts (the rows verl's ``DynamicEnvDataset`` serves, spread evenly over the split, so
every case is in proportion to the mixture) it samples ``--n`` replies each with the rollout's decoding (verl
0.9.1's defaults: temperature 1.0, top_p 1.0, no top-k) and scores every reply with the training reward
(``verl_ext.reward.compute_score``). It reports format and valid (legal / correct) rates, the mean score, the share
of groups whose rewards are not all equal (with a Wilson interval), response lengths and the share at the token
cap, per case and overall, plus example replies; below ``--threshold`` it prints one warning naming the cures.
Full-game rows (``openspiel.task_mode=game|mixed``) are played to the end, ``--n`` games per row as the run's agent
loop plays them (``signal_games.py``); the report adds the share of groups whose games were all the same game.

    verl-ext signal --model /models/smollm2 --set 'openspiel.game_types=[tic_tac_toe,connect_four]' \\
        --set openspiel.reward_mode=engine --prompts 64 --n 8 --max-new-tokens 512 --out outputs/signal
    verl-ext signal --model /models/ttt-sft --set 'openspiel.game_types=[tic_tac_toe]' \
        --set openspiel.task_mode=game --set openspiel.game.opponent=random:0.5,mcts:50:0.5 \
        --max-new-tokens 3584 --temperature 1.5 --prompts 32 --out outputs/signal-games

Exit status: 0 (a report, with or without the warning), 2 (bad input, before any model is loaded), 3 (no signal
under ``--strict``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import sample_log
from ..cold_start_overlap import cold_start_contents, overlap_note, training_overlap
from ..envs.config import ConfigError
from ..mixture import EnvMixture
from ..sample_text import printable
from ..seeding import stable_seed
from .backends import BACKENDS, DTYPES, GenerationSettings
from .signal_games import GameBudgets, is_game_row, play_groups
from .signal_report import EXAMPLE_CHARS, GroupTally, ScoredReply, markdown, no_signal_warning

EXIT_NO_SIGNAL = 3
ENV_PREFIX = "data.env."
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# weights in formats neither backend loads, skipped when fetching a Hub model
HUB_SKIP = ["*.pth", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.gguf", "*.ot", "original/*", "onnx/*"]
SCHEMA_VERSION = 1
EXAMPLES = 3
# prompts per generate call (times --n replies): bounds memory and lets a progress bar move
PROMPTS_PER_CALL = 32


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl-ext signal", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="PATH[,adapter=PATH]",
                   help="Hugging Face model folder the run starts from, optionally with a LoRA adapter")
    p.add_argument("--adapter", help="LoRA adapter folder (same as --model PATH,adapter=DIR)")
    p.add_argument("--config", help="YAML with the env section (as for verl-ext export / eval)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="env override, e.g. --set openspiel.game_types=[tic_tac_toe] (repeatable)")
    p.add_argument("--env-override", dest="hydra_overrides", action="append", default=[],
                   metavar="[+]data.env.KEY=VALUE",
                   help="a main_ppo override of the env in Hydra syntax, as the train scripts pass it (repeatable; "
                        "applied after --config and --set)")
    p.add_argument("--prompts", type=int, default=64, help="train prompts to sample (one GRPO group each)")
    p.add_argument("--n", type=int, default=8, help="replies per prompt: the run's group size (ROLLOUT_N)")
    p.add_argument("--max-new-tokens", type=int, default=512,
                   help="the run's response length (MAX_RESPONSE_LENGTH): a reply's cap, or a whole game's budget")
    p.add_argument("--max-prompt-length", type=int, default=512,
                   help="the run's prompt length (MAX_PROMPT_LENGTH): with the response length, the context of a "
                        "self-play opponent in whole games")
    p.add_argument("--temperature", type=float, default=1.0, help="the rollout's temperature (verl: 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="the rollout's top_p (verl: 1.0)")
    p.add_argument("--threshold", type=float, default=0.1,
                   help="warn when the share of groups with signal is below this")
    p.add_argument("--strict", action="store_true", help=f"exit {EXIT_NO_SIGNAL} when below the threshold")
    p.add_argument("--seed", type=int, default=0, help="seeds the sampling")
    p.add_argument("--confidence", type=float, default=0.95, help="level of the Wilson intervals")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: vLLM if installed and a GPU is seen")
    p.add_argument("--batch-size", type=int, default=64, help="replies per generate call (transformers)")
    p.add_argument("--device", default="auto", help="transformers device (auto: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--vllm-max-model-len", type=int, default=None)
    p.add_argument("--cold-start-data", metavar="PARQUET",
                   help="the cold start's SFT rows (verl-ext export --format sft): report how many of the training "
                        "prompts are positions it was trained on (cold_start_overlap.py)")
    p.add_argument("--out", help="folder for signal.json and signal.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse settings that cannot make a meaningful check, naming the flag and value."""
    if args.n < 2:
        raise ConfigError(f"--n: a GRPO group needs at least 2 replies to compare, got {args.n} "
                          "(use the run's ROLLOUT_N, e.g. 8)")
    if args.prompts < 1:
        raise ConfigError(f"--prompts: must be >= 1, got {args.prompts}")
    if not 0.0 <= args.threshold <= 1.0:
        raise ConfigError(f"--threshold: a share of groups, must be in [0, 1], got {args.threshold}")
    if not 0.0 < args.confidence < 1.0:
        raise ConfigError(f"--confidence: must be in (0, 1), got {args.confidence}")
    if args.max_new_tokens < 1 or args.max_prompt_length < 1:
        raise ConfigError(f"--max-new-tokens / --max-prompt-length: must be >= 1, got {args.max_new_tokens} / "
                          f"{args.max_prompt_length}")
    if args.temperature <= 0:
        raise ConfigError(f"--temperature: GRPO samples its groups, must be > 0, got {args.temperature}")


def apply_hydra_overrides(section: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The env section with main_ppo's own ``[+|++]data.env.KEY=VALUE`` overrides applied, parsed by Hydra's
    override parser (quoting and escapes as verl reads them, e.g. a ``system_prompt`` with an apostrophe)."""
    if not overrides:
        return section
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as err:  # Hydra's grammar errors name the override and the position
        raise ConfigError(f"--env-override: {err}") from None
    conf = OmegaConf.create(section)
    for override in parsed:
        key = override.key_or_group
        if not key.startswith(ENV_PREFIX) or override.is_delete():
            raise ConfigError(f"--env-override: expected [+]{ENV_PREFIX}KEY=VALUE, got {override.input_line!r}")
        OmegaConf.update(conf, key[len(ENV_PREFIX):], override.value(), merge=True)
    return OmegaConf.to_container(conf, resolve=True)  # type: ignore[return-value]


def training_rows(env_section: dict[str, Any], prompts: int) -> list[dict[str, Any]]:
    """``prompts`` rows of the train split exactly as ``DynamicEnvDataset`` serves them to verl, spread evenly."""
    from ..dataset import DynamicEnvDataset

    dataset = DynamicEnvDataset("env://train", tokenizer=None, config={"env": env_section})
    total = len(dataset)
    if prompts > total:
        print(f"verl-ext signal: the train split has {total} prompts; sampling all of them", file=sys.stderr)
        prompts = total
    return [dataset[i * total // prompts] for i in range(prompts)]


def local_model(text: str) -> str:
    """``--model``'s folder: a local path as is; a Hub id (``org/name``, as MODEL_PATH may be) fetched into the
    Hugging Face cache, where the run reads it too (``HF_HUB_OFFLINE=1``: the cache only)."""
    if Path(text).is_dir() or not HUB_ID.fullmatch(text):
        return text
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(text, ignore_patterns=HUB_SKIP)
    except Exception as err:  # offline without a cached copy, no such repo, no network
        raise ConfigError(f"--model: {text!r} is neither a local folder nor a Hugging Face model that could be "
                          f"fetched ({type(err).__name__}: {err})") from None


@contextmanager
def no_sample_log() -> Iterator[None]:
    """The check's replies are not the run's: keep them out of a ``VERL_EXT_SAMPLE_LOG`` set in the environment."""
    saved = os.environ.pop(sample_log.ENV_VAR, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[sample_log.ENV_VAR] = saved


def score_group(row: dict[str, Any], replies: list[str], tokens: list[int] | None) -> list[ScoredReply]:
    """Score every reply of one group with the training reward, as verl's reward loop calls it."""
    from ..reward import compute_score

    scored = []
    for k, reply in enumerate(replies):
        result = compute_score(row["data_source"], reply, row["reward_model"]["ground_truth"], row["extra_info"])
        scored.append(ScoredReply(reply=reply, score=float(result["score"]), format_ok=bool(result["format_ok"]),
                                  valid=bool(result["valid"]), failed=bool(result["failed"]),
                                  tokens=None if tokens is None else int(tokens[k])))
    return scored


def sample_all(backend: Any, rows: list[dict[str, Any]], args: argparse.Namespace) -> list[list[ScoredReply]]:
    """The scored group of every row, in order: single replies for single-move and puzzle rows, whole games
    (``signal_games.py``) for full-game rows."""
    games = [i for i, row in enumerate(rows) if is_game_row(row)]
    singles = [i for i, row in enumerate(rows) if not is_game_row(row)]
    groups: dict[int, list[ScoredReply]] = {}
    if singles:
        sampled = sample_groups(backend, [rows[i] for i in singles], args.n, args.seed, not args.no_progress)
        groups.update(zip(singles, sampled))
    if games:
        budgets = GameBudgets(response_length=args.max_new_tokens, prompt_length=args.max_prompt_length)
        played = play_groups(backend, backend.tokenizer, [rows[i] for i in games], args.n, args.seed, budgets,
                             not args.no_progress)
        groups.update(zip(games, played))
    return [groups[i] for i in range(len(rows))]


def sample_groups(backend: Any, rows: list[dict[str, Any]], n: int, seed: int,
                  progress: bool) -> list[list[ScoredReply]]:
    """``n`` sampled and scored replies per row, each with its own seed."""
    from tqdm import tqdm

    groups: list[list[ScoredReply]] = []
    with tqdm(total=len(rows) * n, desc="signal: sampling", unit="reply", disable=not progress) as bar:
        for start in range(0, len(rows), PROMPTS_PER_CALL):
            chunk = rows[start:start + PROMPTS_PER_CALL]
            chats = [row["raw_prompt"] for row in chunk for _ in range(n)]
            seeds = [stable_seed(seed, "signal", start + i, k) for i in range(len(chunk)) for k in range(n)]
            replies = backend.generate(chats, seeds)
            counts = getattr(backend, "last_token_counts", None)
            if counts is not None and len(counts) != len(replies):
                counts = None
            for i, row in enumerate(chunk):
                part = slice(i * n, (i + 1) * n)
                groups.append(score_group(row, replies[part], None if counts is None else counts[part]))
            bar.update(len(chats))
    return groups


def summarise(rows: list[dict[str, Any]], groups: list[list[ScoredReply]], max_new_tokens: int,
              confidence: float) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """(per-case summaries, the pooled summary, example replies) of the scored groups."""
    cases: dict[str, GroupTally] = {}
    overall = GroupTally()
    for row, group in zip(rows, groups):
        for tally in (cases.setdefault(str(row["data_source"]), GroupTally()), overall):
            tally.add(group, max_new_tokens)
    picks = sorted({i * len(groups) // EXAMPLES for i in range(min(EXAMPLES, len(groups)))})
    examples = [{"case": str(rows[i]["data_source"]), "score": groups[i][0].score,
                 "format_ok": groups[i][0].format_ok, "valid": groups[i][0].valid, "tokens": groups[i][0].tokens,
                 "reply": printable(groups[i][0].reply, EXAMPLE_CHARS)} for i in picks]
    return ({case: t.summary(confidence) for case, t in cases.items()}, overall.summary(confidence), examples)


def run(argv: list[str] | None = None) -> int:
    """Parse, check, sample, score, report. Raises ConfigError on bad input (before any model is loaded)."""
    from .backends import make_backend
    from .cli import apply_overrides, load_config
    from .policies import SCRIPTED_PREFIX, parse_model_spec

    args = build_parser().parse_args(argv)
    check_numbers(args)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_p=args.top_p, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
                                  vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                                  vllm_max_model_len=args.vllm_max_model_len)
    settings.validate()
    head, sep, options = args.model.partition(",")
    if head.startswith(SCRIPTED_PREFIX):
        raise ConfigError(f"--model: {head!r} is a scripted policy; the signal check samples a model "
                          "(a Hugging Face folder or Hub id)")
    env_section = apply_overrides(load_config(args.config)[0], list(args.overrides))
    env_section = apply_hydra_overrides(env_section, list(args.hydra_overrides))
    rows = training_rows(env_section, args.prompts)  # env errors before any download or model load
    overlap = cold_start_overlap(env_section, args.cold_start_data)
    model = local_model(head) + sep + options + (f",adapter={args.adapter}" if args.adapter else "")
    spec = parse_model_spec(model, "--model")

    started = time.perf_counter()
    backend = make_backend(args.backend, spec.path, spec.adapter, settings, spec.trust_remote_code)
    try:
        loaded = time.perf_counter()
        with no_sample_log():
            groups = sample_all(backend, rows, args)
    finally:
        backend.close()
    cases, overall, examples = summarise(rows, groups, args.max_new_tokens, args.confidence)
    warning = no_signal_warning(overall, args.threshold, args.max_new_tokens)
    report = {
        "schema_version": SCHEMA_VERSION,
        "settings": {"model": head, "model_path": spec.path, "adapter": spec.adapter, "backend": backend.name,
                     "prompts": len(rows), "game_rows": sum(is_game_row(row) for row in rows),
                     "max_prompt_length": args.max_prompt_length,
                     "n": args.n, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                     "top_p": args.top_p, "seed": args.seed, "threshold": args.threshold,
                     "confidence": args.confidence},
        "env": env_section,
        "verdict": "no_signal" if warning else "signal",
        "warning": warning,
        "overall": overall,
        "cases": cases,
        "examples": examples,
        "cold_start_overlap": overlap,
        "groups": [{"case": str(row["data_source"]), "task_id": row["extra_info"]["task_id"],
                    "scores": [r.score for r in group], "tokens": [r.tokens for r in group]}
                   for row, group in zip(rows, groups)],
        "load_s": round(loaded - started, 2),
        "elapsed_s": round(time.perf_counter() - started, 2),
    }
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "signal.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        (out / "signal.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report, with_warning=False), end="")
    if args.out:
        print(f"wrote {Path(args.out) / 'signal.json'}, {Path(args.out) / 'signal.md'}")
    if overlap and overlap["note"]:
        print(overlap["note"], file=sys.stderr)
    if warning:
        print(warning, file=sys.stderr)
        return EXIT_NO_SIGNAL if args.strict else 0
    return 0


def cold_start_overlap(env_section: dict[str, Any], parquet: str | None) -> dict[str, Any] | None:
    """How many of the run's training prompts the cold start in ``parquet`` was trained on (None without one)."""
    if not parquet:
        return None
    contents, rows = cold_start_contents(Path(parquet))
    overlap = training_overlap(EnvMixture(env_section), contents)
    return {"data": parquet, "rows": rows, **overlap, "note": overlap_note(overlap)}


def main(argv: list[str] | None = None) -> int:
    """Console entry (``verl-ext signal``): 0 with a report, 2 on bad input, 3 without signal under --strict."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(argv)
    except ConfigError as err:
        print(f"verl-ext signal: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
