"""FSDP1 + LoRA weight sync in verl 0.9.1: with PEFT 0.21 (the GPU wheelhouse's) the adapter served unmerged arrives
empty, with PEFT 0.22 it arrives whole; merged it is right with both. Why the train scripts default
ROLLOUT_LORA_MERGE=1 and the pre-flight check refuses ROLLOUT_LORA_MERGE=0 with FSDP_STRATEGY=fsdp before PEFT 0.22.

On the H100 (2026-11-24, docs/runs/2026-11-24-h100-speed-merge/) an FSDP1 LoRA run sent vLLM an adapter with no
tensors: vLLM's ``add_lora`` raised StopIteration and verl waited for the sync forever. The cause, reproduced here
on one gloo CPU rank with verl's own wrap policy and ``collect_lora_params``: PEFT 0.21 finds adapter tensors by
module names, strips only a leading ``_fsdp_wrapped_module.``, and verl's FSDP1 policy nests units (decoder layers,
LoRA linears), so no name matches the cleaned state-dict keys. verl's merged path (``model.lora.merge``) reads the
merged ``state_dict`` instead and sends every weight. PEFT 0.22 (2026-12) finds the nested names: the first test
checks whichever PEFT is installed against the version the pre-flight check draws its line at.
"""

from __future__ import annotations

import textwrap

from packaging.version import Version

from verl_ext.launch.preflight import FSDP1_UNMERGED_ADAPTER_PEFT
from verl_ext.patches.registry import installed

from gloo_rank import TRAINED_LORA_QWEN2, run_on_one_rank

SETUP = TRAINED_LORA_QWEN2 + textwrap.dedent("""
    from peft import get_peft_model_state_dict
    adapter = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}  # what vLLM should get
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
    from verl.utils.fsdp_utils import collect_lora_params, get_fsdp_wrap_policy

    adapter_tensors = sum(1 for name, _ in model.named_parameters() if "lora_" in name)
    # verl's FSDP1 wrapping on one GPU (fsdp_workers / FSDPEngine): its LoRA-aware policy, NO_SHARD, bf16 compute
    fsdp = FSDP(model, auto_wrap_policy=get_fsdp_wrap_policy(model, config={}, is_lora=True),
                device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.NO_SHARD,
                mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                               buffer_dtype=torch.float32))
""")

UNMERGED = SETUP + textwrap.dedent("""
    sent = collect_lora_params(fsdp, layered_summon=False, base_sync_done=True)  # what ROLLOUT_LORA_MERGE=0 sends
    same = [n for n in set(sent) & set(adapter)
            if torch.allclose(sent[n].float(), adapter[n].float(), atol=2e-2, rtol=2e-2)]
    print("ADAPTER", adapter_tensors, "OWN", len(adapter), "SENT", len(sent), "SAME", len(same))
""")

MERGED = SETUP + textwrap.dedent("""
    engine = types.SimpleNamespace(module=fsdp, _is_offload_param=False)
    sent = dict(fsdp_engine.FSDPEngine._merged_lora_per_tensor_param(engine))  # ROLLOUT_LORA_MERGE=1
    assert set(sent) == set(expected), sorted(set(sent) ^ set(expected))
    wrong = [n for n, t in sent.items() if not torch.allclose(t.float(), expected[n].float(), atol=2e-2, rtol=2e-2)]
    assert not wrong, wrong
    print("MERGED-OK", len(sent))
""")


def run(script: str) -> str:
    done = run_on_one_rank(script)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_fsdp1_unmerged_adapter_is_empty_before_peft_0_22_and_whole_after():
    words = run(UNMERGED).split()
    count = {key: int(words[words.index(key) + 1]) for key in ("ADAPTER", "OWN", "SENT", "SAME")}
    assert count["ADAPTER"] == count["OWN"] == 28  # 7 linears x 2 layers x (A, B): the model has an adapter to send
    peft_version = installed("peft")
    if Version(peft_version) < Version(FSDP1_UNMERGED_ADAPTER_PEFT):
        assert count["SENT"] == 0, (f"PEFT {peft_version} now collects the FSDP1 adapter: lower "
                                    "FSDP1_UNMERGED_ADAPTER_PEFT in verl_ext/launch/preflight.py")
    else:  # every adapter tensor, by the adapter's own name, with its values: the pre-flight check lets it run
        assert count["SENT"] == count["SAME"] == 28, (f"PEFT {peft_version} does not collect the FSDP1 adapter "
                                                      "whole: raise FSDP1_UNMERGED_ADAPTER_PEFT")


def test_fsdp1_sends_every_merged_weight():
    assert "MERGED-OK 27" in run(MERGED)
