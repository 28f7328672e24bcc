"""Did RL move a game policy towards better moves? Two checkpoints' move distributions on the same prompts.

For each single-move training prompt, every legal move is scored by the env (its task score under the configured
``reward_mode``, e.g. the engine value) and each model's probability of the full reply ``<answer>MOVE</answer>``
is read by teacher forcing (renormalised over the legal moves). Reported per game: the expected move value and
the entropy of the move distribution for both models, the best move's value, and how the change in log-probability
correlates with the move's advantage under the first model. A policy that only sharpens (entropy down, value flat)
or drifts (correlation near 0) shows here within minutes on a CPU, without a GPU eval.

    python bench/learning/policy_shift.py --before outputs/from-scratch/sft_hf --after outputs/from-scratch/grpo_hf \\
        --set 'openspiel.game_types=[tic_tac_toe,connect_four]' --set openspiel.reward_mode=engine --prompts 64
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from group_signal import add_env_arguments, run_cli, training_refs  # noqa: E402  (bench/ is not a package)


def reply_logprobs(model: Any, tokenizer: Any, prompt: list[int], replies: list[str]) -> list[float]:
    """Log-probability of each reply (and the end-of-turn token) after ``prompt``, by teacher forcing."""
    import torch

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sequences = [prompt + tokenizer.encode(r, add_special_tokens=False) + [end] for r in replies]
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, seq in enumerate(sequences):
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
    return [float(sum(logp[i, t - 1, seq[t]] for t in range(len(prompt), len(seq)))) for i, seq in enumerate(sequences)]


def _normalised(logps: list[float]) -> list[float]:
    top = max(logps)
    weights = [math.exp(v - top) for v in logps]
    total = sum(weights)
    return [w / total for w in weights]


def move_positions(mixture: Any, tokenizer: Any, prompts: int) -> list[tuple[str, list[int], list[str], list[float]]]:
    """Training positions with legal moves, spread over the plan: (game, prompt ids, every legal move as a reply,
    each reply's task score under the env's reward mode)."""
    from verl_ext.evaluation.backends import prompt_ids

    positions = []
    for ref in training_refs(mixture, prompts):
        task = mixture.build(ref)
        if not task.legal_moves:
            continue
        adapter = mixture.adapters[ref.env]
        replies = [f"<answer>{move}</answer>" for move in task.legal_moves]
        values = [adapter.score(task.case, task.state, r).task_score for r in replies]
        positions.append((task.case, prompt_ids(tokenizer, list(task.messages)), replies, values))
    return positions


def expected_value(probs: list[float], values: list[float]) -> float:
    return sum(p * v for p, v in zip(probs, values))


def entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def _corr(xs: list[float], ys: list[float]) -> float | None:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def policy_shift(before: str, after: str, env_section: dict[str, Any], prompts: int) -> dict[str, Any]:
    """Per game: expected move value and entropy before/after, best value, and corr(change in log-prob, advantage)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.mixture import EnvMixture

    tokenizer = AutoTokenizer.from_pretrained(before)
    models = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (before, after)]
    per_case: dict[str, dict[str, list[float]]] = {}
    for case, prompt, replies, values in move_positions(EnvMixture(env_section), tokenizer, prompts):
        (lp0, lp1) = (reply_logprobs(m, tokenizer, prompt, replies) for m in models)
        p0, p1 = _normalised(lp0), _normalised(lp1)
        baseline = expected_value(p0, values)
        stats = per_case.setdefault(case, {k: [] for k in ("value_before", "value_after", "best", "entropy_before",
                                                             "entropy_after", "corr")})
        stats["value_before"].append(baseline)
        stats["value_after"].append(expected_value(p1, values))
        stats["best"].append(max(values))
        stats["entropy_before"].append(entropy(p0))
        stats["entropy_after"].append(entropy(p1))
        corr = _corr([b - a for a, b in zip(lp0, lp1)], [v - baseline for v in values])
        if corr is not None:
            stats["corr"].append(corr)
    return {"before": before, "after": after,
            "cases": {case: {"prompts": len(s["best"]), **{k: round(sum(v) / len(v), 4) if v else None
                                                         for k, v in s.items()}}
                      for case, s in per_case.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="Hugging Face model folder (e.g. the SFT model)")
    parser.add_argument("--after", required=True, help="Hugging Face model folder (e.g. the merged GRPO checkpoint)")
    add_env_arguments(parser, prompts=64)
    args = parser.parse_args(argv)
    return run_cli(args, lambda section: policy_shift(args.before, args.after, section, args.prompts))


if __name__ == "__main__":
    raise SystemExit(main())
