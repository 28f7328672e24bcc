"""Scripts that run torch.distributed / verl FSDP code on one gloo CPU rank, each in a child interpreter (a process
group and FSDP state must not leak into the test process). The child gets the test's arguments, then a free
port as its last argument (``sys.argv[-1]``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

# A tiny Qwen2 with a trained LoRA adapter on every linear (lora_B starts at zero, which would make any merge a
# no-op), the same on every rank (seeded). Needs torch, peft's LoraConfig/get_peft_model and transformers'
# Qwen2Config/Qwen2ForCausalLM imported; leaves `model` (the PEFT model, unwrapped).
TRAINED_LORA_MODEL = textwrap.dedent("""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
""")

# One gloo rank, verl's FSDP engine told that the "device" is the CPU, and TRAINED_LORA_MODEL. Leaves `model` and
# `expected` (PEFT's own merge_and_unload state dict) for the script that follows.
TRAINED_LORA_QWEN2 = textwrap.dedent("""
    import copy, os, sys, types, torch, torch.distributed as dist
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine

    fsdp_engine.get_device_id = lambda: "cpu"  # the GPU's device index, on the CPU machine
    fsdp_engine.log_gpu_memory_usage = lambda *args, **kwargs: None  # reads CUDA memory
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
    dist.init_process_group("gloo", rank=0, world_size=1)
""") + TRAINED_LORA_MODEL + textwrap.dedent("""
    expected = {k: v.clone() for k, v in copy.deepcopy(model).merge_and_unload().state_dict().items()}
""")

# `model` in verl's FSDP2 layout (a unit per decoder layer, then the root; bf16 compute, fp32 reduce) and the
# engine stand-in verl's weight-sync methods read. Needs torch and types imported; leaves `engine`.
FSDP2_LORA_ENGINE = textwrap.dedent("""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    engine = types.SimpleNamespace(module=model, _is_offload_param=False)
""")

# verl 0.9.1's FSDP actor engine around a tiny Qwen2 (torch_varlen, padding-free), as far as its training step
# needs, on one gloo CPU rank: leaves `engine`, `model`, `nested` (a jagged nested tensor from a list),
# `ppo_micro_batch` (verl's padding-free PPO micro batch) and verl's
# `losses`, `tu`, `compose`, `omega_conf_to_dataclass` for the script that follows. The tests directory is the
# child's first argument. A script that loads modules through VERL_USE_EXTERNAL_MODULES sets it before this.
CPU_ACTOR_ENGINE = textwrap.dedent("""
    import functools, os, sys, types, torch, torch.distributed as dist
    import verl  # imports the modules VERL_USE_EXTERNAL_MODULES names, as in every process of a run
    import verl.utils.seqlen_balancing as seqlen_balancing
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils import losses
    sys.path.insert(0, sys.argv[1])
    from test_varlen_attention import tiny_qwen2
    from verl_ext.patches import attention
    from verl_ext.launch.preflight import compose

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    fsdp_engine.get_device_name = fsdp_engine.get_device_id = seqlen_balancing.get_device_name = lambda: "cpu"
    model = tiny_qwen2(attention.ATTN_IMPLEMENTATION)
    apply_monkey_patch(model, use_remove_padding=True, use_fused_kernels=False)
    engine = fsdp_engine.FSDPEngineWithLMHead.__new__(fsdp_engine.FSDPEngineWithLMHead)
    engine.module, engine.pad_to_length, engine._autocast_dtype = model, False, torch.float32
    engine.use_ulysses_sp, engine.ulysses_sequence_parallel_size = False, 1
    engine.scaler, engine.engine_config = None, types.SimpleNamespace(use_no_sync_for_gradient_accumulation=False)
    engine.get_data_parallel_group, engine.get_data_parallel_size = (lambda: dist.group.WORLD), (lambda: 1)
    nested = lambda ts: torch.nested.as_nested_tensor(ts, layout=torch.jagged)

    # verl's padding-free PPO micro batch: seqs[i] is lengths[i] = (prompt, response) tokens, every response token
    # trained on, with old log-prob `old_log_prob` and advantage advantages[i]; `non_tensor` adds to or overrides
    # the flags
    def ppo_micro_batch(seqs, lengths, advantages, old_log_prob, **non_tensor):
        return tu.get_tensordict({
            "input_ids": nested(seqs), "position_ids": nested([torch.arange(len(s)) for s in seqs]),
            "prompts": nested([s[:p] for s, (p, _) in zip(seqs, lengths)]),
            "responses": nested([s[p:] for s, (p, _) in zip(seqs, lengths)]),
            "response_mask": nested([torch.ones(r, dtype=torch.long) for _, r in lengths]),
            "loss_mask": nested([torch.ones(r, dtype=torch.long) for _, r in lengths]),
            "old_log_probs": nested([torch.full((r,), float(old_log_prob)) for _, r in lengths]),
            "advantages": nested([torch.full((r,), float(a)) for (_, r), a in zip(lengths, advantages)])},
            non_tensor_dict={"use_remove_padding": True, "use_dynamic_bsz": True, "temperature": 1.0,
                             "global_batch_size": len(seqs), **non_tensor})
""")

# CPU_ACTOR_ENGINE's engine with the smoke run's actor config, the train scripts' switches taken from `SCRIPT_ENV` (a
# dict the script defines before this). Leaves `actor_config`, `fsdp_utils`, `lora_actor(bf16_base)` (the tiny
# Qwen2 as verl's _build_module and _build_lora_module leave it: padding-free monkey patch, activation checkpointing,
# PEFT LoRA on every linear with lora_B trained away from zero; bf16_base rounds the base weights to bf16 numbers, a
# bf16 checkpoint's), `batches` (two PPO batches of different token counts) and `ppo_batch(seqs, lengths,
# max_token_len_per_gpu, **flags)`.
SMOKE_LORA_ACTOR = CPU_ACTOR_ENGINE + textwrap.dedent("""
    from peft import LoraConfig, get_peft_model
    from torch.distributed.device_mesh import init_device_mesh
    from test_train_scripts import dry_run, overrides_of
    import verl.utils.fsdp_utils as fsdp_utils

    smoke = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", OLD_LOG_PROB_PASS="always", **SCRIPT_ENV))
    actor_config = omega_conf_to_dataclass(compose("ppo_trainer", smoke).actor_rollout_ref.actor)
    engine.engine_config = actor_config.fsdp_config  # with the actor's strategy, as verl's actor config sets it
    engine.model_config = types.SimpleNamespace(lora_rank=4, enable_activation_offload=False,
                                                enable_gradient_checkpointing=True)
    engine.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    fsdp_utils.get_device_id = lambda: "cpu"

    def lora_actor(bf16_base=False):
        model = tiny_qwen2(attention.ATTN_IMPLEMENTATION)
        if bf16_base:
            with torch.no_grad():
                for param in model.parameters():
                    param.copy_(param.bfloat16().float())
        apply_monkey_patch(model, use_remove_padding=True, use_fused_kernels=False)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=g) * 0.5)
        return model

    g = torch.Generator().manual_seed(11)
    batches = []
    for lengths in ([(9, 5), (12, 2), (8, 7), (10, 4), (7, 6)], [(6, 9), (11, 3), (5, 5)]):
        seqs = [torch.randint(0, 64, (p + r,), generator=g) for p, r in lengths]
        batches.append((seqs, lengths))

    def ppo_batch(seqs, lengths, max_token_len_per_gpu, **flags):
        return ppo_micro_batch(seqs, lengths, [1.0, -0.5, 0.7, -1.2, 0.2][:len(seqs)], -4.0,
                               max_token_len_per_gpu=max_token_len_per_gpu, **flags)
""")


def free_port() -> str:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the child's MASTER_PORT)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def printed_lines(done: subprocess.CompletedProcess) -> dict[str, list[str]]:
    """A child's "KEY values" lines by KEY (every line with that key, in order), after checking it exited 0."""
    assert done.returncode == 0, done.stderr[-4000:]
    lines: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


def run_on_one_rank(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``script`` in a child interpreter with ``args`` and a free port last; its output and status."""
    return subprocess.run([sys.executable, "-c", script, *args, free_port()], capture_output=True, text=True,
                          timeout=timeout)
