"""How much signal a model's GRPO groups carry: n samples per training prompt, scored by our reward.

GRPO learns only from groups whose samples score differently; a group of identical rewards has zero
advantage. Before spending GPU time on GRPO, sample the start model on the training prompts and look at the
share of zero-variance groups, the mean reward, the best of n (what sharpening the policy could reach) and
the mean within-group standard deviation. Transformers generation (CPU or one GPU), the same prompts and
reward as training (``EnvMixture`` rows, ``verl_ext.reward.compute_score``).

    python bench/learning/group_signal.py --model outputs/from-scratch/sft_hf \\
        --set 'openspiel.game_types=[tic_tac_toe,connect_four]' --set openspiel.reward_mode=engine \\
        --prompts 128 --n 8 --temperature 1.0 --out group_signal.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_env_arguments(parser: argparse.ArgumentParser, prompts: int) -> None:
    """``--config``/``--set`` (the env section, as for ``verl-ext export``), ``--prompts`` and ``--out``."""
    parser.add_argument("--config", help="YAML with the env section (as for verl-ext export)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--out", type=Path, help="write the result as JSON here too")


def training_refs(mixture: Any, prompts: int) -> list[Any]:
    """``prompts`` training tasks spread evenly over the mixture's plan."""
    plan = mixture.plan("train")
    return plan[:: max(1, len(plan) // prompts)][:prompts]


def run_cli(args: argparse.Namespace, compute: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """Load the env section of ``args`` (exit 2 naming a bad ``--config``/``--set``), run ``compute`` on it,
    print the result as JSON and write it to ``--out``."""
    from verl_ext.envs.config import ConfigError
    from verl_ext.export import load_env_section

    if args.prompts <= 0:
        print("--prompts must be > 0", file=sys.stderr)
        return 2
    try:
        section = load_env_section(args.config, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = json.dumps(compute(section), indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def group_signal(model_path: str, env_section: dict[str, Any], prompts: int, n: int, temperature: float,
                 max_new_tokens: int, seed: int) -> dict[str, Any]:
    """Sample ``n`` replies for each of ``prompts`` training prompts (spread over the plan) and summarise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.evaluation.backends import prompt_ids
    from verl_ext.mixture import EnvMixture
    from verl_ext.reward import compute_score

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    mixture = EnvMixture(env_section)
    refs = training_refs(mixture, prompts)
    stds, means, bests, zero_variance, identical = [], [], [], 0, 0
    for index, ref in enumerate(refs):
        row = mixture.row(ref, "train", index)
        ids = torch.tensor([prompt_ids(tokenizer, row["prompt"])] * n)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=True, temperature=temperature, top_p=1.0,
                                 pad_token_id=tokenizer.pad_token_id)
        replies = [tokenizer.decode(o[ids.shape[1]:], skip_special_tokens=True) for o in out]
        scores = [float(compute_score(row["data_source"], r, row["reward_model"]["ground_truth"],
                                      row["extra_info"])["score"]) for r in replies]
        identical += len(set(replies)) == 1
        zero_variance += len(set(scores)) == 1
        stds.append(statistics.pstdev(scores))
        means.append(statistics.mean(scores))
        bests.append(max(scores))
    return {"model": model_path, "prompts": len(refs), "n": n, "temperature": temperature,
            "zero_variance_groups": zero_variance, "identical_reply_groups": identical,
            "mean_reward": round(statistics.mean(means), 4), "best_of_n": round(statistics.mean(bests), 4),
            "mean_group_std": round(statistics.mean(stds), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    add_env_arguments(parser, prompts=128)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (ROLLOUT_N)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.prompts <= 0 or args.n < 2:
        print("--prompts must be > 0 and --n >= 2 (a group needs two samples)", file=sys.stderr)
        return 2
    return run_cli(args, lambda section: group_signal(args.model, section, args.prompts, args.n, args.temperature,
                                                      args.max_new_tokens, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
