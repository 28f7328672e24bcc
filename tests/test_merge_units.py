"""Unit tests of merge-ppo building blocks that need no real checkpoint (fast)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from verl_ext.merge.errors import MergeError
from verl_ext.merge.io import staged_output
from verl_ext.merge.layout import LoraTrainMeta, load_actor_checkpoint, read_lora_meta, resolve_actor_dir
from verl_ext.merge.lora import AdapterShapes, base_model_key, inspect_adapter_tensors, make_lora_config
from verl_ext.merge.shards import load_shard_file
from verl_ext.merge.writer import INDEX_NAME, PlannedTensor, ShardedSafetensorsWriter, parse_size


# ---------------------------------------------------------------- writer
def _write_all(out_dir: Path, tensors: dict[str, torch.Tensor], max_bytes: int, split: int = 1) -> None:
    plan = [PlannedTensor(name, tuple(t.shape), t.dtype) for name, t in tensors.items()]
    writer = ShardedSafetensorsWriter(out_dir, plan, max_bytes)
    for name, tensor in tensors.items():
        # Several chunks along dim 0, as the merge streams rank pieces.
        chunks = list(tensor.chunk(split, dim=0)) if tensor.dim() and tensor.shape[0] else [tensor]
        writer.write(name, [c.contiguous() for c in chunks])
    writer.close()


def test_writer_round_trip_single_file(tmp_path):
    torch.manual_seed(0)
    tensors = {
        "a.weight": torch.randn(7, 5).to(torch.bfloat16),
        "b.bias": torch.randn(3, dtype=torch.float16),
        "c.scalar": torch.tensor(2.5),
        "d.empty": torch.empty(0, 4),
        "e.index": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "f.mask": torch.tensor([True, False, True]),
    }
    _write_all(tmp_path, tensors, max_bytes=10**9, split=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    loaded = load_file(tmp_path / "model.safetensors")
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name
    with safe_open(tmp_path / "model.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}
    header_len = struct.unpack("<Q", (tmp_path / "model.safetensors").read_bytes()[:8])[0]
    assert header_len % 8 == 0


def test_writer_shards_and_index(tmp_path):
    tensors = {f"layer.{i}.weight": torch.full((10, 10), float(i)) for i in range(5)}  # 400 bytes each
    _write_all(tmp_path, tensors, max_bytes=900, split=2)
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == 5 * 400
    files = sorted(set(index["weight_map"].values()))
    assert files == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                     "model-00003-of-00003.safetensors"]
    for name, file_name in index["weight_map"].items():
        assert torch.equal(load_file(tmp_path / file_name)[name], tensors[name])


def test_writer_rejects_wrong_order_size_and_incomplete(tmp_path):
    plan = [PlannedTensor("x", (2, 2), torch.float32), PlannedTensor("y", (3,), torch.float32)]
    writer = ShardedSafetensorsWriter(tmp_path, plan, 10**6)
    with pytest.raises(MergeError, match="expected 'x' next, got 'y'"):
        writer.write("y", [torch.zeros(3)])
    with pytest.raises(MergeError, match="wrote 12 bytes, expected 16"):
        writer.write("x", [torch.zeros(3)])
    writer.abort()
    writer = ShardedSafetensorsWriter(tmp_path, plan, 10**6)
    writer.write("x", [torch.zeros(2, 2)])
    with pytest.raises(MergeError, match="before all tensors were written; next missing: \\['y'\\]"):
        writer.close()
    writer.abort()


@pytest.mark.parametrize(
    ("text", "expected"), [("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1234", 1234)]
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "5XB", "0"])
def test_parse_size_rejects(text):
    with pytest.raises(MergeError, match="invalid size"):
        parse_size(text)


# ---------------------------------------------------------------- atomic output
def test_staged_output_publishes_on_success(tmp_path):
    target = tmp_path / "out"
    with staged_output(target, force=False) as stage:
        assert stage.parent == tmp_path and stage.name.startswith(".out.merge-tmp-")
        (stage / "model.safetensors").write_text("x")
        assert not target.exists()
    assert (target / "model.safetensors").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staged_output_cleans_up_on_error(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), staged_output(target, force=False) as stage:
        (stage / "half.safetensors").write_text("x")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_staged_output_refuses_non_empty_then_force_replaces(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(MergeError, match="not empty; pass --force"), staged_output(target, force=False):
        pass
    assert (target / "old.txt").exists()
    with staged_output(target, force=True) as stage:
        (stage / "new.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_staged_output_accepts_empty_dir_and_refuses_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with staged_output(tmp_path / "empty", force=False) as stage:
        (stage / "a").write_text("a")
    assert (tmp_path / "empty" / "a").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(MergeError, match="exists and is not a directory"), staged_output(tmp_path / "file", True):
        pass


# ---------------------------------------------------------------- layout
def _fake_actor_dir(path: Path, world_size: int = 2, ranks: range | None = None, file_world_size: int | None = None):
    path.mkdir(parents=True)
    (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    for rank in ranks if ranks is not None else range(world_size):
        (path / f"model_world_size_{file_world_size or world_size}_rank_{rank}.pt").write_bytes(b"")
    (path / "huggingface").mkdir()
    (path / "huggingface" / "config.json").write_text("{}")
    return path


def test_resolve_latest_step_from_tracker(tmp_path):
    for step in (5, 10):
        _fake_actor_dir(tmp_path / f"global_step_{step}" / "actor")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    assert resolve_actor_dir(tmp_path) == (tmp_path / "global_step_5" / "actor", 5)
    assert resolve_actor_dir(tmp_path, step=10) == (tmp_path / "global_step_10" / "actor", 10)
    assert resolve_actor_dir(tmp_path / "global_step_10") == (tmp_path / "global_step_10" / "actor", 10)
    assert resolve_actor_dir(tmp_path / "global_step_10" / "actor") == (tmp_path / "global_step_10" / "actor", 10)
    with pytest.raises(MergeError, match="--step only applies to an experiment dir"):
        resolve_actor_dir(tmp_path / "global_step_10", step=5)


def test_resolve_sft_checkpoints_without_an_actor_level(tmp_path):
    """verl's SFT trainer saves the shards in global_step_N/ itself."""
    for step in (4, 8):
        _fake_actor_dir(tmp_path / f"global_step_{step}")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert resolve_actor_dir(tmp_path) == (tmp_path / "global_step_8", 8)
    assert resolve_actor_dir(tmp_path, step=4) == (tmp_path / "global_step_4", 4)
    assert resolve_actor_dir(tmp_path / "global_step_4") == (tmp_path / "global_step_4", 4)
    assert load_actor_checkpoint(tmp_path).hf_dir == tmp_path / "global_step_8" / "huggingface"
    (tmp_path / "global_step_9").mkdir()
    (tmp_path / "global_step_9" / "data_0.pt").write_bytes(b"")
    with pytest.raises(MergeError, match="global_step_9 has no actor/ directory \\(nor model shards of an SFT"):
        resolve_actor_dir(tmp_path, step=9)


def test_adapter_effect_flags_a_zero_adapter(caplog):
    """A LoRA run that learned nothing keeps lora_B at zero: the merge is exact, so only this check can tell."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl_ext.merge.lora_pipeline import adapter_effect
    from verl_ext.merge.verify import fp32_logits

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    ids = torch.tensor([[1, 5, 9, 3]])
    tensors = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    with torch.no_grad():
        zero = adapter_effect(model, ids, fp32_logits(model, ids), tensors)
    assert zero.max_abs_diff == 0.0 and zero.tolerance is None and "max |lora_B| 0.000e+00" in zero.label
    assert "learned nothing" in caplog.text
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.05)
        tensors = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
        moved = adapter_effect(model, ids, fp32_logits(model, ids), tensors)
    assert moved.max_abs_diff > 0 and "max |lora_B| 5.000e-02" in moved.label


def test_resolve_errors_name_the_problem(tmp_path):
    _fake_actor_dir(tmp_path / "global_step_3" / "actor")
    with pytest.raises(MergeError, match=r"no latest_checkpointed_iteration.txt.*available steps: 3 \(pass --step N\)"):
        resolve_actor_dir(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("three\n")
    with pytest.raises(MergeError, match="should contain a step number, found 'three'"):
        resolve_actor_dir(tmp_path)
    with pytest.raises(MergeError, match="step 7 has no directory .*global_step_7 \\(available steps: 3\\)"):
        resolve_actor_dir(tmp_path, step=7)
    with pytest.raises(MergeError, match="does not exist"):
        resolve_actor_dir(tmp_path / "nope")


def test_resolve_unknown_and_megatron_layouts(tmp_path):
    (tmp_path / "random").mkdir()
    (tmp_path / "random" / "weights.bin").write_bytes(b"")
    with pytest.raises(MergeError, match="unknown checkpoint layout.*weights.bin"):
        resolve_actor_dir(tmp_path / "random")
    (tmp_path / "mega" / "model" / "dist_ckpt").mkdir(parents=True)
    with pytest.raises(MergeError, match="Megatron checkpoint.*--backend megatron"):
        resolve_actor_dir(tmp_path / "mega")


def test_world_size_mismatch_and_missing_rank(tmp_path):
    _fake_actor_dir(tmp_path / "a", world_size=4, file_world_size=2, ranks=range(2))
    with pytest.raises(MergeError, match="world-size mismatch.*world_size=4.*world size 2 \\(2 files\\)"):
        load_actor_checkpoint(tmp_path / "a")
    _fake_actor_dir(tmp_path / "b", world_size=4, ranks=[0, 1, 3])
    with pytest.raises(MergeError, match="missing model shard\\(s\\).*model_world_size_4_rank_2.pt"):
        load_actor_checkpoint(tmp_path / "b")
    actor = _fake_actor_dir(tmp_path / "c")
    (actor / "fsdp_config.json").write_text("{not json")
    with pytest.raises(MergeError, match="corrupt .*fsdp_config.json"):
        load_actor_checkpoint(actor)
    (actor / "fsdp_config.json").unlink()
    with pytest.raises(MergeError, match="missing .*fsdp_config.json"):
        load_actor_checkpoint(actor)


def test_lora_meta_parsing(tmp_path):
    assert read_lora_meta(tmp_path) is None
    (tmp_path / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "task_type": "CAUSAL_LM"}))
    assert read_lora_meta(tmp_path) == LoraTrainMeta(rank=8, alpha=16, task_type="CAUSAL_LM")
    (tmp_path / "lora_train_meta.json").write_text(json.dumps({"r": 0, "lora_alpha": 16}))
    with pytest.raises(MergeError, match="'r' must be a positive integer, found 0"):
        read_lora_meta(tmp_path)


# ---------------------------------------------------------------- shard loading
def test_load_shard_file_errors(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(64, 64)}, good)
    truncated = tmp_path / "model_world_size_1_rank_0.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(MergeError, match="corrupt or truncated model shard .*model_world_size_1_rank_0.pt"):
        load_shard_file(truncated)
    pickled = tmp_path / "pickled.pt"
    torch.save({"w": torch.ones(2), "meta": AdapterShapes(rank=1, target_modules=("q",))}, pickled)
    with pytest.raises(MergeError, match="weights_only loading refuses.*--allow-unsafe-pickle"):
        load_shard_file(pickled)
    assert "meta" in load_shard_file(pickled, allow_unsafe_pickle=True)
    torch.save([torch.ones(1)], tmp_path / "list.pt")
    with pytest.raises(MergeError, match="should hold a state dict, found list"):
        load_shard_file(tmp_path / "list.pt")


# ---------------------------------------------------------------- LoRA helpers
def test_base_model_key_and_adapter_inspection():
    assert base_model_key("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )
    assert base_model_key("base_model.model.lm_head.weight") == "lm_head.weight"
    with pytest.raises(MergeError, match="lacks the PEFT prefix"):
        base_model_key("model.layers.0.mlp.up_proj.weight")
    prefix = "base_model.model.model.layers.0"
    shapes = {
        f"{prefix}.self_attn.q_proj.lora_A.default.weight": (4, 32),
        f"{prefix}.self_attn.q_proj.lora_B.default.weight": (32, 4),
        f"{prefix}.mlp.up_proj.lora_A.default.weight": (4, 32),
        f"{prefix}.mlp.up_proj.lora_B.default.weight": (64, 4),
    }
    assert inspect_adapter_tensors(shapes) == AdapterShapes(rank=4, target_modules=("q_proj", "up_proj"))
    with pytest.raises(MergeError, match="disagree on the rank"):
        inspect_adapter_tensors({**shapes, f"{prefix}.mlp.down_proj.lora_A.default.weight": (8, 64)})
    with pytest.raises(MergeError, match="unsupported adapter tensor .*lora_magnitude_vector"):
        inspect_adapter_tensors({**shapes, f"{prefix}.mlp.up_proj.lora_magnitude_vector.default.weight": (64,)})


def test_make_lora_config_alpha_and_rank_checks(tmp_path):
    shapes = AdapterShapes(rank=4, target_modules=("q_proj", "v_proj"))
    meta_path = tmp_path / "lora_train_meta.json"
    config = make_lora_config(shapes, LoraTrainMeta(4, 8, "CAUSAL_LM"), None, "Qwen/Qwen2.5-0.5B", meta_path)
    assert (config.r, config.lora_alpha, sorted(config.target_modules)) == (4, 8, ["q_proj", "v_proj"])
    assert config.base_model_name_or_path == "Qwen/Qwen2.5-0.5B"
    assert make_lora_config(shapes, LoraTrainMeta(4, 8, "CAUSAL_LM"), 32, None, meta_path).lora_alpha == 32
    with pytest.raises(MergeError, match="LoRA alpha unknown.*--lora-alpha"):
        make_lora_config(shapes, LoraTrainMeta(4, None, "CAUSAL_LM"), None, None, meta_path)
    with pytest.raises(MergeError, match="says r=8 but the lora_A/lora_B tensors have rank 4"):
        make_lora_config(shapes, LoraTrainMeta(8, 16, "CAUSAL_LM"), None, None, meta_path)


def _deep_lora_model(layers: int = 30, logit_scale: float = 40.0):
    """A float32 Llama of ``layers`` layers with large logits and a trained-looking LoRA adapter (B != 0)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    return peft.eval()


def test_scaled_logit_tolerance_grows_with_the_logits_and_names_its_rule():
    from verl_ext.merge.verify import LOGIT_ATOL, compare, logit_tolerance

    assert logit_tolerance(torch.tensor([0.5, -3.0])) == (LOGIT_ATOL, "max(0.0001, 128 x eps(float32) x max|logit| 3)")
    value, rule = logit_tolerance(torch.tensor([25.0]))
    assert value == pytest.approx(128 * torch.finfo(torch.float32).eps * 25) and value > 3.7e-4
    assert logit_tolerance(torch.tensor([25.0]), torch.bfloat16)[0] == pytest.approx(128 * 2 ** -7 * 25)
    check = compare("m", torch.tensor([25.0002]), torch.tensor([25.0]))
    assert check.passed and "(<= 3.815e-04 = max(0.0001, 128 x eps(float32) x max|logit| 25)" in check.describe()
    assert "% of it) OK" in check.describe()
    fixed = compare("m", torch.tensor([25.0002]), torch.tensor([25.0]), tolerance=1e-4)
    assert not fixed.passed and fixed.describe().endswith("FAILED")
    nan = compare("m", torch.tensor([float("nan")]), torch.tensor([1.0]))
    assert not nan.passed and "logits are not finite" in nan.describe()


def test_a_deep_models_exact_merge_passes_and_a_perturbed_weight_fails():
    from verl_ext.merge.verify import compare, fp32_logits

    peft = _deep_lora_model()
    input_ids = torch.tensor([[(7919 * k + 13) % 96 for k in range(24)]])
    adapter_logits = fp32_logits(peft, input_ids)
    assert float(adapter_logits.abs().max()) > 10  # logits well beyond where the fixed 1e-4 was chosen
    merged = peft.merge_and_unload()
    exact = compare("merged (fp32) vs base+adapter", fp32_logits(merged, input_ids), adapter_logits)
    assert exact.passed, exact.describe()
    with torch.no_grad():
        weight = merged.model.layers[15].mlp.down_proj.weight
        weight.add_(1e-3 * torch.randn_like(weight))  # one matrix off by 1e-3 a weight (~1.5 % of its mean |weight|)
    wrong = compare("merged (fp32) vs base+adapter", fp32_logits(merged, input_ids), adapter_logits)
    assert not wrong.passed and wrong.max_abs_diff > 10 * wrong.tolerance, wrong.describe()
