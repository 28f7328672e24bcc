"""A CPU-sized GRPO rehearsal with verl's own loss math: does a setting keep exploring and find better moves?

A GPU session affords one or two GRPO runs, so settings that fight the collapse seen on the GPU (the policy
turning deterministic within 20 steps, `docs/learning.md`) are tried here first, at a smaller batch. Each step
samples ``--n`` replies for ``--prompts`` training prompts (transformers, temperature 1), scores them with
``verl_ext.reward.compute_score``, takes verl's GRPO advantages (``compute_grpo_outcome_advantage``, tied groups at 0 as the train scripts' default
``GRPO_TIED_GROUPS=zero`` makes them) and updates
the model in PPO mini-batches with verl's policy loss (``get_policy_loss_fn``), entropy bonus and KL term
(``agg_loss``, ``kl_penalty``), using the clip ratios, loss aggregation, grad clip and AdamW settings of verl's
own composed actor config, so ``--override`` takes the same Hydra keys as the train scripts
(``actor_rollout_ref.actor.optim.lr=2e-5``, ``...actor.entropy_coeff=0.01``, ``...actor.kl_loss_coef=0.05`` with
``...actor.use_kl_loss=True``, ``...actor.clip_ratio_high=0.28``, ``...actor.ppo_mini_batch_size=4``);
``actor_rollout_ref.model.lora_rank=32`` (with ``lora_alpha``, ``target_modules``) trains a PEFT LoRA adapter
built as verl's FSDP engine builds it instead of the whole model.
Before the first step and every ``--eval-every`` steps it measures, on fixed training positions, each game's
expected move value, greedy move value and move entropy from the teacher-forced move distribution
(``bench/learning/policy_shift.py``), which is free of sampling noise.

Not reproduced: FSDP, vLLM sampling in bf16 (old log-probs here are the model's own fp32 ones, exactly on-policy,
as the train scripts' actor pass computes them by default since docs/runs/2026-11-25-h100-log-probs/NOTES.md, section 0i; ``BYPASS_OLD_LOG_PROB=1`` would
take vLLM's instead), dynamic batching, verl's dataloader order. A collapse that shows
here is GRPO's own, not one of those.

    python bench/learning/grpo_rehearsal.py --model outputs/from-scratch/sft_hf \\
        --set 'openspiel.game_types=[tic_tac_toe,connect_four]' --set openspiel.reward_mode=engine \\
        --prompts 16 --steps 20 --override actor_rollout_ref.actor.optim.lr=1e-4 --out rehearsal.json
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from group_signal import add_env_arguments, run_cli  # noqa: E402  (bench/ is not a package)
from policy_shift import _normalised, entropy, expected_value, move_positions, reply_logprobs  # noqa: E402


def actor_config(overrides: list[str], prompts: int, micro_batch: int) -> tuple[Any, bool, dict[str, Any] | None]:
    """verl's actor config (a dataclass) composed from its own YAML with the train scripts' mini-batch default
    (a quarter of the step's prompts) and ``overrides``; whether GRPO divides advantages by the group's std;
    the LoRA settings of ``actor_rollout_ref.model`` (None when ``lora_rank`` is 0: full fine-tune)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.py_functional import convert_to_regular_types

    from verl_ext.launch.preflight import compose

    base = [f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, prompts // 4)}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}"]
    cfg = compose("ppo_trainer", base + list(overrides))
    model = cfg.actor_rollout_ref.model
    lora = None
    if int(model.lora_rank) > 0:
        lora = {"r": int(model.lora_rank), "lora_alpha": int(model.lora_alpha),
                "target_modules": convert_to_regular_types(model.target_modules),
                "exclude_modules": convert_to_regular_types(model.exclude_modules)}
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor), bool(cfg.algorithm.norm_adv_by_std_in_grpo), lora


def with_lora(model: Any, lora: dict[str, Any]) -> Any:
    """``model`` wrapped in a fresh PEFT LoRA adapter the way verl's FSDP engine builds it (B = 0, so the policy
    starts exactly at ``model``); only the adapter trains."""
    from peft import LoraConfig, TaskType, get_peft_model

    return get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, bias="none", **lora))


def response_logits(model: Any, sequences: list[list[int]], prompt_lens: list[int], width: int, pad_id: int,
                    grad: bool) -> Any:
    """Logits predicting each response token: (batch, width, vocab), right-padded sequences."""
    import torch

    longest = max(map(len, sequences))
    ids = torch.full((len(sequences), longest), pad_id)
    mask = torch.zeros_like(ids)
    for i, seq in enumerate(sequences):
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    rows = []
    for i, start in enumerate(prompt_lens):
        piece = logits[i, start - 1:start - 1 + width]
        if piece.shape[0] < width:  # pad rows whose prompt+response ends before the widest response
            piece = torch.cat([piece, piece.new_zeros(width - piece.shape[0], piece.shape[1])])
        rows.append(piece)
    return torch.stack(rows)


def token_logprobs(logits: Any, responses: Any) -> Any:
    """Log-probability of each response token (zeros where responses is padding, masked later)."""
    import torch

    return torch.log_softmax(logits, dim=-1).gather(-1, responses.clamp(min=0).unsqueeze(-1)).squeeze(-1)


class MoveProbe:
    """Expected move value, greedy move value and move entropy per game on fixed training positions."""

    def __init__(self, mixture: Any, tokenizer: Any, prompts: int) -> None:
        self.tokenizer = tokenizer
        self.items = move_positions(mixture, tokenizer, prompts)

    def measure(self, model: Any) -> dict[str, dict[str, float]]:
        per_case: dict[str, dict[str, list[float]]] = {}
        for case, prompt, replies, values in self.items:
            probs = _normalised(reply_logprobs(model, self.tokenizer, prompt, replies))
            stats = per_case.setdefault(case, {"value": [], "greedy_value": [], "entropy": []})
            stats["value"].append(expected_value(probs, values))
            stats["greedy_value"].append(values[max(range(len(probs)), key=probs.__getitem__)])
            stats["entropy"].append(entropy(probs))
        return {case: {k: round(statistics.mean(v), 4) for k, v in s.items()} for case, s in per_case.items()}


def rehearse(model_path: str, env_section: dict[str, Any], prompts: int, steps: int, n: int,
             overrides: list[str], eval_prompts: int, eval_every: int, max_new_tokens: int, micro_batch: int,
             seed: int, log: Any = print) -> dict[str, Any]:
    """Run ``steps`` GRPO steps on CPU; return per-step metrics and the move probe before/during/after."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.trainer.ppo.core_algos import (agg_loss, compute_grpo_outcome_advantage, get_policy_loss_fn,
                                             kl_penalty)
    from verl.utils.torch_functional import entropy_from_logits

    from verl_ext.evaluation.backends import prompt_ids
    from verl_ext.mixture import EnvMixture
    from verl_ext.patches.tied_groups import zero_tied_groups
    from verl_ext.reward import compute_score

    # as the train scripts run it (GRPO_TIED_GROUPS=zero): a tied group's advantage is 0, not float32 rounding noise
    compute_grpo_outcome_advantage = zero_tied_groups(compute_grpo_outcome_advantage)

    torch.manual_seed(seed)
    actor, norm_by_std, lora = actor_config(overrides, prompts, micro_batch)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    reference = copy.deepcopy(model).eval() if actor.use_kl_loss else None
    if lora is not None:
        model = with_lora(model, lora)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=actor.optim.lr, betas=tuple(actor.optim.betas),
                                  weight_decay=actor.optim.weight_decay)
    policy_loss = get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.pad_token_id

    mixture = EnvMixture(env_section)
    plan = mixture.plan("train")
    random.Random(seed).shuffle(plan)
    probe = MoveProbe(mixture, tokenizer, eval_prompts)
    model.eval()
    probes = [{"step": 0, **probe.measure(model)}]
    log(f"step 0: {probes[-1]}")
    history = []
    for step in range(1, steps + 1):
        started = time.monotonic()
        refs = [plan[k % len(plan)] for k in range((step - 1) * prompts, step * prompts)]  # epochs wrap around
        model.eval()
        samples = []  # (group, prompt ids, response ids, score)
        for group, ref in enumerate(refs):
            row = mixture.row(ref, "train", (step - 1) * prompts + group)
            prompt = prompt_ids(tokenizer, row["prompt"])
            ids = torch.tensor([prompt] * n)
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                     do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                     eos_token_id=end_id, pad_token_id=pad_id)
            for tokens in out[:, ids.shape[1]:].tolist():
                response = tokens[:tokens.index(end_id) + 1] if end_id in tokens else tokens
                text = tokenizer.decode(response, skip_special_tokens=True)
                score = float(compute_score(row["data_source"], text, row["reward_model"]["ground_truth"],
                                            row["extra_info"])["score"])
                samples.append((group, prompt, response, score))
        width = max(len(s[2]) for s in samples)
        responses = torch.full((len(samples), width), -1)
        mask = torch.zeros(len(samples), width)
        rewards = torch.zeros(len(samples), width)
        for i, (_, _, response, score) in enumerate(samples):
            responses[i, :len(response)] = torch.tensor(response)
            mask[i, :len(response)] = 1
            rewards[i, len(response) - 1] = score
        advantages, _ = compute_grpo_outcome_advantage(rewards, mask, np.array([s[0] for s in samples]),
                                                       norm_adv_by_std_in_grpo=norm_by_std)
        sequences = [s[1] + s[2] for s in samples]
        prompt_lens = [len(s[1]) for s in samples]

        def logprobs_of(net: Any, rows: list[int], grad: bool) -> tuple[Any, Any]:
            logits = response_logits(net, [sequences[r] for r in rows], [prompt_lens[r] for r in rows], width,
                                     pad_id, grad)
            return token_logprobs(logits, responses[rows]), logits

        def all_logprobs(net: Any) -> Any:
            with torch.no_grad():
                return torch.cat([logprobs_of(net, list(range(k, min(k + micro_batch, len(samples)))), False)[0]
                                  for k in range(0, len(samples), micro_batch)])

        old = all_logprobs(model)
        ref_lp = all_logprobs(reference) if reference is not None else None
        model.train()
        order = list(range(len(samples)))
        random.Random(seed * 1000 + step).shuffle(order)
        mini = actor.ppo_mini_batch_size * n
        kl_values, clip_values, grad_norms = [], [], []
        for _ in range(actor.ppo_epochs):
            for start in range(0, len(order), mini):
                batch = order[start:start + mini]
                actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask[batch].sum()),
                                               global_batch_size=len(batch), loss_scale_factor=None)
                for k in range(0, len(batch), micro_batch):
                    rows = batch[k:k + micro_batch]
                    log_prob, logits = logprobs_of(model, rows, True)
                    loss, metrics = policy_loss(old_log_prob=old[rows], log_prob=log_prob,
                                                advantages=advantages[rows], response_mask=mask[rows].bool(),
                                                loss_agg_mode=actor.loss_agg_mode, config=actor)
                    if actor.entropy_coeff:
                        entropy = entropy_from_logits(logits)
                        loss = loss - actor.entropy_coeff * agg_loss(entropy, mask[rows], actor.loss_agg_mode,
                                                                     **actor.global_batch_info)
                    if ref_lp is not None:
                        kld = kl_penalty(log_prob, ref_lp[rows], actor.kl_loss_type)
                        loss = loss + actor.kl_loss_coef * agg_loss(kld, mask[rows], actor.loss_agg_mode,
                                                                    **actor.global_batch_info)
                    loss.backward()
                    kl_values.append(metrics["actor/ppo_kl"])
                    clip_values.append(metrics["actor/pg_clipfrac"])
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, actor.grad_clip)))
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        scores = [s[3] for s in samples]
        groups = [[s[3] for s in samples if s[0] == g] for g in range(len(refs))]
        history.append({"step": step, "reward": round(statistics.mean(scores), 4),
                        "zero_variance_groups": sum(len(set(g)) == 1 for g in groups), "groups": len(groups),
                        "ppo_kl": round(statistics.mean(kl_values), 5),
                        "clipfrac": round(statistics.mean(clip_values), 4),
                        "grad_norm": round(statistics.mean(grad_norms), 4),
                        "seconds": round(time.monotonic() - started, 1)})
        log(f"step {step}: {history[-1]}")
        if step % eval_every == 0 or step == steps:
            model.eval()
            probes.append({"step": step, **probe.measure(model)})
            log(f"probe {step}: {probes[-1]}")
    return {"model": model_path, "overrides": list(overrides), "prompts_per_step": prompts, "n": n,
            "lr": actor.optim.lr, "lora": lora, "trainable_parameters": sum(p.numel() for p in trainable),
            "entropy_coeff": actor.entropy_coeff,
            "kl_loss_coef": actor.kl_loss_coef if actor.use_kl_loss else 0.0,
            "clip_ratio": [actor.clip_ratio_low, actor.clip_ratio_high],
            "mini_batch_prompts": actor.ppo_mini_batch_size, "steps": history, "probes": probes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model folder (the GRPO start model)")
    add_env_arguments(parser, prompts=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (rollout.n)")
    parser.add_argument("--override", dest="actor_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override of verl's ppo_trainer config (actor_rollout_ref.actor.*, "
                             "actor_rollout_ref.model.lora_*), repeatable")
    parser.add_argument("--eval-prompts", type=int, default=64, help="fixed positions of the move probe")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=32, help="sequences per forward/backward pass")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("steps", "n", "eval_prompts", "eval_every", "micro_batch"):
        if getattr(args, name) <= 0:
            print(f"--{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    from verl_ext.launch.preflight import PreflightError

    try:  # rehearse() composes the actor config before it loads the model
        return run_cli(args, lambda section: rehearse(
            args.model, section, args.prompts, args.steps, args.n, args.actor_overrides, args.eval_prompts,
            args.eval_every, args.max_new_tokens, args.micro_batch, args.seed,
            log=lambda line: print(line, file=sys.stderr, flush=True)))
    except PreflightError as err:
        print(f"error: --override: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
