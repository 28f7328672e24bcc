"""Cut each response's per-token values out of a packed forward with one gather on the device.

verl 0.9.1's actor forward returns per-token values (log-probs) for whole packed sequences, prompt + response.
Its loss and its trainer cut the response part out sample by sample, slicing with indices they read back from
the GPU (``verl.workers.utils.padding``): every read is a synchronization, so for the 1,024 samples of a
128 x 8 step the update waits on the GPU thousands of times and issues ~25 ops per sample. The functions here
build one index on the device and gather: the same values, and for values that carry a gradient the same
gradient (each value is copied once; padding positions contribute zero).

- ``response_index``: the packed positions of the responses' values, used by ``LM_HEAD_POSITIONS=response``
  (``verl_ext.patches.response_logits``) to compute the LM head at those positions only.
- ``response_values``: ``response_from_nested``'s result (a jagged nested tensor over the responses), used by
  ``OLD_LOG_PROB_PASS=auto`` for the old log-probs (``verl_ext.patches.on_policy_update``).

Not a patch itself: importing it changes nothing of verl. (The same gather in place of verl's per-sample cut in its
PPO loss, ``LOSS_RESPONSE_CUT=gather``, did not pay as a default and was removed under issue 46;
``verl_ext/patches/registry.py`` REMOVED says why, git history keeps it.)
"""

from __future__ import annotations

from typing import Any

LOSSES_MODULE = "verl.workers.utils.losses"  # verl's losses module, which on_policy_update patches


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
