"""End-to-end tests of merge-ppo on real verl checkpoints.

The checkpoints are written once per session by verl's own `FSDPCheckpointManager` in a 2-process gloo group
(tiny random Qwen2, FSDP2 full fine-tune with two steps, FSDP1 LoRA, FSDP2 LoRA-only), next to the full
state dicts gathered by torch (`DTensor.full_tensor`) as an independent reference.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from safetensors.torch import load_file

from verl_ext.merge.cli import main
from verl_ext.merge.synthetic import TINY_QWEN2, CheckpointJob, write_base_model, write_verl_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[1]
LORA_ALPHA, LORA_RANK = 8, 4


def shared_dir(tmp_path_factory, name: str) -> Path:
    """A dir shared by all pytest-xdist workers of this session (guard it with a FileLock)."""
    base_temp = tmp_path_factory.getbasetemp()
    return (base_temp.parent if os.environ.get("PYTEST_XDIST_WORKER") else base_temp) / name


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    """Build the checkpoints once; under pytest-xdist the workers share them through a file lock."""
    root = shared_dir(tmp_path_factory, "merge-ckpts")
    paths = {
        name: root / name
        for name in ("base_tied", "base_untied", "full", "lora", "lora_only", "ref_full", "ref_lora", "ref_lora_only")
    }
    with FileLock(str(root) + ".lock"):
        if not (root / "DONE").exists():
            shutil.rmtree(root, ignore_errors=True)
            write_base_model(paths["base_tied"], TINY_QWEN2, seed=0)
            write_base_model(paths["base_untied"], {**TINY_QWEN2, "tie_word_embeddings": False}, seed=1)
            write_verl_checkpoints(
                [
                    CheckpointJob(str(paths["full"]), str(paths["base_tied"]), steps=(1, 2), strategy="fsdp2",
                                  reference_dir=str(paths["ref_full"])),
                    CheckpointJob(str(paths["lora"]), str(paths["base_untied"]), strategy="fsdp",
                                  lora_rank=LORA_RANK, lora_alpha=LORA_ALPHA, reference_dir=str(paths["ref_lora"])),
                    CheckpointJob(str(paths["lora_only"]), str(paths["base_tied"]), strategy="fsdp2",
                                  lora_rank=LORA_RANK, lora_alpha=16, save_lora_only=True, save_optimizer=False,
                                  reference_dir=str(paths["ref_lora_only"])),
                ],
                world_size=2,
            )
            (root / "DONE").touch()
    return paths


@pytest.fixture(scope="module")
def hsdp_ckpt(tmp_path_factory) -> dict[str, Path]:
    """FSDP2 HSDP run: 4 gloo ranks, verl's fsdp_size=2, i.e. a ("ddp", "fsdp") mesh with 2 replicas."""
    root = shared_dir(tmp_path_factory, "merge-ckpts-hsdp")
    paths = {name: root / name for name in ("base", "exp", "ref")}
    with FileLock(str(root) + ".lock"):
        if not (root / "DONE").exists():
            shutil.rmtree(root, ignore_errors=True)
            write_base_model(paths["base"], TINY_QWEN2, seed=2)
            write_verl_checkpoints(
                [CheckpointJob(str(paths["exp"]), str(paths["base"]), fsdp_size=2, reference_dir=str(paths["ref"]))],
                world_size=4,
            )
            (root / "DONE").touch()
    return paths


def run(*argv: str | Path) -> int:
    return main([str(a) for a in argv] + ["--no-progress"] * (argv[0] != "inspect"))


def reference(ckpts, name: str, step: int) -> dict[str, torch.Tensor]:
    """The torch-gathered full state dict that the fixture saved for run `name` (`ref_<name>` dir)."""
    return torch.load(ckpts[f"ref_{name}" if name else "ref"] / f"global_step_{step}.pt", weights_only=True)


def load_output_weights(out: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(path))
    return tensors


def logits(model, ids):
    with torch.no_grad():
        return model.float().eval()(input_ids=ids).logits


def probe_ids(vocab_size: int = 131) -> torch.Tensor:
    return torch.arange(3, 40, 3)[None] % vocab_size


def no_leftovers(parent: Path) -> bool:
    return not [p for p in parent.iterdir() if ".merge-tmp-" in p.name or ".replaced-" in p.name]


# ---------------------------------------------------------------- full fine-tune
def test_experiment_dir_merges_latest_step_like_torch_gathers_it(ckpts, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "model"
    assert run(ckpts["full"], "-o", out, "--max-shard-size", "40KB") == 0
    files = sorted(p.name for p in out.iterdir())
    expected_files = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
    assert expected_files | {"model.safetensors.index.json"} <= set(files)
    assert len([f for f in files if f.endswith(".safetensors")]) >= 2
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    # verl copies the base model's generation config into huggingface/; it must survive the merge.
    assert json.loads((out / "generation_config.json").read_text())["temperature"] == 0.7

    written = load_output_weights(out)
    expected = reference(ckpts, "full", 2)  # latest_checkpointed_iteration.txt says 2
    assert set(written) == set(expected) - {"lm_head.weight"}  # tied to model.embed_tokens.weight
    for name, tensor in written.items():
        assert tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, expected[name].to(torch.bfloat16)), name
    assert not torch.equal(expected["model.norm.weight"], reference(ckpts, "full", 1)["model.norm.weight"])

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer("answer 42")["input_ids"] and tokenizer.eos_token == "<|im_end|>"
    assert no_leftovers(tmp_path)


def test_step_option_and_auto_dtype_are_bit_exact(ckpts, tmp_path):
    out = tmp_path / "model"
    assert run(ckpts["full"], "--step", "1", "--dtype", "auto", "-o", out) == 0  # verl's actor shards are fp32
    expected = reference(ckpts, "full", 1)
    written = load_output_weights(out)
    assert all(torch.equal(written[name], expected[name]) for name in written)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"


def test_same_weights_as_verls_model_merger(ckpts, tmp_path):
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor = ckpts["full"] / "global_step_2" / "actor"
    verl_out, ours = tmp_path / "verl", tmp_path / "ours"
    verl_out.mkdir()
    FSDPModelMerger(
        ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor), target_dir=str(verl_out),
                          hf_model_config_path=str(actor / "huggingface"))
    ).merge_and_save()
    assert run(actor, "-o", ours) == 0
    theirs, mine = load_output_weights(verl_out), load_output_weights(ours)
    assert theirs.keys() == mine.keys()
    assert all(torch.equal(theirs[k], mine[k]) for k in theirs)


@pytest.mark.slow
def test_hsdp_checkpoint_reads_one_replica(hsdp_ckpt, tmp_path, capsys):
    out = tmp_path / "model"
    assert run("inspect", hsdp_ckpt["exp"]) == 0
    assert "world size:    4" in capsys.readouterr().out
    assert run(hsdp_ckpt["exp"], "-o", out, "--dtype", "float32", "--verify") == 0
    expected, written = reference(hsdp_ckpt, "", 1), load_output_weights(out)
    assert set(written) == set(expected) - {"lm_head.weight"}
    assert all(torch.equal(written[name], expected[name]) for name in written)


def test_verify_reports_logit_diff(ckpts, tmp_path, capsys):
    assert run(ckpts["full"] / "global_step_2", "-o", tmp_path / "m", "--verify") == 0
    report = capsys.readouterr().out
    match = re.search(r"written model vs shards: max abs logit diff (\S+) \(<= (\S+) = max\(0.0001, 128 x "
                      r"eps\(float32\) x max\|logit\| \S+\), \d+% of it\) OK", report)
    assert match and float(match.group(1)) <= float(match.group(2)) and float(match.group(2)) >= 1e-4


def test_verify_catches_a_wrong_tensor_and_publishes_nothing(ckpts, tmp_path, monkeypatch, capsys):
    from verl_ext.merge.shards import ShardReader

    original = ShardReader.iter_byte_chunks

    def tampered(self, info, dtype):
        for chunk in original(self, info, dtype):
            yield chunk * 1.01 if info.name == "model.norm.weight" else chunk

    monkeypatch.setattr(ShardReader, "iter_byte_chunks", tampered)
    assert run(ckpts["full"], "-o", tmp_path / "out", "--verify") == 3
    assert re.search(r"verification failed: written model vs shards: max abs logit diff \S+ .*FAILED",
                     capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- LoRA
def peft_reference_model(ckpts, name: str, base: str):
    """PEFT model rebuilt in the test from the torch-gathered state dict of the LoRA run."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    alpha = LORA_ALPHA if name == "lora" else 16
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(ckpts[base], dtype=torch.float32),
        LoraConfig(task_type="CAUSAL_LM", r=LORA_RANK, lora_alpha=alpha, target_modules="all-linear"),
    )
    result = model.load_state_dict(reference(ckpts, name, 1), strict=False)
    assert not result.unexpected_keys and not [k for k in result.missing_keys if "lora_" in k]
    return model


def test_lora_run_exports_peft_adapter(ckpts, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"
    assert run(ckpts["lora"], "-o", out, "--base-model", ckpts["base_untied"], "--verify") == 0
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"], config["task_type"]) == (
        LORA_RANK, LORA_ALPHA, "LORA", "CAUSAL_LM")
    assert sorted(config["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert config["base_model_name_or_path"] == str(ckpts["base_untied"])

    adapter = load_file(out / "adapter_model.safetensors")
    expected = {k.replace(".default", ""): v for k, v in reference(ckpts, "lora", 1).items() if "lora_" in k}
    assert adapter.keys() == expected.keys()
    assert all(torch.equal(adapter[k], expected[k]) for k in adapter)
    assert any(float(v.abs().max()) > 0 for k, v in adapter.items() if "lora_B" in k)  # training moved B off zero

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(ckpts["base_untied"]), out)
    ids = probe_ids()
    assert torch.allclose(logits(loaded, ids), logits(peft_reference_model(ckpts, "lora", "base_untied"), ids),
                          atol=1e-5, rtol=0)


def test_lora_merge_matches_base_plus_adapter(ckpts, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    assert run(ckpts["lora"], "-o", out, "--merge-lora", "--verify", "--dtype", "float32") == 0
    report = capsys.readouterr().out
    for label in ("exported adapter on base vs shards", "merged (fp32) vs base+adapter",
                  "written merged model vs base+adapter"):
        assert re.search(re.escape(label) + r": max abs logit diff \S+ \(<= \S+ = max\(0.0001, 128 x eps\(float32\) "
                         r"x max\|logit\| \S+\), \d+% of it\) OK", report), label
    effect = re.search(r"adapter effect, base vs base\+adapter \(max \|lora_B\| (\S+)\): max abs logit diff (\S+) "
                       r"\(informational\)", report)
    assert effect and float(effect.group(1)) > 0 and float(effect.group(2)) > 1e-3, report
    assert not (out / "adapter_config.json").exists()  # else transformers would load the dir as an adapter
    assert (out / "lora_adapter" / "adapter_model.safetensors").exists()

    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert not any("lora" in name for name in merged.state_dict())
    base = AutoModelForCausalLM.from_pretrained(ckpts["base_untied"])
    unmerged = PeftModel.from_pretrained(base, out / "lora_adapter")
    ids = probe_ids()
    diff = (logits(merged, ids) - logits(unmerged, ids)).abs().max()
    assert diff <= 1e-4
    base = AutoModelForCausalLM.from_pretrained(ckpts["base_untied"], dtype=torch.float32)
    assert (logits(merged, ids) - logits(base, ids)).abs().max() > 1e-3  # the adapter did change the model


def test_verify_catches_a_wrong_adapter(ckpts, tmp_path, monkeypatch, capsys):
    from verl_ext.merge import lora, lora_pipeline

    def tampered_write_adapter(out_dir, meta_peft_model, lora_tensors):
        scaled = {k: v * 1.1 if "lora_B" in k else v for k, v in lora_tensors.items()}
        lora.write_adapter(out_dir, meta_peft_model, scaled)

    monkeypatch.setattr(lora_pipeline, "write_adapter", tampered_write_adapter)
    assert run(ckpts["lora"], "-o", tmp_path / "out", "--verify") == 3
    assert "exported adapter on base vs shards" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_lora_only_checkpoint_needs_base_model(ckpts, tmp_path, capsys):
    out = tmp_path / "merged"
    assert run(ckpts["lora_only"], "-o", out, "--merge-lora") == 1
    assert "holds only LoRA weights" in capsys.readouterr().err and not out.exists()
    assert run(ckpts["lora_only"], "-o", out, "--verify") == 1
    assert "--verify needs --base-model" in capsys.readouterr().err and not out.exists()
    assert run(ckpts["lora_only"], "-o", tmp_path / "adapter") == 0  # the adapter alone needs no base
    assert run(ckpts["lora_only"], "-o", out, "--merge-lora", "--base-model", ckpts["base_tied"], "--verify") == 0
    written = load_output_weights(out)
    assert "lm_head.weight" not in written and written["model.embed_tokens.weight"].dtype == torch.bfloat16


def test_adapter_subcommand_equals_checkpoint_merge(ckpts, tmp_path):
    adapter, from_ckpt, from_adapter = tmp_path / "adapter", tmp_path / "a", tmp_path / "b"
    assert run(ckpts["lora"], "-o", adapter, "--base-model", ckpts["base_untied"]) == 0
    assert run(ckpts["lora"], "-o", from_ckpt, "--merge-lora") == 0
    assert run("adapter", "--adapter", adapter, "-o", from_adapter, "--verify") == 0  # base from adapter_config
    first, second = load_output_weights(from_ckpt), load_output_weights(from_adapter)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert {"tokenizer.json", "generation_config.json"} <= {p.name for p in from_adapter.iterdir()}


def test_missing_lora_alpha(ckpts, tmp_path, capsys):
    actor = shutil.copytree(ckpts["lora"] / "global_step_1" / "actor", tmp_path / "actor")
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": LORA_RANK, "task_type": "CAUSAL_LM"}))
    assert run(actor, "-o", tmp_path / "out") == 1
    assert "pass --lora-alpha" in capsys.readouterr().err
    assert run(actor, "-o", tmp_path / "out", "--lora-alpha", str(LORA_ALPHA)) == 0


# ---------------------------------------------------------------- safety
def test_non_empty_target_needs_force(ckpts, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    assert run(ckpts["full"], "-o", out) == 1
    assert "not empty; pass --force" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "precious"
    assert run(ckpts["full"], "-o", out, "--force") == 0
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").exists()
    assert no_leftovers(tmp_path)


def test_refuses_output_that_contains_the_checkpoint(ckpts, tmp_path, capsys):
    experiment = shutil.copytree(ckpts["full"] / "global_step_1", tmp_path / "global_step_1")
    assert run(experiment / "actor", "-o", experiment, "--force") == 1
    assert "contains the input" in capsys.readouterr().err
    assert (experiment / "actor" / "model_world_size_2_rank_0.pt").exists()


def test_crash_mid_write_leaves_nothing(ckpts, tmp_path, monkeypatch):
    from verl_ext.merge import writer

    original, calls = writer.ShardedSafetensorsWriter.write, []

    def failing_write(self, name, chunks):
        calls.append(name)
        if len(calls) == 4:
            raise RuntimeError("disk on fire")
        return original(self, name, chunks)

    monkeypatch.setattr(writer.ShardedSafetensorsWriter, "write", failing_write)
    with pytest.raises(RuntimeError, match="disk on fire"):
        run(ckpts["full"], "-o", tmp_path / "out", "--max-shard-size", "20KB")
    assert list(tmp_path.iterdir()) == []


def test_sigkill_mid_write_never_publishes(ckpts, tmp_path):
    out = tmp_path / "out"
    script = (
        "import os, signal, sys\n"
        "from verl_ext.merge import writer\n"
        "from verl_ext.merge.cli import main\n"
        "original, calls = writer.ShardedSafetensorsWriter.write, []\n"
        "def write(self, name, chunks):\n"
        "    calls.append(name)\n"
        "    if len(calls) == 6:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return original(self, name, chunks)\n"
        "writer.ShardedSafetensorsWriter.write = write\n"
        "main(sys.argv[1:])\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    argv = [sys.executable, "-c", script, str(ckpts["full"]), "-o", str(out), "--max-shard-size", "20KB",
            "--no-progress"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not out.exists()
    leftovers = [p for p in tmp_path.iterdir() if ".merge-tmp-" in p.name]
    assert len(leftovers) == 1 and any(p.suffix == ".safetensors" for p in leftovers[0].iterdir())


def test_corrupt_missing_and_mismatched_shards(ckpts, tmp_path, capsys):
    actor = shutil.copytree(ckpts["full"] / "global_step_2" / "actor", tmp_path / "actor")
    shard = actor / "model_world_size_2_rank_1.pt"
    data = shard.read_bytes()

    shard.write_bytes(data[: len(data) // 2])
    assert run(actor, "-o", tmp_path / "out") == 1
    assert re.search(r"corrupt or truncated model shard .*model_world_size_2_rank_1\.pt", capsys.readouterr().err)

    shard.unlink()
    assert run(actor, "-o", tmp_path / "out") == 1
    assert "missing model shard(s)" in capsys.readouterr().err

    shard.write_bytes(data)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 4}))
    assert run(actor, "-o", tmp_path / "out") == 1
    assert "world-size mismatch" in capsys.readouterr().err

    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    config = json.loads((actor / "huggingface" / "config.json").read_text())
    deeper = {**config, "num_hidden_layers": 3, "layer_types": ["full_attention"] * 3}
    (actor / "huggingface" / "config.json").write_text(json.dumps(deeper))
    assert run(actor, "-o", tmp_path / "out") == 1
    assert re.search(r"unknown layout: .* do not match Qwen2ForCausalLM: missing \d+", capsys.readouterr().err)

    (actor / "huggingface" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    assert run(actor, "-o", tmp_path / "out") == 1
    assert "cannot load the model config" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and no_leftovers(tmp_path)


# ---------------------------------------------------------------- CLI surface
def test_inspect_through_verl_ext_dispatcher(ckpts, capsys):
    from verl_ext.cli import main as verl_ext_main

    assert verl_ext_main(["merge", "inspect", str(ckpts["lora"])]) == 0
    out = capsys.readouterr().out
    assert "world size:    2 (FSDP v1)" in out
    assert f"LoRA: r={LORA_RANK}, alpha={LORA_ALPHA}" in out


def test_push_to_hub_uses_hf_token_only_and_never_prints_it(ckpts, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert run(ckpts["full"], "-o", tmp_path / "a", "--push-to-hub", "me/model") == 1
    assert "HF_TOKEN" in capsys.readouterr().err and not (tmp_path / "a").exists()

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("token", token))

        def create_repo(self, **kwargs):
            calls.append(("create", kwargs))

        def upload_folder(self, **kwargs):
            calls.append(("upload", sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())))
            return type("Commit", (), {"commit_url": "https://huggingface.co/me/model/commit/abc"})()

    secret = "hf_supersecret_test_token"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert run(ckpts["full"], "-o", tmp_path / "b", "--push-to-hub", "me/model", "--private") == 0
    assert calls[0] == ("token", secret)
    assert calls[1][1]["repo_id"] == "me/model" and calls[1][1]["private"] is True
    assert "model.safetensors" in calls[2][1]
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    assert "pushed: https://huggingface.co/me/model/commit/abc" in captured.out


def test_shell_wrapper(ckpts):
    script = REPO_ROOT / "train" / "scripts" / "merge-ppo.sh"
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if Path(shellcheck).exists():
        subprocess.run([shellcheck, str(script)], check=True)
    env = {**os.environ, "PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(["bash", str(script), "inspect", str(ckpts["full"])], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step:          2" in proc.stdout


def test_training_only_attention_in_the_checkpoint_config(ckpts, tmp_path):
    """verl saves the actor's config with attn_implementation "torch_varlen" (verl_ext.patches.attention, registered only
    inside a training run); merge-ppo builds the model without it and the merged config loads anywhere (on the
    H100, SmolLM2's GRPO checkpoint failed to merge before: docs/runs/2026-11-26-h100-smollm2-mixture/)."""
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    shutil.copytree(ckpts["full"], ckpt)
    for config_path in ckpt.glob("**/huggingface/config.json"):
        config = json.loads(config_path.read_text())
        config_path.write_text(json.dumps({**config, "attn_implementation": "torch_varlen"}))
    out = tmp_path / "model"
    assert run(ckpt, "-o", out, "--verify") == 0
    assert "attn_implementation" not in json.loads((out / "config.json").read_text())
    assert AutoModelForCausalLM.from_pretrained(out) is not None
