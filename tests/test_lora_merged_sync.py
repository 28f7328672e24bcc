"""ROLLOUT_LORA_MERGE=1 (verl's ``model.lora.merge``): the weights verl 0.9.1's FSDP engine sends to the rollout
engine are the LoRA-merged ones, under Hugging Face names, and the trained module is left un-merged.

Runs verl's own ``FSDPEngine._merged_lora_per_tensor_param`` on a PEFT model wrapped with torch's FSDP2 on one
gloo rank (the CPU stand-in for the GPU's NCCL rank). The expected weights come from PEFT's ``merge_and_unload``
on an unwrapped copy; the base weights are the negative control (a sync that sent them would fail here).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import copy, os, sys, types, torch, torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    fsdp_engine.get_device_id = lambda: "cpu"  # the GPU's device index, on the CPU machine
    fsdp_engine.log_gpu_memory_usage = lambda *args, **kwargs: None  # reads CUDA memory

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():  # a trained adapter: lora_B starts at zero, which would make the merge a no-op
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    expected = {k: v.clone() for k, v in copy.deepcopy(model).merge_and_unload().state_dict().items()}
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


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_verl_sends_lora_merged_weights_under_hf_names():
    done = subprocess.run([sys.executable, "-c", SCRIPT, free_port()], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "MERGED-SYNC-OK" in done.stdout
