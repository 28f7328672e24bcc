"""verl_ext.patches.response_cut: the responses' per-token values cut out of a packed forward with one gather on the device.

Each function is compared value for value (and gradient for gradient) with the verl 0.9.1 function it stands in
for; the engine test runs verl's own ``forward_backward_batch`` (micro batching, ``forward_step``, ``ppo_loss``) on
a tiny Qwen2 on one gloo CPU rank with verl's cut and then with ours, loaded as a run loads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from gloo_rank import CPU_ACTOR_ENGINE, free_port
from test_train_scripts import runtime_env_modules
from torch.profiler import profile
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding

from verl_ext.patches import response_cut

TESTS = Path(__file__).parent


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def packed_batch(samples: int = 128, value_dims: tuple[int, ...] = (), max_response_len: int | None = None,
                 seed: int = 7):
    """Per-token values over prompt + response (requiring grad) and verl's non-tensor batch around them."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, 40, (samples,), generator=generator).tolist()
    response_lens = torch.randint(0, 30, (samples,), generator=generator).tolist()
    response_lens[:2] = [0, 1]  # an empty (aborted) response and a one-token one
    total = sum(prompt_lens) + sum(response_lens)
    values = torch.randn(total, *value_dims, generator=generator, requires_grad=True)
    offsets = torch.tensor([0, *torch.tensor(prompt_lens).add(torch.tensor(response_lens)).cumsum(0).tolist()])
    data = tu.get_tensordict({"prompts": nested([torch.zeros(n, dtype=torch.long) for n in prompt_lens]),
                              "responses": nested([torch.zeros(n, dtype=torch.long) for n in response_lens])},
                             non_tensor_dict={} if max_response_len is None else {"max_response_len": max_response_len})
    return values, torch.nested.nested_tensor_from_jagged(values, offsets=offsets), data


def device_reads(function, *args, monkeypatch) -> int:
    """Values read back by the host, each a wait for the device on a GPU: ``aten::_local_scalar_dense`` (``item``,
    ``int(t)``, a tensor as a slice bound) and ``Tensor.tolist`` (no aten op on the CPU, so counted by hand)."""
    tolist_calls = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: tolist_calls.append(1) or tolist(self))
    with profile() as trace:
        function(*args)
    monkeypatch.undo()
    scalar_reads = sum(event.count for event in trace.key_averages() if event.key == "aten::_local_scalar_dense")
    return scalar_reads + len(tolist_calls)


@pytest.mark.parametrize("value_dims, max_response_len", [((), None), ((), 40), ((3,), None)])
def test_padded_cut_has_verls_values_and_gradients(value_dims, max_response_len):
    values, log_probs, data = packed_batch(value_dims=value_dims, max_response_len=max_response_len)
    ours = response_cut.response_padded(log_probs, data, verl_cut=no_padding_2_padding)
    expected = no_padding_2_padding(log_probs, data)
    assert ours.shape == expected.shape and torch.equal(ours, expected)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    verl_grad, = torch.autograd.grad((expected * weights).sum(), values)
    our_grad, = torch.autograd.grad((response_cut.response_padded(log_probs, data, no_padding_2_padding)
                                     * weights).sum(), values)
    assert torch.equal(our_grad, verl_grad)  # prompts' positions and padding get exactly zero


def test_padded_cut_reads_the_device_once_where_verl_reads_it_per_sample(monkeypatch):
    _, log_probs, data = packed_batch()
    assert device_reads(no_padding_2_padding, log_probs, data, monkeypatch=monkeypatch) > 2 * 128
    assert device_reads(response_cut.response_padded, log_probs, data, no_padding_2_padding,
                        monkeypatch=monkeypatch) == 1


def test_padded_cut_refuses_what_verl_asserts_and_leaves_padded_batches_to_verl():
    _, log_probs, data = packed_batch(samples=4)
    total = log_probs.values().shape[0]
    with pytest.raises(ValueError, match=f"cover {total - 1} tokens, the batch's sequences {total}"):
        response_cut.response_padded(log_probs.values()[:-1], data, no_padding_2_padding)
    responses = data["responses"].offsets().diff().tolist()
    data["prompts"] = nested([torch.zeros(n, dtype=torch.long) for n in [0, 3, 2, 1]])
    with pytest.raises(ValueError, match="1 sample.s. with an empty prompt"):
        response_cut.response_padded(torch.zeros(6 + sum(responses)), data, no_padding_2_padding)
    calls = []
    padded = tu.get_tensordict({"prompts": torch.zeros(2, 3), "responses": torch.zeros(2, 2),
                                "attention_mask": torch.ones(2, 5)})
    response_cut.response_padded(torch.arange(10.0), padded, lambda tensor, batch: calls.append(batch) or "verl")
    assert calls == [padded]


def test_nested_cut_has_verls_values_without_reading_the_device(monkeypatch):
    from verl.workers.utils.padding import response_from_nested

    _, log_probs, data = packed_batch()
    mask = nested([torch.ones(n, dtype=torch.long) for n in data["responses"].offsets().diff().tolist()])
    expected, ours = response_from_nested(log_probs, mask), response_cut.response_values(log_probs, mask)
    assert torch.equal(ours.values(), expected.values()) and torch.equal(ours.offsets(), expected.offsets())
    assert ours.offsets() is not mask.offsets()  # fresh offsets, as verl's as_nested_tensor builds them
    bare_mask = torch.nested.nested_tensor_from_jagged(mask.values(), offsets=mask.offsets())  # no cached bounds
    assert torch.equal(response_cut.response_values(log_probs, bare_mask).values(), expected.values())
    assert device_reads(response_from_nested, log_probs, mask, monkeypatch=monkeypatch) == 2 * 128
    assert device_reads(response_cut.response_values, log_probs, mask, monkeypatch=monkeypatch) == 0


ENGINE_STEP = CPU_ACTOR_ENGINE + textwrap.dedent("""
    from test_train_scripts import dry_run, overrides_of

    smoke = overrides_of(dry_run("openspiel-ppo.sh", RUN_PROFILE="smoke", OLD_LOG_PROB_PASS="always"))
    actor_config = omega_conf_to_dataclass(compose("ppo_trainer", smoke).actor_rollout_ref.actor)

    g = torch.Generator().manual_seed(11)
    lengths = [(4, 5), (6, 2), (3, 7), (5, 4), (2, 6)]
    seqs = [torch.randint(0, 64, (p + r,), generator=g) for p, r in lengths]
    def batch():
        return ppo_micro_batch(seqs, lengths, [1.0, -0.5, 0.7, -1.2, 0.2], -4.0, max_token_len_per_gpu=20,
                               calculate_entropy=False)

    def step():
        model.zero_grad()
        out = engine.forward_backward_batch(batch(), loss_function=functools.partial(losses.ppo_loss, config=actor_config))
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), out["metrics"]

    verl_grads, verl_metrics = step()
    os.environ["VERL_USE_EXTERNAL_MODULES"] = "verl_ext.patches.response_cut"
    from verl.utils.import_utils import import_external_libs
    import_external_libs(os.environ["VERL_USE_EXTERNAL_MODULES"].split(","))  # what verl's __init__ does
    print("PATCHED", getattr(losses, "_verl_ext_response_cut", False))
    our_grads, our_metrics = step()
    print("GRAD_DIFF", (verl_grads - our_grads).abs().max().item(), "SCALE", verl_grads.abs().max().item())
    print("LOSS", verl_metrics["actor/pg_loss"].aggregate(), our_metrics["actor/pg_loss"].aggregate())
""")


def test_verls_update_with_the_gathered_cut_has_verls_gradient():
    done = subprocess.run([sys.executable, "-c", ENGINE_STEP, str(TESTS), free_port()], capture_output=True,
                          text=True, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["PATCHED"] == "True"
    grad_diff, _, scale = lines["GRAD_DIFF"].split()
    assert float(grad_diff) == 0.0 and float(scale) > 0
    verl_loss, our_loss = lines["LOSS"].split()
    assert float(verl_loss) == float(our_loss)


def test_train_script_loads_the_cut_with_gather_only_and_refuses_other_values():
    assert runtime_env_modules(LOSS_RESPONSE_CUT="gather", ROLLOUT_WORKER_START="spawn", OLD_LOG_PROB_PASS="always",
                               GC_FREEZE="0", ACTOR_FSDP="on", LM_HEAD_POSITIONS="all") == "verl_ext.patches.response_cut"
    assert "verl_ext.patches.response_cut" not in (runtime_env_modules() or "")  # verl's cut by default
    bad = subprocess.run(["bash", str(TESTS.parent / "train/scripts/openspiel-ppo.sh"), "--dry-run"],
                         capture_output=True, text=True, env={**os.environ, "LOSS_RESPONSE_CUT": "fast"})
    assert bad.returncode == 2 and "LOSS_RESPONSE_CUT must be one of: verl gather; got 'fast'" in bad.stderr


def test_importing_the_module_patches_nothing_until_installed():
    import verl.workers.utils.losses as losses

    assert not getattr(losses, "_verl_ext_response_cut", False)
    assert losses.no_padding_2_padding is no_padding_2_padding
