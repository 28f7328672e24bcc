"""ROLLOUT_LORA_MERGE=1 (verl's ``model.lora.merge``): the weights verl 0.9.1's FSDP engine sends to the rollout
engine are the LoRA-merged ones, under Hugging Face names, and the trained module is left un-merged.

Runs verl's own ``FSDPEngine._merged_lora_per_tensor_param`` on a PEFT model wrapped with torch's FSDP2 on one
gloo rank (the CPU stand-in for the GPU's NCCL rank). The expected weights come from PEFT's ``merge_and_unload``
on an unwrapped copy; the base weights are the negative control (a sync that sent them would fail here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gloo_rank import FSDP2_LORA_ENGINE, TRAINED_LORA_MODEL, TRAINED_LORA_QWEN2, free_port, run_on_one_rank

REPO = Path(__file__).resolve().parents[1]

SCRIPT = TRAINED_LORA_QWEN2 + textwrap.dedent("""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    base = {k.replace("base_model.model.", "").replace(".base_layer", ""): v.clone()
            for k, v in model.state_dict().items() if "lora_" not in k}
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        before = model(input_ids=ids).logits.float()
""") + FSDP2_LORA_ENGINE + textwrap.dedent("""
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


# LORA_MERGE_SYNC=out_of_place (verl_ext/patches/lora_merged_sync.py): the same names, order and bits as verl's in-place
# merge, without a write to the module (every parameter's version counter stays where it was)
OUT_OF_PLACE = TRAINED_LORA_QWEN2 + FSDP2_LORA_ENGINE + textwrap.dedent("""
    import verl.workers.engine.fsdp.transformer_impl as engine_module
    from verl_ext.patches import lora_merged_sync

    verls = list(lora_merged_sync._VERL_METHOD["method"](engine))
    versions = {name: param._version for name, param in model.named_parameters()}
    before = {name: param.detach().to_local().clone() for name, param in model.named_parameters()}
    ours = list(engine_module.FSDPEngine._merged_lora_per_tensor_param(engine))  # the patched method

    assert [name for name, _ in ours] == [name for name, _ in verls]
    for (name, mine), (_, theirs) in zip(ours, verls):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, name
        assert torch.equal(mine, theirs), (name, (mine.float() - theirs.float()).abs().max())
        assert torch.allclose(mine.float(), expected[name].float(), atol=2e-2, rtol=2e-2), name
    assert {name: param._version for name, param in model.named_parameters()} == versions  # never written
    assert all(torch.equal(param.detach().to_local(), before[name]) for name, param in model.named_parameters())
    print("OUT-OF-PLACE-OK", len(ours))

    # what it does not cover goes to verl's path (a stand-in here: verl's cannot merge a bias this test has not got)
    lora_merged_sync._VERL_METHOD["method"] = lambda self: iter([("verl's path", self)])
    model.base_model.model.model.layers[0].self_attn.q_proj.lora_bias["default"] = True
    for _ in range(2):
        assert list(engine_module.FSDPEngine._merged_lora_per_tensor_param(engine)) == [("verl's path", engine)]
    print("FALLBACK-OK")
""")


def test_out_of_place_merge_sends_verls_bits_without_writing_the_module():
    done = run_on_one_rank(OUT_OF_PLACE)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "OUT-OF-PLACE-OK" in done.stdout and "FALLBACK-OK" in done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("[verl-ext] lora merged sync")]
    assert said == ["[verl-ext] lora merged sync: verl's in-place merge for this sync: base_model.model.model.layers.0"
                    ".self_attn.q_proj.base_layer.weight: adapter 'default' has lora_bias"], said  # once


@pytest.mark.parametrize("env, expected", [
    ({}, ["verl_ext.patches.attention", "verl_ext.patches.lora_backup", "verl_ext.patches.lora_merged_sync"]),  # out of place (the backup for
    # the cases that fall back to verl's path)
    ({"LORA_MERGE_SYNC": "in_place"}, ["verl_ext.patches.attention", "verl_ext.patches.lora_backup"]),  # verl's, with the pinned backup
    ({"LORA_MERGE_SYNC": "out_of_place", "ROLLOUT_LORA_MERGE": "0"}, "verl_ext.patches.attention"),  # adapter served unmerged
    ({"LORA_MERGE_SYNC": "out_of_place", "ENABLE_LORA": "0"}, "verl_ext.patches.attention"),  # full fine-tune: no adapter
])
def test_scripts_import_it_in_the_workers_for_the_merged_sync_only(env, expected):
    from test_train_scripts import dry_run, overrides_of

    from verl_ext.launch.preflight import check_ppo, compose

    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
    libs = cfg.actor_rollout_ref.model.external_lib
    assert (list(libs) if not isinstance(libs, str) else libs) == expected
    assert check_ppo(cfg, check_imports=False) == []


def test_scripts_refuse_other_values():
    done = subprocess.run(["bash", str(REPO / "train/scripts/openspiel-ppo.sh"), "--dry-run"], capture_output=True,
                          text=True, env={**os.environ, "LORA_MERGE_SYNC": "fast"})
    assert done.returncode == 2 and "LORA_MERGE_SYNC must be one of: in_place out_of_place; got 'fast'" in done.stderr


# Two gloo ranks, each holding half of every weight (FSDP2's Shard(0)): the delta is PEFT's matmul on DTensors and
# every tensor is gathered in the same order on both ranks, so both ranks must send verl's bits.
TWO_RANKS = textwrap.dedent("""
    import os, sys, types, torch, torch.distributed as dist, torch.multiprocessing as mp

    def rank_main(rank, port):
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen2Config, Qwen2ForCausalLM
        import verl.workers.engine.fsdp.transformer_impl as engine_module
        from verl_ext.patches import lora_merged_sync

        engine_module.get_device_id = lambda: "cpu"
        engine_module.log_gpu_memory_usage = lambda *args, **kwargs: None
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        dist.init_process_group("gloo", rank=rank, world_size=2)
""") + textwrap.indent(TRAINED_LORA_MODEL + FSDP2_LORA_ENGINE, "    ") + textwrap.dedent("""
        shards = {param.to_local().shape[0] for param in model.parameters()}
        verls = list(lora_merged_sync._VERL_METHOD["method"](engine))
        ours = list(engine_module.FSDPEngine._merged_lora_per_tensor_param(engine))
        assert [n for n, _ in ours] == [n for n, _ in verls]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ours, verls))
        assert ours[0][1].shape[0] == 64 and 32 in shards  # whole tensors sent, halves held
        if rank == 0:
            print("TWO-RANKS-OK", len(ours), flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank_main, args=(sys.argv[-1],), nprocs=2)
""")


def test_out_of_place_merge_matches_verl_with_weights_sharded_over_two_ranks(tmp_path):
    script = tmp_path / "two_ranks.py"  # mp.spawn pickles rank_main by reference: it must live in a file
    script.write_text(TWO_RANKS)
    for attempt in range(2):
        done = subprocess.run([sys.executable, str(script), free_port()], capture_output=True, text=True,
                              timeout=600, cwd=REPO)
        # A rank killed by the C library (a clean-clone CI run on 2026-11-27: "double free or corruption
        # (fasttop)", SIGABRT, in a test that had passed every run before) is tried once more; an assertion or
        # any Python error in a rank exits with code 1 instead and fails at once.
        if done.returncode == 0 or "terminated with signal SIGABRT" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr[-4000:]
    assert "TWO-RANKS-OK" in done.stdout
