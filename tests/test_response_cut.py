"""verl_ext.patches.response_cut: the responses' per-token values cut out of a packed forward with one gather on the device
(a helper of OLD_LOG_PROB_PASS=auto and LM_HEAD_POSITIONS=response, not a patch of its own).

``response_values`` is compared value for value with the verl 0.9.1 function it stands in for. The patch of verl's
PPO loss with the same gather (``LOSS_RESPONSE_CUT=gather``) was removed under issue 46: tests/test_patch_registry.py
checks that the train scripts refuse the switch.
"""

from __future__ import annotations

import torch
from torch.profiler import profile
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding

from verl_ext.patches import response_cut


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def packed_batch(samples: int = 128, seed: int = 7):
    """Per-token values over prompt + response (requiring grad) and verl's non-tensor batch around them."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, 40, (samples,), generator=generator).tolist()
    response_lens = torch.randint(0, 30, (samples,), generator=generator).tolist()
    response_lens[:2] = [0, 1]  # an empty (aborted) response and a one-token one
    total = sum(prompt_lens) + sum(response_lens)
    values = torch.randn(total, generator=generator, requires_grad=True)
    offsets = torch.tensor([0, *torch.tensor(prompt_lens).add(torch.tensor(response_lens)).cumsum(0).tolist()])
    data = tu.get_tensordict({"prompts": nested([torch.zeros(n, dtype=torch.long) for n in prompt_lens]),
                              "responses": nested([torch.zeros(n, dtype=torch.long) for n in response_lens])})
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


def test_importing_the_module_patches_nothing():
    import verl.workers.utils.losses as losses

    assert losses.no_padding_2_padding is no_padding_2_padding
    assert not hasattr(response_cut, "install")  # a helper: nothing of verl to patch
