"""Why LoRA + KL runs compute old log-probs (train/scripts/lib/common.sh), checked on the CPU with torch's FSDP2.

FSDP2 decides its gradient dtypes at the first forward, from the parameters that require grad at that moment.
PEFT's ``disable_adapter()`` sets ``requires_grad=False`` on the adapter while it is active. verl 0.9.1 computes
the reference log-probs of a LoRA actor inside ``disable_adapter()``; when that is the first forward (bypass mode
skips the old-log-prob pass), every later bf16 gradient meets an fp32 parameter and the first backward fails.
Seen on the lent H100 (docs/learning.md, fifth run) and reproduced here on one gloo rank.
"""

from __future__ import annotations

import subprocess
import textwrap

from gloo_rank import run_on_one_rank

SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, lora_alpha=4, target_modules="all-linear"))
    # verl's FSDP2 engine: fp32 master weights, bf16 compute, fp32 gradient reduction
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    ids = torch.randint(0, 64, (2, 8))
    if sys.argv[1] == "reference-first":
        with torch.no_grad(), model.disable_adapter():
            model(input_ids=ids)
    else:
        with torch.no_grad():
            model(input_ids=ids)
    model(input_ids=ids).logits.float().mean().backward()
    grads = {p.grad.dtype for n, p in model.named_parameters() if "lora_" in n}
    print("GRAD_DTYPES", sorted(str(d) for d in grads))
    dist.destroy_process_group()
""")


def run(first_forward: str) -> subprocess.CompletedProcess:
    return run_on_one_rank(SCRIPT, first_forward)


def test_adapter_enabled_first_forward_trains_in_fp32():
    result = run("adapter-first")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "GRAD_DTYPES ['torch.float32']" in result.stdout


def test_adapter_disabled_first_forward_breaks_the_first_backward():
    """If this starts passing, torch or PEFT fixed the interaction and the bypass rule can go."""
    result = run("reference-first")
    assert result.returncode != 0
    assert "attempting to assign a gradient with dtype" in result.stderr
