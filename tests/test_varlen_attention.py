"""attn_implementation="torch_varlen" (verl_ext.patches.attention): packed rows give what each sequence gives alone.

On the CPU the packed path runs SDPA per sequence; PyTorch's varlen kernel itself runs on CUDA only, so what we
hand it is checked here with a recording kernel, and its numbers on the H100 by `bench/micro/actor_update_bench.py
--check-varlen` (docs/runs/speed-lab-notes/0c-packed-micro-batches.md). verl's own actor forward (FSDPEngineWithLMHead.forward_step, padding removed,
fused log-prob kernels on and off) runs on the packed micro batch against the padded one.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_ext.patches import attention

LENGTHS = [5, 9, 3]


def tiny_qwen2(attn: str, state: dict | None = None) -> Qwen2ForCausalLM:
    """Two layers, grouped-query attention (4 query heads, 2 key-value heads), the same weights for every attn."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=attn)
    if state is not None:
        model.load_state_dict(state)
    return model


@pytest.fixture()
def models() -> tuple[Qwen2ForCausalLM, Qwen2ForCausalLM]:
    sdpa = tiny_qwen2("sdpa")
    return sdpa, tiny_qwen2(attention.ATTN_IMPLEMENTATION, sdpa.state_dict())


def sequences() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 64, (n,), generator=generator) for n in LENGTHS]


def packed_row(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat(seqs)[None], torch.cat([torch.arange(len(s)) for s in seqs])[None]


def test_packed_row_matches_each_sequence_alone_with_gradients(models):
    sdpa, varlen = models
    seqs = sequences()
    ids, positions = packed_row(seqs)
    packed = varlen(input_ids=ids, position_ids=positions).logits[0]
    alone = torch.cat([sdpa(input_ids=s[None]).logits[0] for s in seqs])
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-5)
    packed.square().mean().backward()
    alone.square().mean().backward()
    for (name, p_varlen), p_sdpa in zip(varlen.named_parameters(), sdpa.parameters()):
        torch.testing.assert_close(p_varlen.grad, p_sdpa.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_without_sequence_boundaries_the_pack_would_leak(models):
    """The negative control: the same row under plain causal SDPA lets sequence 2 attend to sequence 1."""
    sdpa, varlen = models
    ids, positions = packed_row(sequences())
    leaking = sdpa(input_ids=ids).logits[0]
    separate = varlen(input_ids=ids, position_ids=positions).logits[0]
    first = LENGTHS[0]
    torch.testing.assert_close(leaking[:first], separate[:first])
    assert (leaking[first:] - separate[first:]).abs().max() > 1e-2


def test_padded_batches_and_generation_take_sdpa_unchanged(models):
    sdpa, varlen = models
    seqs = sequences()
    width = max(LENGTHS)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):  # left padding, as for generation
        ids[row, width - len(seq):] = seq
        mask[row, width - len(seq):] = 1
    torch.testing.assert_close(varlen(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                               sdpa(input_ids=ids, attention_mask=mask).logits[mask.bool()])
    greedy = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(varlen.generate(ids, attention_mask=mask, **greedy),
                       sdpa.generate(ids, attention_mask=mask, **greedy))


def test_the_kernel_gets_flat_heads_int32_boundaries_and_a_causal_window():
    calls = []

    def recording_kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, scale, window_size):
        calls.append({"shapes": (q.shape, k.shape, v.shape), "cu": (cu_q.dtype, cu_q.tolist(), cu_k.tolist()),
                      "max": (max_q, max_k), "scale": scale, "window": window_size})
        return attention.per_sequence_sdpa(q, k, v, cu_q, scale=scale)

    heads, dim = 4, 8
    total = sum(LENGTHS)
    query, key, value = (torch.randn(1, heads, total, dim) for _ in range(3))
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    out = attention.packed_causal_attention(query, key, value, positions, scale=0.3, kernel=recording_kernel)
    assert out.shape == (1, total, heads, dim)
    assert calls == [{"shapes": ((total, heads, dim),) * 3, "cu": (torch.int32, [0, 5, 14, 17], [0, 5, 14, 17]),
                      "max": (9, 9), "scale": 0.3, "window": (-1, 0)}]


def test_torch_varlen_accepts_the_call_we_make():
    """torch 2.11 (the GPU stack's pin) and 2.13 (CI's CPU build) share this signature; checked for the installed
    one. window_size=(-1, 0) is causal in torch's convention (torch/nn/attention/varlen.py)."""
    kernel = attention.varlen_kernel()
    q = torch.zeros(3, 2, 8)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    inspect.signature(kernel).bind(q, q, q, cu, cu, 3, 3, scale=0.5, window_size=(-1, 0))


def test_sequence_boundaries_start_at_the_first_token_and_at_every_zero():
    cu, longest = attention.sequence_boundaries(torch.tensor([[3, 4, 0, 1, 2, 0]]))
    assert cu.tolist() == [0, 2, 5, 6] and longest == 3
    cu, longest = attention.sequence_boundaries(torch.arange(4).expand(2, 4))  # an unpacked batch: one per row
    assert cu.tolist() == [0, 4, 8] and longest == 4
    with pytest.raises(ValueError, match=r"\(batch, seq\) position_ids; got shape \(3, 1, 6\)"):
        attention.sequence_boundaries(torch.zeros(3, 1, 6, dtype=torch.long))


def test_what_it_does_not_cover_is_an_error_naming_the_way_out():
    query = torch.zeros(1, 2, 4, 8)
    layer = torch.nn.Module()
    with pytest.raises(ValueError, match="no attention dropout .*0.1.*ATTN_IMPLEMENTATION=sdpa"):
        attention.varlen_attention_forward(layer, query, query, query, None, dropout=0.1)
    with pytest.raises(ValueError, match="sliding window of 4096: use ATTN_IMPLEMENTATION=sdpa"):
        attention.varlen_attention_forward(layer, query, query, query, None, sliding_window=4096)
    with pytest.raises(ValueError, match="Module is bidirectional: use ATTN_IMPLEMENTATION=sdpa"):
        attention.varlen_attention_forward(layer, query, query, query, None, is_causal=False)


# verl's monkey patch replaces Qwen2ForCausalLM.forward for the whole process: run it in a child interpreter
ENGINE_SCRIPT = textwrap.dedent("""
    import sys, torch
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils import tensordict_utils as tu
    sys.path.insert(0, sys.argv[1])
    from test_varlen_attention import LENGTHS, sequences, tiny_qwen2
    from verl_ext.patches import attention

    fused = sys.argv[2] == "fused"
    fsdp_engine.get_device_name = fsdp_engine.get_device_id = lambda: "cpu"
    seqs = sequences()
    nested = {"input_ids": torch.nested.nested_tensor(seqs, layout=torch.jagged),
              "position_ids": torch.nested.nested_tensor([torch.arange(len(s)) for s in seqs], layout=torch.jagged)}
    state = tiny_qwen2("sdpa").state_dict()
    log_probs = {}
    for attn, remove_padding in (("sdpa", False), (attention.ATTN_IMPLEMENTATION, True)):
        model = tiny_qwen2(attn, state)
        apply_monkey_patch(model, use_remove_padding=remove_padding, use_fused_kernels=fused,
                           fused_kernels_backend="torch" if fused else None)
        # verl 0.9.1's FSDP actor engine around the model, as far as its forward step needs (one CPU process)
        engine = fsdp_engine.FSDPEngineWithLMHead.__new__(fsdp_engine.FSDPEngineWithLMHead)
        engine.module, engine.pad_to_length, engine._autocast_dtype = model, False, torch.float32
        engine.use_ulysses_sp, engine.ulysses_sequence_parallel_size = False, 1
        micro_batch = tu.get_tensordict(dict(nested), non_tensor_dict={
            "use_remove_padding": remove_padding, "use_fused_kernels": fused, "temperature": 1.0})
        _, output = engine.forward_step(micro_batch, loss_function=None, forward_only=True)
        log_probs[attn] = output["model_output"]["log_probs"].values()
    # a sequence's last log-prob scores the next sequence's first token (no label): verl's loss masks it out
    predicted = torch.ones(sum(LENGTHS), dtype=torch.bool)
    predicted[torch.tensor(LENGTHS).cumsum(0) - 1] = False
    diff = (log_probs[attention.ATTN_IMPLEMENTATION] - log_probs["sdpa"])[predicted].abs().max().item()
    print("MAX_DIFF", diff, "TOKENS", int(predicted.sum()))
""")


@pytest.mark.parametrize("fused", ["logits", "fused"])
def test_verls_actor_forward_on_the_packed_micro_batch_matches_padded_rows(fused):
    result = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT, str(Path(__file__).parent), fused],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("MAX_DIFF"))
    _, diff, _, tokens = line.split()
    assert float(diff) < 1e-5 and int(tokens) == sum(LENGTHS) - len(LENGTHS)


def test_verls_model_config_registers_it_in_a_fresh_process_through_external_lib(tmp_path, tokenizer_dir):
    """A verl worker builds HFModelConfig from the config the scripts compose; its external_lib import is what
    makes attn_implementation="torch_varlen" known there before the model is loaded."""
    from verl_ext.tiny_model import build_qwen2

    model_dir = build_qwen2(tmp_path / "model", "tiny", tokenizer_dir, dtype="float32")
    script = textwrap.dedent(f"""
        from omegaconf import OmegaConf
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl_ext.launch.preflight import compose
        import sys
        cfg = compose("ppo_trainer", sys.argv[1:])
        model_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
        model = AutoModelForCausalLM.from_pretrained({str(model_dir)!r}, config=model_config.hf_config)
        print("ATTN", model.config._attn_implementation)
        from verl.utils import fsdp_utils
        print("BACKUP", fsdp_utils.backup_base_model_weights.__module__)
    """)
    from test_train_scripts import dry_run, overrides_of

    overrides = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", MODEL_PATH=str(model_dir),
                                     ATTN_IMPLEMENTATION="torch_varlen"))
    assert "actor_rollout_ref.model.use_remove_padding=True" in overrides
    assert "actor_rollout_ref.model.external_lib=[verl_ext.patches.attention,verl_ext.patches.lora_backup,verl_ext.patches.lora_merged_sync]" in overrides
    result = subprocess.run([sys.executable, "-c", script, *overrides], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ATTN torch_varlen" in result.stdout
    assert "BACKUP verl_ext.patches.lora_backup" in result.stdout  # the merged LoRA sync's backup, same import


def test_preflight_names_a_torch_varlen_model_config_that_cannot_register_it():
    from test_train_scripts import dry_run, overrides_of

    from verl_ext.launch.preflight import check_ppo, compose

    overrides = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", ATTN_IMPLEMENTATION="torch_varlen"))
    assert check_ppo(compose("ppo_trainer", overrides), check_imports=False) == []
    # a user's own external_lib replaces ours (Hydra keeps the last value)
    problems = check_ppo(compose("ppo_trainer", [*overrides, "actor_rollout_ref.model.external_lib=my_models"]),
                         check_imports=False)
    assert problems == [
        "ATTN_IMPLEMENTATION (actor_rollout_ref.model.override_config.attn_implementation=torch_varlen): "
        "actor_rollout_ref.model.external_lib=my_models does not import verl_ext.patches.attention, which registers it; "
        "add it (a list keeps your own modules too)"]
    kept = [*overrides, "actor_rollout_ref.model.external_lib=[my_models,verl_ext.patches.attention]"]
    assert check_ppo(compose("ppo_trainer", kept), check_imports=False) == []


def test_boundaries_are_read_once_per_position_ids_tensor_and_again_after_it_changes():
    positions = torch.tensor([[0, 1, 0, 1, 2]])
    first = attention.sequence_boundaries(positions)
    assert attention.sequence_boundaries(positions) is first  # every layer of one forward: no new GPU sync
    positions[0, 1] = 0  # changed in place: read again
    cu, longest = attention.sequence_boundaries(positions)
    assert cu.tolist() == [0, 1, 2, 5] and longest == 3
    assert attention.sequence_boundaries(positions.clone())[0].tolist() == [0, 1, 2, 5]  # another tensor
