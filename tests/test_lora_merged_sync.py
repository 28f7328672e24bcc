"""ROLLOUT_LORA_MERGE=1 (verl's ``model.lora.merge``): the weights verl 0.9.1's FSDP engine sends to the rollout
engine are the LoRA-merged ones, under Hugging Face names, and the trained module is left un-merged.

Runs verl's own ``FSDPEngine._merged_lora_per_tensor_param`` on a PEFT model wrapped with torch's FSDP2 on one
gloo rank (the CPU stand-in for the GPU's NCCL rank). The expected weights come from PEFT's ``merge_and_unload``
on an unwrapped copy; the base weights are the negative control (a sync that sent them would fail here).
"""

from __future__ import annotations

import textwrap

from gloo_rank import TRAINED_LORA_QWEN2, run_on_one_rank

SCRIPT = TRAINED_LORA_QWEN2 + textwrap.dedent("""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    base = {k.replace("base_model.model.", "").replace(".base_layer", ""): v.clone()
            for k, v in model.state_dict().items() if "lora_" not in k}
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        before = model(input_ids=ids).logits.float()

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    engine = types.SimpleNamespace(module=model, _is_offload_param=False)
    sent = dict(FSDPEngine._merged_lora_per_tensor_param(engine))

    assert set(sent) == set(expected), sorted(set(sent) ^ set(expected))
    changed = 0
    for name, tensor in sent.items():
        assert tensor.dtype == torch.bfloat16, (name, tensor.dtype)
        assert torch.allclose(tensor.float(), expected[name].float(), atol=2e-2, rtol=2e-2), name
        if not torch.allclose(base[name].float(), expected[name].float(), atol=5e-2, rtol=5e-2):
            changed += 1
    lora_targets = sum(1 for n in expected if n.endswith(("proj.weight",)))
    assert changed == lora_targets and changed > 0, (changed, lora_targets)
    with torch.no_grad():  # the module is back to base + adapter (FSDP2 computes in bf16)
        after = model(input_ids=ids).logits.float()
    assert torch.allclose(before, after, atol=5e-2, rtol=5e-2), (before - after).abs().max()
    print("MERGED-SYNC-OK", len(sent), changed)
""")


def test_verl_sends_lora_merged_weights_under_hf_names():
    done = run_on_one_rank(SCRIPT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "MERGED-SYNC-OK" in done.stdout
