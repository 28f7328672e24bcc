"""Cut each response's per-token values out of a packed forward with one gather on the device.

verl 0.9.1's actor forward returns per-token values (log-probs) for whole packed sequences, prompt + response.
Its loss and its trainer cut the response part out sample by sample, slicing with indices they read back from
the GPU (``verl.workers.utils.padding``): every read is a synchronization, so for the 1,024 samples of a
128 x 8 step the update waits on the GPU thousands of times and issues ~25 ops per sample. The functions here
build one index on the device and gather: the same values, and for values that carry a gradient the same
gradient (each value is copied once; padding positions contribute zero).

- ``response_values``: ``response_from_nested``'s result (a jagged nested tensor over the responses), used by
  ``OLD_LOG_PROB_PASS=auto`` for the old log-probs (``verl_ext.patches.on_policy_update``).
- ``response_padded``: ``no_padding_2_padding``'s result (a padded ``(batch, max_response_len, ...)`` tensor), which
  verl's PPO loss computes for the new log-probs every micro batch. ``install()`` puts it in place of verl's in
  ``verl.workers.utils.losses`` (``LOSS_RESPONSE_CUT=gather``, loaded through ``VERL_USE_EXTERNAL_MODULES``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.registry import apply_if_named

LOSSES_MODULE = "verl.workers.utils.losses"
_PATCHED = "_verl_ext_response_cut"


def response_index(sequence_offsets: Any, response_offsets: Any, response_tokens: int) -> Any:
    """Packed positions whose next-token value is a response token's: sample i's response of ``len_i`` tokens ends
    its sequence at ``end_i``, so its values sit at ``end_i - len_i - 1 .. end_i - 2``. One index built on the
    device from the two offsets, no read back (``response_tokens``, the responses' total, is known on the host).
    Needs ``prompt_len_i > 0``, as verl's ``no_padding_2_padding`` asserts."""
    import torch

    lengths = response_offsets.diff()
    sample = torch.repeat_interleave(torch.arange(lengths.shape[0], device=lengths.device), lengths,
                                     output_size=response_tokens)
    position = torch.arange(response_tokens, device=lengths.device) - response_offsets[:-1][sample]
    return (sequence_offsets[1:] - 1 - lengths)[sample] + position


def response_values(sequence_values: Any, response_mask: Any) -> Any:
    """The response part of each sequence's per-token values, as verl's ``response_from_nested`` cuts it.

    ``sequence_values``: a jagged nested tensor over prompt + response (the forward's log-probs, whose token t is
    the log-prob of token t + 1); ``response_mask``: a jagged nested tensor over the responses. Sample i's
    response values are ``values[end_i - len_i - 1 : end_i - 1]``. verl's function slices each sample with
    indices read from the device, two GPU synchronizations and ~16 ops per sample (2,076 ops, 256 reads for 128
    samples); this gathers them with one index built on the device: no synchronization, ~55 ops, the same values.
    """
    import torch

    values, response_offsets = sequence_values.values(), response_mask.offsets()
    tokens = response_mask.values().shape[0]  # known on the host: no read of the offsets
    index = response_index(sequence_values.offsets(), response_offsets, tokens)
    # verl's function builds fresh offsets (as_nested_tensor); the cached length bounds spare a read later
    return torch.nested.nested_tensor_from_jagged(
        values[index], offsets=response_offsets.clone(),
        min_seqlen=getattr(response_mask, "_maybe_min_seqlen", None),
        max_seqlen=getattr(response_mask, "_maybe_max_seqlen", None))


def response_padded(tensor: Any, data: Any, verl_cut: Callable[[Any, Any], Any]) -> Any:
    """``no_padding_2_padding(tensor, data)``: each sample's response values, zero-padded to the longest response.

    For nested prompts (verl's padding-free batches) one gather replaces verl's per-sample slice and pad; its two
    checks (the values cover the sequences; no empty prompt) cost one read instead of two per sample plus two.
    Padded batches (``attention_mask`` given) go to ``verl_cut``, verl's own function.
    """
    import torch
    from verl.utils import tensordict_utils as tu

    prompt_ids, response_ids = data["prompts"], data["responses"]
    if not prompt_ids.is_nested:
        return verl_cut(tensor, data)
    values = tensor.values() if tensor.is_nested else tensor
    prompt_lens, response_lens = prompt_ids.offsets().diff(), response_ids.offsets().diff()
    ends = (prompt_lens + response_lens).cumsum(dim=0)
    max_response_len = tu.get_non_tensor_data(data=data, key="max_response_len", default=-1)
    checks = torch.stack([ends[-1], prompt_lens.eq(0).sum(), response_lens.max()]).tolist()  # the one read
    total, empty_prompts, longest = checks
    if total != values.shape[0]:
        raise ValueError(f"the forward's values cover {values.shape[0]} tokens, the batch's sequences {total}")
    if empty_prompts:
        raise ValueError(f"{empty_prompts} sample(s) with an empty prompt: the response of sample i starts at "
                         "end_i - len_i - 1, which needs prompt_len > 0 (as verl's no_padding_2_padding asserts)")
    width = max_response_len if max_response_len >= 0 else longest
    positions = torch.arange(width, device=values.device)
    valid = positions < response_lens.unsqueeze(1)  # (batch, width)
    index = (ends - response_lens - 1).unsqueeze(1) + positions  # out of range only where not valid
    gathered = values[index.clamp(0, max(values.shape[0] - 1, 0))]  # (batch, width, *value dims)
    return gathered.masked_fill(~valid.view(*valid.shape, *([1] * (values.ndim - 1))), 0)


def patch_losses(losses: ModuleType) -> None:
    """Give verl's PPO and value losses ``response_padded`` in place of ``no_padding_2_padding``."""
    if getattr(losses, _PATCHED, False):
        return
    verl_cut = losses.no_padding_2_padding
    losses.no_padding_2_padding = functools.wraps(verl_cut)(
        functools.partial(response_padded, verl_cut=verl_cut))
    setattr(losses, _PATCHED, True)


def install() -> None:
    """Patch verl's losses module now if imported, else as soon as it is."""
    after_import(LOSSES_MODULE, patch_losses)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
