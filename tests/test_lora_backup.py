"""verl_ext.patches.lora_backup (LORA_MERGE_BACKUP=pinned): verl's merged LoRA sync with reused host buffers sends exactly
what it sends with verl's own backup, leaves the trained module exactly as it was, and reuses its buffers.

Runs verl 0.9.1's ``FSDPEngine._merged_lora_per_tensor_param`` on a PEFT model wrapped with torch's FSDP2 on one
gloo rank, once with verl's ``backup_base_model_weights``/``restore_base_model_weights`` and once with ours.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from gloo_rank import FSDP2_LORA_ENGINE, TRAINED_LORA_QWEN2, run_on_one_rank

SCRIPT = TRAINED_LORA_QWEN2 + FSDP2_LORA_ENGINE + textwrap.dedent("""
    from verl.utils import fsdp_utils
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    def snapshot():
        return {n: p.data.to_local().clone() for n, p in model.named_parameters()}

    def sync():
        return dict(FSDPEngine._merged_lora_per_tensor_param(engine))

    verls_backup = fsdp_utils.backup_base_model_weights
    before = snapshot()
    sent_by_verl = sync()
    assert all(torch.equal(before[n], t) for n, t in snapshot().items())

    import verl_ext.patches.lora_backup as lora_backup
    assert fsdp_utils.backup_base_model_weights is lora_backup.backup_base_model_weights
    sent = sync()
    assert set(sent) == set(sent_by_verl) and len(sent) > 0
    for name, tensor in sent.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, sent_by_verl[name]), name
    after = snapshot()
    assert all(torch.equal(before[n], t) for n, t in after.items()), "the module is un-merged exactly"
    for name, tensor in sent.items():  # and it is the merge (PEFT's merge_and_unload), not the base weights
        assert torch.allclose(tensor.float(), expected[name].float(), atol=2e-2, rtol=2e-2), name
    buffers = lora_backup._BUFFERS[model]
    pointers = {n: b.data_ptr() for n, b in buffers.items()}
    assert pointers and not any("lora" in n.lower() for n in buffers)

    # a training step changes the adapter; the next sync must send the new merge, from the same buffers
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.data.to_local().mul_(-0.5)
    stepped = snapshot()
    sent_again = sync()
    assert {n: b.data_ptr() for n, b in lora_backup._BUFFERS[model].items()} == pointers, "buffers are reused"
    assert all(torch.equal(stepped[n], t) for n, t in snapshot().items())
    lora_backup.uninstall()
    assert fsdp_utils.backup_base_model_weights is verls_backup
    reference = sync()
    differs = 0
    for name, tensor in sent_again.items():
        assert torch.equal(tensor, reference[name]), name
        differs += not torch.equal(tensor, sent[name])
    assert differs > 0, "the adapter change reached the merged weights"
    print("PINNED-BACKUP-OK", len(sent), differs)
""")


def test_merged_sync_with_reused_buffers_matches_verls_own_backup():
    done = run_on_one_rank(SCRIPT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "PINNED-BACKUP-OK" in done.stdout


def test_backup_and_restore_round_trip_a_plain_module_in_place():
    """Outside FSDP (plain tensors, as FSDP1's original-parameter views are): an exact copy, restored in place."""
    import verl_ext.patches.lora_backup as lora_backup

    try:
        module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        module.register_parameter("lora_A", torch.nn.Parameter(torch.ones(2)))
        original = {n: p.detach().clone() for n, p in module.named_parameters()}
        backup = lora_backup.backup_base_model_weights(module)
        assert set(backup) == {n for n in original if "lora" not in n}
        storages = {n: p.data_ptr() for n, p in module.named_parameters()}
        with torch.no_grad():
            for p in module.parameters():
                p.add_(1.0)
        lora_backup.restore_base_model_weights(module, backup)
        for name, param in module.named_parameters():
            assert param.data_ptr() == storages[name], "restored in place, not replaced"
            if "lora" in name:
                assert torch.equal(param, original[name] + 1.0)  # the adapter is not part of the backup
            else:
                assert torch.equal(param, original[name])
        again = lora_backup.backup_base_model_weights(module)
        assert all(again[n].data_ptr() == backup[n].data_ptr() for n in backup), "one buffer per parameter, reused"
    finally:
        lora_backup.uninstall()


@pytest.mark.parametrize("merge_backup, lora, merge, expected", [
    ("pinned", "1", "1", ["verl_ext.patches.attention", "verl_ext.patches.lora_backup", "verl_ext.patches.lora_merged_sync"]),
    ("verl", "1", "1", ["verl_ext.patches.attention", "verl_ext.patches.lora_merged_sync"]),  # the out-of-place sync, the default
    ("pinned", "1", "0", "verl_ext.patches.attention"),  # the adapter is served unmerged: nothing is backed up
    ("pinned", "0", "1", "verl_ext.patches.attention"),  # full fine-tune: no adapter
])
def test_scripts_import_it_in_the_workers_only_for_the_merged_sync(merge_backup, lora, merge, expected):
    from test_train_scripts import dry_run, overrides_of

    from verl_ext.launch.preflight import check_ppo, compose

    overrides = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", LORA_MERGE_BACKUP=merge_backup,
                                     ENABLE_LORA=lora, ROLLOUT_LORA_MERGE=merge))
    cfg = compose("ppo_trainer", overrides)
    libs = cfg.actor_rollout_ref.model.external_lib
    assert (list(libs) if not isinstance(libs, str) else libs) == expected
    assert check_ppo(cfg, check_imports=False) == []
