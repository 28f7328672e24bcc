"""verl_ext.patches.compiled_layers (ACTOR_COMPILE=layers): torch.compile for the decoder layers of verl's FSDP2 actor.

The engine tests build the actor the way verl 0.9.1 does on one gloo CPU rank (a tiny Qwen2 under
``torch_varlen`` with verl's padding-free monkey patch, activation checkpointing, PEFT LoRA, then verl's own
``FSDPEngine._build_fsdp_module`` with the smoke run's FSDP2 config), once through verl's build and then through
the patched build with each backend, and run verl's ``forward_backward_batch`` with ``ppo_loss`` on two micro
batches of different token counts, then the forward-only log-prob pass.
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
from test_train_scripts import runtime_env_modules

from verl_ext.patches import compiled_layers

TESTS = Path(__file__).parent

ENGINE_COMPARE = "SCRIPT_ENV = {'ACTOR_COMPILE': 'layers'}\n" + SMOKE_LORA_ACTOR + textwrap.dedent("""
    import torch._dynamo
    print("PATCHED", getattr(fsdp_engine.FSDPEngine, "_verl_ext_compiled_layers", False))

    # verl's FSDP2 build: verl's own (eager) or the patched one (compiled layers), the same weights for both
    def build(compiled):
        fsdp_build = fsdp_engine.FSDPEngine._build_fsdp_module
        return fsdp_build(engine, lora_actor()) if compiled else fsdp_build.__wrapped__(engine, lora_actor())

    batch = functools.partial(ppo_batch, max_token_len_per_gpu=80)

    def run(compiled):
        engine.module = build(compiled)
        engine.module.train()
        results, graphs = [], []
        for seqs, lengths in batches:
            engine.module.zero_grad()
            out = engine.forward_backward_batch(batch(seqs, lengths, calculate_entropy=False),
                                                loss_function=functools.partial(losses.ppo_loss, config=actor_config))
            grads = torch.cat([p.grad.flatten() for p in engine.module.parameters() if p.grad is not None])
            results.append((out["metrics"]["actor/pg_loss"].aggregate(), grads))
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        engine.module.eval()
        with torch.no_grad():
            out = engine.forward_backward_batch(batch(*batches[0], calculate_entropy=False), loss_function=None,
                                                forward_only=True)
        log_probs = torch.cat([t.flatten() for t in out["model_output"]["log_probs"].unbind()])
        return results, log_probs, graphs

    # verl's eager build once, then the patched build with each backend (fresh dynamo caches and counters for each)
    (eager, eager_lp, eager_graphs) = run(compiled=False)
    for backend in ("aot_eager", "inductor"):
        os.environ["VERL_EXT_COMPILE_BACKEND"] = backend
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        (ours, our_lp, our_graphs) = run(compiled=True)
        layers = [m for m in engine.module.modules() if getattr(m, "_verl_ext_compiled_forward", False)]
        print(f"{backend}:LAYERS", len(layers))
        print(f"{backend}:GRAPHS", *eager_graphs, *our_graphs)
        for (eager_loss, eager_grad), (our_loss, our_grad) in zip(eager, ours):
            cosine = torch.nn.functional.cosine_similarity(eager_grad, our_grad, dim=0).item()
            print(f"{backend}:STEP", eager_loss, our_loss, (eager_grad - our_grad).abs().max().item(),
                  eager_grad.abs().max().item(), cosine)
        print(f"{backend}:LOGPROB_DIFF", (eager_lp - our_lp).abs().max().item())
""")


@pytest.mark.slow
def test_compiled_layers_in_verls_update_match_eager_with_either_backend():
    # one child for both backends: verl's set-up and eager reference (~13 s) are paid once
    lines = printed_lines(run_on_one_rank("import os\nos.environ['VERL_USE_EXTERNAL_MODULES'] = "
                                          "'verl_ext.patches.compiled_layers'\n" + ENGINE_COMPARE, str(TESTS),
                                          timeout=600))
    assert lines["PATCHED"] == ["True"]

    # aot_eager runs the captured graphs op by op: the same ops as eager, so the same numbers bit for bit
    assert lines["aot_eager:LAYERS"] == ["2"]
    graphs = list(map(int, lines["aot_eager:GRAPHS"][0].split()))
    assert graphs[:2] == [0, 0]  # verl's own build compiles nothing
    assert graphs[2] > 0 and graphs[3] == graphs[2]  # the second token count reuses the first's graphs
    assert len(lines["aot_eager:STEP"]) == 2
    for step in lines["aot_eager:STEP"]:
        eager_loss, our_loss, grad_diff, scale, _ = map(float, step.split())
        assert scale > 0 and grad_diff == 0.0 and our_loss == eager_loss
    assert float(lines["aot_eager:LOGPROB_DIFF"][0]) == 0.0

    # inductor fuses the bf16 ops of each layer (one rounding where eager rounds after every op): close, not equal
    assert lines["inductor:LAYERS"] == ["2"]
    assert len(lines["inductor:STEP"]) == 2
    for step in lines["inductor:STEP"]:
        eager_loss, our_loss, _, scale, cosine = map(float, step.split())
        assert scale > 0 and cosine > 0.999
        assert our_loss == pytest.approx(eager_loss, rel=1e-2)
    assert float(lines["inductor:LOGPROB_DIFF"][0]) < 0.05


@pytest.mark.slow
def test_all_layers_share_one_compilation():
    # ten layers under a limit of two cache entries per code object: a compilation per layer would hit the limit,
    # which raises here instead of falling back to eager. dynamo's own config.patch restores the limits after
    # (monkeypatch's undo deletes a config entry: later compilations in this process then failed)
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import torch._dynamo

    from verl_ext.patches import attention

    torch._dynamo.reset()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=10,
                         num_attention_heads=4, num_key_value_heads=2)
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=attention.ATTN_IMPLEMENTATION)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    assert compiled_layers.compile_decoder_layers(model, backend="aot_eager") == 10
    assert compiled_layers.compile_decoder_layers(model, backend="aot_eager") == 10  # idempotent
    try:
        with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True):
            for lengths in ([5, 7, 9], [6, 11], [20]):
                ids = torch.randint(0, 64, (1, sum(lengths)))
                positions = torch.cat([torch.arange(n) for n in lengths])[None]
                model(input_ids=ids, position_ids=positions, use_cache=False).logits.float().mean().backward()
    finally:
        torch._dynamo.reset()


def test_a_module_without_decoder_layers_is_refused_by_name():
    with pytest.raises(ValueError, match=r"no decoder layer in Sequential \(looked for the classes \['Block'\]\)"):
        compiled_layers.compile_decoder_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)), ["Block"])
    with pytest.raises(ValueError, match="_no_split_modules, which is empty"):
        compiled_layers.compile_decoder_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_the_patched_build_refuses_fsdp1():
    class Engine:
        engine_config = types.SimpleNamespace(strategy="fsdp", wrap_policy={})

        def _build_fsdp_module(self, module):
            return module

    fake_impl = types.SimpleNamespace(FSDPEngine=Engine, fsdp_version=lambda module: 1)
    compiled_layers.patch_engine(fake_impl)
    with pytest.raises(ValueError, match="FSDP version 1 \\(strategy 'fsdp'\\): use FSDP_STRATEGY=fsdp2"):
        Engine()._build_fsdp_module(torch.nn.Linear(2, 2))


def test_script_loads_the_patch_only_when_asked():
    assert "verl_ext.patches.compiled_layers" not in (runtime_env_modules() or "")
    assert "verl_ext.patches.compiled_layers" in runtime_env_modules(ACTOR_COMPILE="layers")
    script = str(TESTS.parent / "train/scripts/openspiel-ppo.sh")
    for env, message in (({"ACTOR_COMPILE": "yes"}, "ACTOR_COMPILE must be one of: off layers; got 'yes'"),
                         ({"ACTOR_COMPILE": "layers", "FSDP_STRATEGY": "fsdp"},
                          "ACTOR_COMPILE=layers compiles FSDP2's decoder layers; FSDP_STRATEGY=fsdp")):
        bad = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, env={**os.environ, **env})
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
