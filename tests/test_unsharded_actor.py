"""verl_ext.patches.unsharded_actor (ACTOR_FSDP=off): verl's one-GPU LoRA actor as a plain module instead of FSDP2 units.

The engine tests build the actor the way verl 0.9.1 does on one gloo CPU rank (a tiny Qwen2 under ``torch_varlen``
with verl's padding-free monkey patch, activation checkpointing, PEFT LoRA, then ``FSDPEngine._build_fsdp_module``
with the smoke run's config), once through verl's FSDP2 build and then through the patched build (without and with
``ACTOR_COMPILE=layers``'s compiled layers), and compare what verl's own engine methods compute with each:
``forward_backward_batch`` with ``ppo_loss`` (micro batches accumulated), ``optimizer_step`` (clipping, AdamW), the
forward-only log-prob pass, the merged weights the rollout gets, and checkpoints written by verl's
``FSDPCheckpointManager`` (resumed, and merged by ``merge-ppo``).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import types
from pathlib import Path

import pytest
import torch
from gloo_rank import SMOKE_LORA_ACTOR, printed_lines, run_on_one_rank
from safetensors.torch import load_file
from test_train_scripts import runtime_env_modules

from verl_ext.patches import unsharded_actor

TESTS = Path(__file__).parent

# SMOKE_LORA_ACTOR with ACTOR_FSDP=off, verl's optimizer config and engine state, and build(plain): the tiny Qwen2
# with base weights that are bf16 numbers (a bf16 checkpoint's) through verl's FSDP2 build (plain=False) or the
# patched one, with its AdamW
ENGINE_SETUP = "SCRIPT_ENV = {'ACTOR_FSDP': 'off'}\n" + SMOKE_LORA_ACTOR + textwrap.dedent("""
    import inspect

    engine.optimizer_config = actor_config.optim
    engine._qat_enabled = engine._is_offload_param = engine._is_offload_optimizer = False
    engine._uses_fsdp2_cpu_offload_policy = False
    print("PATCHED", getattr(fsdp_engine.FSDPEngine, "_verl_ext_unsharded_actor", False))

    def build(plain, compiled=True):
        model = lora_actor(bf16_base=True)
        fsdp_build = fsdp_engine.FSDPEngine._build_fsdp_module
        if not plain:
            fsdp_build = inspect.unwrap(fsdp_build)  # verl's
        elif not compiled and getattr(fsdp_engine.FSDPEngine, "_verl_ext_compiled_layers", False):
            fsdp_build = fsdp_build.__wrapped__  # the plain build alone: compiled_layers wraps it (loaded after it)
        print("BUILD", plain, compiled, os.path.basename(fsdp_build.__code__.co_filename))
        engine.module = fsdp_build(engine, model)
        engine.optimizer = torch.optim.AdamW([p for p in engine.module.parameters() if p.requires_grad], lr=1e-2)
        return engine.module

    full = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t
    batch = functools.partial(ppo_batch, max_token_len_per_gpu=40)  # two or more micro batches per batch

    def train_step(seqs, lengths):
        engine.optimizer.zero_grad()
        out = engine.forward_backward_batch(batch(seqs, lengths, calculate_entropy=False),
                                            loss_function=functools.partial(losses.ppo_loss, config=actor_config))
        grads = torch.cat([full(p.grad).flatten() for p in engine.module.parameters() if p.grad is not None])
        return out["metrics"]["actor/pg_loss"].aggregate(), grads, engine.optimizer_step()
""")

ENGINE_COMPARE = ENGINE_SETUP + textwrap.dedent("""
    from verl_ext.patches import lora_merged_sync

    def run(plain, compiled=True):
        module = build(plain, compiled)
        module.train()
        steps = [train_step(seqs, lengths) for seqs, lengths in batches]
        trained = {n: full(p.detach()).clone() for n, p in module.named_parameters() if p.requires_grad}
        module.eval()
        with torch.no_grad():
            out = engine.forward_backward_batch(batch(*batches[0], calculate_entropy=False), loss_function=None,
                                                forward_only=True)
        log_probs = torch.cat([t.flatten() for t in out["model_output"]["log_probs"].unbind()])
        sent = list(lora_merged_sync.merged_tensors(module, "cpu"))
        # ROLLOUT_LORA_MERGE=0: the adapter verl sends once the base weights are in the rollout engine
        adapter = fsdp_utils.collect_lora_params(module, layered_summon=False, base_sync_done=True)
        sent += [(name, full(tensor)) for name, tensor in adapter.items()]
        return module, steps, trained, log_probs, sent

    from peft.tuners.tuners_utils import BaseTunerLayer

    # verl's FSDP2 build once, then the plain module without and with compiled layers, each printed under its name
    fsdp_module, fsdp_steps, fsdp_trained, fsdp_lp, fsdp_sent = run(plain=False)
    for name, compiled in (("plain", False), ("plain_compiled", True)):
        module, steps, trained, log_probs, sent = run(plain=True, compiled=compiled)
        print(f"{name}:COMPILED", sum(getattr(m, "_verl_ext_compiled_forward", False) for m in module.modules()))
        print(f"{name}:TYPES", type(fsdp_module).__name__, type(module).__name__, fsdp_utils.fsdp_version(module))
        print(f"{name}:DTYPES", *sorted({str(p.dtype) for p in module.parameters() if not p.requires_grad}), "|",
              *sorted({str(p.dtype) for p in module.parameters() if p.requires_grad}))
        tuners = [m for m in module.modules() if isinstance(m, BaseTunerLayer)]
        print(f"{name}:INPUT_CASTS", len(tuners), sum(m.cast_input_dtype_enabled for m in tuners))
        for (f_loss, f_grad, f_norm), (loss, grad, norm) in zip(fsdp_steps, steps):
            print(f"{name}:STEP", f_loss, loss, (f_grad - grad).abs().max().item(), f_grad.abs().max().item(),
                  f_norm, norm)
        print(f"{name}:TRAINED", max((fsdp_trained[n] - trained[n]).abs().max().item() for n in trained),
              max(t.abs().max().item() for t in trained.values()), sorted(trained) == sorted(fsdp_trained))
        print(f"{name}:LOGPROB_DIFF", (fsdp_lp - log_probs).abs().max().item())
        print(f"{name}:SYNC_ORDER", [n for n, _ in fsdp_sent] == [n for n, _ in sent])
        print(f"{name}:SYNC_COUNT", len(sent), sum("lora_A" in n for n, _ in sent))
        print(f"{name}:SYNC_DTYPES", *sorted({str(t.dtype) for _, t in sent}))
        print(f"{name}:SYNC_DIFF",
              max((a.float() - b.float()).abs().max().item() for (_, a), (_, b) in zip(fsdp_sent, sent)))
""")


ENV_SETUP = "import os\nos.environ['VERL_USE_EXTERNAL_MODULES'] = 'verl_ext.patches.unsharded_actor'\n"
# ACTOR_COMPILE=layers on top, in the train scripts' order; aot_eager runs the captured graphs op by op
WITH_COMPILED_LAYERS = ("import os\nos.environ['VERL_USE_EXTERNAL_MODULES'] = "
                        "'verl_ext.patches.unsharded_actor,verl_ext.patches.compiled_layers'\n"
                        "os.environ['VERL_EXT_COMPILE_BACKEND'] = 'aot_eager'\n")


@pytest.mark.slow
def test_plain_actor_computes_what_fsdp2_computes_with_and_without_compiled_layers():
    # one child for both plain modules: verl's set-up and FSDP2 reference are paid once
    lines = printed_lines(run_on_one_rank(WITH_COMPILED_LAYERS + ENGINE_COMPARE, str(TESTS), timeout=600))
    assert lines["PATCHED"] == ["True"]
    # verl's own build for FSDP2, the plain module's wrap alone, then compiled_layers' wrap around it
    assert lines["BUILD"] == ["False True transformer_impl.py", "True False unsharded_actor.py",
                              "True True compiled_layers.py"]
    for name in ("plain", "plain_compiled"):
        # the plain module's two decoder layers compiled (the FSDP2 run is verl's own build, eager)
        assert lines[f"{name}:COMPILED"] == (["2"] if name == "plain_compiled" else ["0"])
        fsdp_type, plain_type, version = lines[f"{name}:TYPES"][0].split()
        assert fsdp_type.startswith("FSDP") and not plain_type.startswith("FSDP") and version == "0"
        assert lines[f"{name}:DTYPES"] == ["torch.bfloat16 | torch.float32"]  # frozen base in the compute dtype
        # PEFT's bf16 -> fp32 input copy is off in every LoRA layer, and the numbers below are still FSDP2's
        tuner_layers, casting = map(int, lines[f"{name}:INPUT_CASTS"][0].split())
        assert tuner_layers > 0 and casting == 0
        assert len(lines[f"{name}:STEP"]) == 2
        for step in lines[f"{name}:STEP"]:
            fsdp_loss, loss, grad_diff, scale, fsdp_norm, norm = map(float, step.split())
            assert scale > 0 and loss == fsdp_loss and grad_diff == 0.0
            assert norm == pytest.approx(fsdp_norm, rel=1e-6) and norm > 0
        param_diff, param_scale, same_names = lines[f"{name}:TRAINED"][0].split()
        assert same_names == "True" and float(param_scale) > 0 and float(param_diff) <= 1e-6 * float(param_scale)
        assert float(lines[f"{name}:LOGPROB_DIFF"][0]) <= 1e-5
        # merged bf16 weights for the rollout, then the fp32 adapter of an unmerged sync: the same names and bits
        assert lines[f"{name}:SYNC_ORDER"] == ["True"]
        count, adapters = map(int, lines[f"{name}:SYNC_COUNT"][0].split())
        assert count > adapters > 0
        assert lines[f"{name}:SYNC_DTYPES"] == ["torch.bfloat16 torch.float32"]
        assert float(lines[f"{name}:SYNC_DIFF"][0]) == 0.0


CHECKPOINTS = ENGINE_SETUP + textwrap.dedent("""
    from omegaconf import OmegaConf
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    out = sys.argv[2]
    contents = ["model", "optimizer", "extra"]

    def save(plain, experiment):
        module = build(plain)
        module.train()
        train_step(*batches[0])
        engine.checkpoint_manager = FSDPCheckpointManager(
            model=module, optimizer=engine.optimizer, lr_scheduler=None, processing_class=None,
            checkpoint_config=OmegaConf.create({"save_contents": contents, "load_contents": contents,
                                                "save_lora_only": False}))
        engine.save_checkpoint(f"{out}/{experiment}/global_step_1/actor", global_step=1)
        with open(f"{out}/{experiment}/latest_checkpointed_iteration.txt", "w") as f:
            f.write("1")
        return {n: full(p.detach()).clone() for n, p in module.named_parameters()}

    saved = save(True, "plain")
    torch.save(saved, f"{out}/plain_params.pt")
    module = build(True)
    engine.checkpoint_manager.model, engine.checkpoint_manager.optimizer = module, engine.optimizer
    state_before = {n: p.detach().clone() for n, p in module.named_parameters()}
    engine.load_checkpoint(f"{out}/plain/global_step_1/actor")
    print("RESUMED", all(torch.equal(p.detach(), saved[n]) for n, p in module.named_parameters()),
          any(not torch.equal(p.detach(), state_before[n]) for n, p in module.named_parameters()),
          len(engine.optimizer.state) == sum(p.requires_grad for p in module.parameters()))

    save(False, "fsdp2")
    build(True)
    engine.checkpoint_manager.model, engine.checkpoint_manager.optimizer = engine.module, engine.optimizer
    try:
        engine.load_checkpoint(f"{out}/fsdp2/global_step_1/actor")
    except ValueError as error:
        print("REFUSED", error)
""")


def test_plain_checkpoints_resume_merge_and_refuse_fsdp2_ones(tmp_path):
    from verl_ext.merge.cli import main

    lines = printed_lines(run_on_one_rank(ENV_SETUP + CHECKPOINTS, str(TESTS), str(tmp_path), timeout=600))
    # every parameter back (the fresh module's had changed), and AdamW's state for every adapter tensor
    assert lines["RESUMED"] == ["True True True"]
    [refused] = lines["REFUSED"]
    assert "fsdp2/global_step_1/actor was saved by an actor with FSDP version 2" in refused
    assert "this actor has FSDP version 0" in refused

    out = tmp_path / "merged"
    assert main([str(tmp_path / "plain"), "-o", str(out), "--merge-lora", "--dtype", "float32", "--verify",
                 "--no-progress"]) == 0
    merged = {}
    for path in out.glob("*.safetensors"):
        merged.update(load_file(path))
    params = torch.load(tmp_path / "plain_params.pt", weights_only=True)
    # PEFT's merge of the saved parameters: W + (alpha / r) B A, W the bf16 base weight
    layers = {name.removesuffix(".base_layer.weight") for name in params if name.endswith(".base_layer.weight")}
    assert layers
    for layer in layers:
        hf_name = layer.removeprefix("base_model.model.") + ".weight"
        base = params[f"{layer}.base_layer.weight"].float()
        delta = params[f"{layer}.lora_B.default.weight"] @ params[f"{layer}.lora_A.default.weight"] * (8 / 4)
        assert merged[hf_name].dtype == torch.float32
        assert torch.allclose(merged[hf_name], base + delta, atol=1e-6), hf_name


def test_refusals_name_the_setting():
    def engine(**overrides):
        config = dict(strategy="fsdp2", param_offload=False, optimizer_offload=False, offload_policy=False,
                      mixed_precision=None, forward_only=False)
        config.update(overrides)
        return types.SimpleNamespace(engine_config=types.SimpleNamespace(**config),
                                     model_config=types.SimpleNamespace(lora_rank=8, enable_activation_offload=False))

    assert unsharded_actor.refusal(engine(), 1) is None
    assert "runs on 2 ranks" in unsharded_actor.refusal(engine(), 2)
    assert "strategy is 'fsdp'" in unsharded_actor.refusal(engine(strategy="fsdp"), 1)
    assert "fsdp_config.param_offload=True" in unsharded_actor.refusal(engine(param_offload=True), 1)
    assert "torch.float16" in unsharded_actor.refusal(engine(mixed_precision={"param_dtype": "fp16"}), 1)
    full_fine_tune = engine()
    full_fine_tune.model_config.lora_rank = 0
    assert "full fine-tune" in unsharded_actor.refusal(full_fine_tune, 1)


def test_frozen_weights_take_the_compute_dtype_and_trainable_ones_keep_theirs():
    module = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    module[1].requires_grad_(False)
    module.register_buffer("steps", torch.zeros(2))
    unsharded_actor.unsharded(module, torch.bfloat16, "cpu")
    assert module[0].weight.dtype == torch.float32 and module[1].weight.dtype == torch.bfloat16
    assert module.steps.dtype == torch.float32


@pytest.mark.parametrize("dtype, casting", [(torch.bfloat16, False), (torch.float32, True)])
def test_peft_input_cast_is_off_only_under_autocast(dtype, casting):
    # bf16 compute: verl's autocast casts the adapter's matmul inputs, so PEFT's fp32 copy of each input is waste;
    # fp32 compute (no autocast): input and adapter share a dtype, PEFT's setting is left alone
    from peft import LoraConfig, get_peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer

    model = get_peft_model(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)),
                           LoraConfig(r=2, target_modules=["0", "1"]))
    unsharded_actor.unsharded(model, dtype, "cpu")
    tuners = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    assert len(tuners) == 2 and all(m.cast_input_dtype_enabled is casting for m in tuners)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out = model(torch.randn(3, 4, dtype=dtype))
    assert out.dtype == dtype and torch.isfinite(out.float()).all()


def test_auto_keeps_fsdp2_for_a_refused_setting_and_off_raises(monkeypatch):
    class Engine:
        engine_config = types.SimpleNamespace(strategy="fsdp2", param_offload=True, optimizer_offload=False,
                                              offload_policy=False, mixed_precision=None, forward_only=False)
        model_config = types.SimpleNamespace(lora_rank=8, enable_activation_offload=False)

        def _build_fsdp_module(self, module):
            return "verl's FSDP2 build"

        def load_checkpoint(self, local_path):
            return local_path

    impl = types.SimpleNamespace(FSDPEngine=Engine, get_device_id=lambda: "cpu", fsdp_version=lambda module: 0)
    unsharded_actor.patch_engine(impl)
    monkeypatch.setenv(unsharded_actor.MODE_ENV, "auto")
    assert Engine()._build_fsdp_module(torch.nn.Linear(2, 2)) == "verl's FSDP2 build"
    monkeypatch.delenv(unsharded_actor.MODE_ENV)
    with pytest.raises(ValueError, match=r"ACTOR_FSDP=off: fsdp_config.param_offload=True offloads through FSDP"):
        Engine()._build_fsdp_module(torch.nn.Linear(2, 2))
    Engine.engine_config.param_offload = False
    layer = torch.nn.Linear(2, 2)
    layer.weight.requires_grad_(False)
    assert Engine()._build_fsdp_module(layer) is layer  # the module itself, unwrapped
    assert layer.weight.dtype == torch.bfloat16 and layer.bias.dtype == torch.float32


def script_env(**env: str) -> dict[str, str]:
    """The runtime_env's environment variables of openspiel-ppo.sh's smoke run with ``env``."""
    from omegaconf import OmegaConf
    from test_train_scripts import dry_run, overrides_of

    from verl_ext.launch.preflight import compose

    cfg = compose("ppo_trainer", overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", **env)))
    return OmegaConf.to_container(cfg.ray_kwargs.ray_init.get("runtime_env") or {}).get("env_vars") or {}


@pytest.mark.parametrize("env, loaded, mode", [
    ({}, True, "auto"),  # the default: one GPU, LoRA, FSDP2
    ({"ACTOR_FSDP": "off"}, True, None),  # asked for: a refused setting raises in the worker
    ({"ACTOR_FSDP": "on"}, False, None),
    ({"N_GPUS_PER_NODE": "2"}, False, None),  # auto on two GPUs: FSDP2
    ({"ENABLE_LORA": "0"}, False, None),  # auto for a full fine-tune: FSDP2
    ({"FSDP_STRATEGY": "fsdp"}, False, None),
])
def test_script_loads_the_patch_where_auto_or_off_allows_it(env, loaded, mode):
    env_vars = script_env(**env)
    assert ("verl_ext.patches.unsharded_actor" in env_vars.get("VERL_USE_EXTERNAL_MODULES", "")) is loaded
    assert env_vars.get(unsharded_actor.MODE_ENV) == mode


def test_script_loads_the_patch_first_and_refuses_what_it_cannot_run():
    modules = runtime_env_modules(ACTOR_FSDP="off", ACTOR_COMPILE="layers").split(",")
    assert modules.index("verl_ext.patches.unsharded_actor") < modules.index("verl_ext.patches.compiled_layers")
    script = str(TESTS.parent / "train/scripts/openspiel-ppo.sh")
    for env, message in (({"ACTOR_FSDP": "no"}, "ACTOR_FSDP must be one of: auto on off; got 'no'"),
                         ({"ACTOR_FSDP": "off", "N_GPUS_PER_NODE": "2"}, "ACTOR_FSDP=off is for one GPU"),
                         ({"ACTOR_FSDP": "off", "ENABLE_LORA": "0"}, "ENABLE_LORA=0 FSDP_STRATEGY=fsdp2")):
        bad = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, env={**os.environ, **env})
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
