"""verl_ext.patches.response_logits: verl's fused LM head run only at the positions that predict response tokens.

The head is verl 0.9.1's own ``FusedLinearForPPO`` (torch backend) on random packed batches, compared with the same
head over every position; the engine test runs verl's ``forward_backward_batch`` (``forward_step``, the fused
forward of a tiny Qwen2, ``ppo_loss``) on one gloo CPU rank with verl's head and then with the patch loaded as a
run loads it, for the update and for the forward-only log-prob pass: a fully fine-tuned fp32 model, and verl's
actor layout with LoRA under FSDP2 (bf16 compute).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import types
from pathlib import Path

import pytest
import torch
from gloo_rank import CPU_ACTOR_ENGINE, run_on_one_rank
from test_train_scripts import runtime_env_modules
from verl.utils import tensordict_utils as tu
from verl.utils.experimental.torch_functional import FusedLinearForPPO

from verl_ext.patches import response_logits
from verl_ext.patches.response_cut import response_index

TESTS = Path(__file__).parent


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def packed(samples: int = 12, hidden: int = 16, vocab: int = 50, seed: int = 3):
    """Hidden states of a packed batch (1, T, hidden), its rolled labels, a vocabulary matrix, the layout."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, 9, (samples,), generator=generator)
    response_lens = torch.randint(0, 7, (samples,), generator=generator)
    response_lens[:2] = torch.tensor([0, 1])  # an empty (aborted) response, a one-token one
    sequence_offsets = torch.cat([torch.zeros(1, dtype=torch.long), (prompt_lens + response_lens).cumsum(0)])
    response_offsets = torch.cat([torch.zeros(1, dtype=torch.long), response_lens.cumsum(0)])
    tokens = int(sequence_offsets[-1])
    layout = response_logits.ResponseLayout(sequence_offsets, response_offsets, tokens, int(response_offsets[-1]))
    hidden_states = torch.randn(1, tokens, hidden, generator=generator, requires_grad=True)
    weights = torch.randn(vocab, hidden, generator=generator, requires_grad=True)
    labels = torch.randint(0, vocab, (1, tokens), generator=generator)
    return hidden_states, weights, labels, layout


def response_mask(layout) -> torch.Tensor:
    mask = torch.zeros(layout.sequence_tokens, dtype=torch.bool)
    mask[response_index(layout.sequence_offsets, layout.response_offsets, layout.response_tokens)] = True
    return mask


def test_head_at_responses_has_verls_response_values_and_gradients():
    hidden_states, weights, labels, layout = packed()
    head = FusedLinearForPPO(chunk_size=8)  # several of verl's chunks on either path
    verl_log_probs, verl_entropy = head.forward(hidden_states, weights, labels)
    our_log_probs, our_entropy = response_logits.head_at_responses(
        layout, head.forward, hidden_states, weights, labels)
    mask = response_mask(layout)
    assert our_log_probs.shape == verl_log_probs.shape == labels.shape
    torch.testing.assert_close(our_log_probs[0, mask], verl_log_probs[0, mask])
    torch.testing.assert_close(our_entropy[0, mask], verl_entropy[0, mask])
    assert not our_log_probs[0, ~mask].any() and not our_entropy[0, ~mask].any()
    # a loss over the responses (log-prob and entropy terms), as verl's PPO loss reads them
    coefficients = torch.randn(labels.shape, generator=torch.Generator().manual_seed(5)) * mask

    def grads(log_probs, entropy):
        return torch.autograd.grad(((log_probs + 0.1 * entropy) * coefficients).sum(), (hidden_states, weights))

    verl_hidden_grad, verl_weight_grad = grads(verl_log_probs, verl_entropy)
    our_hidden_grad, our_weight_grad = grads(our_log_probs, our_entropy)
    torch.testing.assert_close(our_hidden_grad, verl_hidden_grad)
    torch.testing.assert_close(our_weight_grad, verl_weight_grad)  # a fully fine-tuned (trainable) LM head
    assert not our_hidden_grad[0, ~mask].any()


def test_head_runs_on_the_response_rows_only():
    hidden_states, weights, labels, layout = packed()
    rows = []

    def head(h, w, ids):
        rows.append(h.shape[0])
        return FusedLinearForPPO().forward(h, w, ids)

    response_logits.head_at_responses(layout, head, hidden_states, weights, labels)
    assert rows == [layout.response_tokens] and layout.response_tokens < layout.sequence_tokens


def fused_micro_batch(prompt_lens=(4, 3), **flags):
    seqs = [torch.arange(7), torch.arange(5)]
    non_tensor = {"use_remove_padding": True, "use_fused_kernels": True, **flags}
    return tu.get_tensordict({"input_ids": nested(seqs), "prompts": nested([s[:p] for s, p in zip(seqs, prompt_lens)]),
                              "responses": nested([seqs[0][4:], seqs[1][3:]])}, non_tensor_dict=non_tensor)


def test_layout_only_where_verls_head_sees_the_whole_packed_sequence():
    engine = types.SimpleNamespace(use_ulysses_sp=False)
    layout = response_logits.layout_of(engine, fused_micro_batch())
    assert (layout.sequence_tokens, layout.response_tokens) == (12, 5)
    assert response_index(layout.sequence_offsets, layout.response_offsets, 5).tolist() == [3, 4, 5, 9, 10]
    assert response_logits.layout_of(engine, fused_micro_batch(use_fused_kernels=False)) is None
    assert response_logits.layout_of(engine, fused_micro_batch(use_remove_padding=False)) is None
    assert response_logits.layout_of(engine, fused_micro_batch(distillation_use_topk=True)) is None
    assert response_logits.layout_of(types.SimpleNamespace(use_ulysses_sp=True), fused_micro_batch()) is None
    sft = tu.get_tensordict({"input_ids": nested([torch.arange(4)]), "loss_mask": nested([torch.ones(4)])},
                            non_tensor_dict={"use_remove_padding": True, "use_fused_kernels": True})
    assert response_logits.layout_of(engine, sft) is None  # no prompts/responses: verl's head everywhere
    assert response_logits.layout_of(engine, fused_micro_batch(prompt_lens=(3, 3))) is None  # 3 + 3 != 7


FUSED_ENGINE = CPU_ACTOR_ENGINE.replace("use_fused_kernels=False", 'use_fused_kernels=True, fused_kernels_backend="torch"')
# verl's actor layout with LoRA (verl's _build_module, then _build_lora_module, then FSDP2 with bf16 compute and fp32
# reduce): PEFT around the patched Qwen2, a unit per decoder layer, then the root; lora_B trained away from zero
LORA_FSDP2 = textwrap.dedent("""
    from peft import LoraConfig, get_peft_model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    engine.module = model
""")
ENGINE_STEP = FUSED_ENGINE + textwrap.dedent("""
    from test_train_scripts import dry_run, overrides_of
    import verl.utils.experimental.torch_functional as torch_functional

    smoke = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", OLD_LOG_PROB_PASS="always"))
    actor_config = omega_conf_to_dataclass(compose("ppo_trainer", smoke).actor_rollout_ref.actor)
    rows = []
    verl_fwd = torch_functional._fused_linear_for_ppo_fwd
    def counting_fwd(hidden_states, *args, **kwargs):
        rows.append(hidden_states.shape[0])
        return verl_fwd(hidden_states, *args, **kwargs)
    torch_functional._fused_linear_for_ppo_fwd = counting_fwd

    g = torch.Generator().manual_seed(11)
    lengths = [(9, 5), (12, 2), (8, 7), (10, 4), (7, 6)]
    seqs = [torch.randint(0, 64, (p + r,), generator=g) for p, r in lengths]
    def batch(**flags):
        return ppo_micro_batch(seqs, lengths, [1.0, -0.5, 0.7, -1.2, 0.2], -4.0, max_token_len_per_gpu=40,
                               use_fused_kernels=True, **flags)

    def step():
        model.zero_grad()
        rows.clear()
        out = engine.forward_backward_batch(batch(calculate_entropy=False),
                                            loss_function=functools.partial(losses.ppo_loss, config=actor_config))
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return grads, out["metrics"]["actor/pg_loss"].aggregate(), sum(rows)

    def log_probs():
        rows.clear()
        with torch.no_grad():
            out = engine.forward_backward_batch(batch(calculate_entropy=True), loss_function=None, forward_only=True)
        outputs = out["model_output"]
        return [torch.cat([t[p - 1:p + r - 1] for t, (p, r) in zip(outputs[key].unbind(), lengths)])
                for key in ("log_probs", "entropy")], sum(rows)

    verl_grads, verl_loss, verl_rows = step()
    (verl_lp, verl_ent), verl_pass_rows = log_probs()
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.response_logits"
    from verl.utils.import_utils import import_external_libs
    import_external_libs(os.environ["VERL_USE_EXTERNAL_MODULES"].split(","))  # what verl's __init__ does
    print("PATCHED", getattr(fsdp_engine.FSDPEngineWithLMHead, "_verl_ext_response_logits", False),
          getattr(torch_functional.FusedLinearForPPO, "_verl_ext_response_logits", False))
    our_grads, our_loss, our_rows = step()
    (our_lp, our_ent), our_pass_rows = log_probs()
    print("ROWS", verl_rows, our_rows, verl_pass_rows, our_pass_rows, sum(p + r for p, r in lengths),
          sum(r for _, r in lengths))
    print("GRAD_DIFF", (verl_grads - our_grads).abs().max().item(), "SCALE", verl_grads.abs().max().item())
    print("LOSS", verl_loss, our_loss)
    print("LOGPROB_DIFF", (verl_lp - our_lp).abs().max().item(), (verl_ent - our_ent).abs().max().item())
""")


@pytest.mark.parametrize("layout, tolerance", [
    ("plain", 1e-5),  # the fully fine-tuned model in fp32: the LM head trains too
    # the actor's default: LoRA under FSDP2, bf16 compute. Equal bit for bit on this CPU; a GPU's matmul kernels
    # may round a product over fewer rows differently, which bf16 makes visible
    ("lora_fsdp2", 1e-2),
])  # fmt: skip
def test_verls_update_and_log_prob_pass_with_the_head_at_responses(layout, tolerance):
    script = ENGINE_STEP if layout == "plain" else ENGINE_STEP.replace(
        FUSED_ENGINE, FUSED_ENGINE + LORA_FSDP2)
    done = run_on_one_rank(script, str(TESTS))
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["PATCHED"] == "True True"
    verl_rows, our_rows, verl_pass_rows, our_pass_rows, all_tokens, response_tokens = map(int, lines["ROWS"].split())
    assert verl_rows == verl_pass_rows == all_tokens and our_rows == our_pass_rows == response_tokens
    grad_diff, _, scale = lines["GRAD_DIFF"].split()
    grad_diff, scale = float(grad_diff), float(scale)
    assert scale > 0 and grad_diff <= tolerance * scale
    verl_loss, our_loss = map(float, lines["LOSS"].split())
    assert our_loss == pytest.approx(verl_loss, rel=tolerance)
    assert all(float(diff) <= tolerance for diff in lines["LOGPROB_DIFF"].split())


def test_script_loads_the_patch_by_default_and_not_with_all():
    assert "verl_ext.patches.response_logits" in runtime_env_modules()
    assert "verl_ext.patches.response_logits" in runtime_env_modules(LM_HEAD_POSITIONS="response")
    assert "verl_ext.patches.response_logits" not in (runtime_env_modules(LM_HEAD_POSITIONS="all") or "")
    bad = subprocess.run(["bash", str(TESTS.parent / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, "LM_HEAD_POSITIONS": "prompts"})
    assert bad.returncode == 2 and "LM_HEAD_POSITIONS must be one of: all response; got 'prompts'" in bad.stderr
