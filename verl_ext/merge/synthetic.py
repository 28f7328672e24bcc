"""Real verl FSDP checkpoints from random-init models, for tests, benchmarks and trying merge-ppo on CPU.

The checkpoints are written by verl's own code: each of `world_size` gloo processes loads the base model like
verl's FSDP engine does (`from_pretrained(..., dtype=float32)`, optional `get_peft_model` with verl's LoRA
config), wraps it with FSDP1 (`FullyShardedDataParallel` + verl's wrap policy) or FSDP2 (verl's `apply_fsdp2`),
optionally takes an AdamW step, and saves with `verl.utils.checkpoint.FSDPCheckpointManager`; rank 0 then
writes `latest_checkpointed_iteration.txt` as `RayPPOTrainer._save_checkpoint` does.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

TINY_QWEN2: dict[str, object] = {
    "vocab_size": 131,  # odd: rank pieces of the embedding differ in size (66 + 65 rows)
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
QWEN25_05B_SHAPE: dict[str, object] = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
}
TOKENIZER_CORPUS = (
    "Solve the puzzle step by step . The quick brown fox jumps over the lazy dog ; "
    "X to move , answer 42 . Board : X O . legal moves are 0 1 2 3 4 5 6 7 8 <think> </think>"
)


def build_tiny_tokenizer():
    """A WordLevel tokenizer (built with `tokenizers`) wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    words = list(dict.fromkeys(TOKENIZER_CORPUS.split()))
    vocab = {token: i for i, token in enumerate(specials + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )


def write_base_model(
    out_dir: Path, config_overrides: dict[str, object], seed: int = 0, dtype: torch.dtype = torch.float32
) -> Path:
    """Save a random-init Qwen2ForCausalLM with tokenizer and generation config, like a Hub model dir."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        **config_overrides,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        architectures=["Qwen2ForCausalLM"],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=0.7
    )
    out_dir = Path(out_dir)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


@dataclass(frozen=True)
class CheckpointJob:
    """One simulated training run; every process of the gloo group executes it."""

    experiment_dir: str
    base_model_dir: str
    steps: tuple[int, ...] = (1,)
    strategy: str = "fsdp2"  # verl's actor.strategy: "fsdp" (FSDP1) or "fsdp2"
    fsdp_size: int = -1  # verl's fsdp_size: < world size gives HSDP, a ("ddp", "fsdp") mesh
    lora_rank: int = 0
    lora_alpha: int = 16
    save_lora_only: bool = False
    save_optimizer: bool = True
    train: bool = True  # one AdamW step before each save, so weights (and LoRA B) move away from init
    reference_dir: str | None = None  # rank 0 saves the torch-gathered full state dict per step here


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_verl_checkpoints(jobs: list[CheckpointJob], world_size: int = 2) -> None:
    """Run `jobs` in one `world_size`-process gloo group (CPU) and wait for it."""
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(world_size, jobs, _free_port()), nprocs=world_size, join=True)


def _worker(rank: int, world_size: int, jobs: list[CheckpointJob], port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        for job in jobs:
            _run_job(rank, world_size, job)
    finally:
        dist.destroy_process_group()


def _wrap_fsdp(model: torch.nn.Module, job: CheckpointJob, world_size: int) -> torch.nn.Module:
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh

    if 0 < job.fsdp_size < world_size:  # as verl.workers.engine.fsdp.utils.create_device_mesh
        mesh = init_device_mesh(
            "cpu", (world_size // job.fsdp_size, job.fsdp_size), mesh_dim_names=("ddp", "fsdp")
        )
    else:
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("fsdp",))
    if job.strategy == "fsdp2":
        from verl.utils.fsdp_utils import apply_fsdp2

        apply_fsdp2(model, {"mesh": mesh}, OmegaConf.create({}))
        return model
    if job.strategy == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from verl.utils.fsdp_utils import get_fsdp_wrap_policy
        from verl.workers.engine.fsdp.utils import get_sharding_strategy

        # Same arguments as verl's FSDPEngine (use_orig_params=False is its default), minus sync_module_states,
        # which needs CUDA; every rank loaded the same weights anyway.
        return FullyShardedDataParallel(
            model,
            auto_wrap_policy=get_fsdp_wrap_policy(model, config=None, is_lora=job.lora_rank > 0),
            device_id=torch.device("cpu"),
            sharding_strategy=get_sharding_strategy(mesh),  # FULL_SHARD, or HYBRID_SHARD for a 2-D mesh
            device_mesh=mesh,
            use_orig_params=False,
        )
    raise ValueError(f"unknown strategy {job.strategy!r} (use 'fsdp' or 'fsdp2')")


def _gathered_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full tensors gathered by torch (`DTensor.full_tensor`, a collective) from the sharded state dict that
    verl saves: an independent reference for the merge."""
    from torch.distributed.fsdp import ShardedStateDictConfig, StateDictType
    from torch.distributed.tensor import DTensor
    from verl.utils.fsdp_utils import get_fsdp_state_ctx

    with get_fsdp_state_ctx(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(), None):
        state = model.state_dict()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in state.items()}


def _run_job(rank: int, world_size: int, job: CheckpointJob) -> None:
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    torch.manual_seed(1234)  # same data and LoRA init on every rank
    model = AutoModelForCausalLM.from_pretrained(job.base_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(job.base_model_dir)
    if job.lora_rank > 0:
        from peft import LoraConfig, TaskType, get_peft_model

        model.enable_input_require_grads()
        model = get_peft_model(
            model,
            LoraConfig(
                task_type=TaskType.CAUSAL_LM,
                r=job.lora_rank,
                lora_alpha=job.lora_alpha,
                target_modules="all-linear",
                bias="none",
            ),
        )
    model = _wrap_fsdp(model, job, world_size)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    contents = ["model", "optimizer", "extra"] if job.save_optimizer else ["model"]
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        lr_scheduler=None,
        processing_class=tokenizer,
        checkpoint_config=OmegaConf.create(
            {"save_contents": contents, "load_contents": contents, "save_lora_only": job.save_lora_only}
        ),
    )
    vocab_size = model.config.vocab_size if hasattr(model, "config") else tokenizer.vocab_size
    experiment = Path(job.experiment_dir)
    for step in job.steps:
        if job.train:
            input_ids = torch.randint(0, vocab_size, (2, 12))
            model(input_ids=input_ids, labels=input_ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        step_dir = experiment / f"global_step_{step}"
        manager.save_checkpoint(local_path=str(step_dir / "actor"), global_step=step)
        reference = _gathered_state_dict(model) if job.reference_dir else None
        if rank == 0:
            torch.save({"dataloader": "synthetic"}, step_dir / "data.pt")
            (experiment / "latest_checkpointed_iteration.txt").write_text(str(step))
            if reference is not None:
                Path(job.reference_dir).mkdir(parents=True, exist_ok=True)
                torch.save(reference, Path(job.reference_dir) / f"global_step_{step}.pt")
        dist.barrier()
