"""The LM head and the token log-probs computed only where they are read: the positions that predict a response.

verl 0.9.1's fused log-prob forward (``use_fused_kernels``; ``verl.utils.experimental.torch_functional``
``FusedLinearForPPO``) projects every packed token onto the vocabulary, prompt tokens included, and computes each
token's log-prob and entropy in fp32, 512 tokens at a time, then again in the backward. Every consumer reads only
the response part: verl's PPO loss and the trainer cut the responses out (``no_padding_2_padding``,
``response_from_nested``), and the prompt positions get a zero gradient. TRL computes its logits for the completion
tokens only (``logits_to_keep``). At the smoke load (145-token prompts, 60-token responses) 71 % of that work is on
prompt positions; at the realistic load (~330-token responses) about 30 %.

``install()`` patches two places of verl:

- ``FSDPEngineWithLMHead.forward_step`` records, for the micro batch it runs, where each response's log-probs sit
  in the packed sequence (when the micro batch is padding-free, fused, without Ulysses sequence parallelism or
  top-k distillation, and each packed sequence is its ``prompts`` row then its ``responses`` row; otherwise
  nothing, and verl's head runs as before: an SFT batch, for one, has no ``responses``).
- ``FusedLinearForPPO.forward`` (verl's ``torch`` and ``liger`` backends) then runs verl's own head on those rows
  only and puts the results back at their packed positions; the other positions hold 0. The response values and
  the gradients are verl's, up to the rounding of matrix products over fewer rows.

verl's ``triton`` backend (``FUSED_KERNELS_BACKEND=triton``) is not patched. Loaded as
``verl_ext.patches.response_logits`` through ``VERL_USE_EXTERNAL_MODULES`` (``LM_HEAD_POSITIONS=response``).
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from verl_ext.patches.import_hook import after_import
from verl_ext.patches.response_cut import response_index
from verl_ext.patches.registry import apply_if_named

ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
HEAD_MODULE = "verl.utils.experimental.torch_functional"
_PATCHED = "_verl_ext_response_logits"


@dataclass(frozen=True)
class ResponseLayout:
    """Where the responses sit in a padding-free micro batch: the packed sequences' offsets (prompt + response),
    the responses' offsets, and the counts of both that the host knows without reading the device."""

    sequence_offsets: Any
    response_offsets: Any
    sequence_tokens: int
    response_tokens: int


_LAYOUT: contextvars.ContextVar[ResponseLayout | None] = contextvars.ContextVar("verl_ext_response_layout",
                                                                                 default=None)


def layout_of(engine: Any, micro_batch: Any) -> ResponseLayout | None:
    """The micro batch's response layout when verl's fused head would see its packed sequence whole, else None."""
    from verl.utils import tensordict_utils as tu

    def flag(key: str, default: Any) -> Any:
        return tu.get_non_tensor_data(data=micro_batch, key=key, default=default)

    if not (flag("use_remove_padding", True) and flag("use_fused_kernels", False)) \
            or flag("distillation_use_topk", False) or getattr(engine, "use_ulysses_sp", False):
        return None
    keys = micro_batch.keys()
    if not all(key in keys for key in ("input_ids", "prompts", "responses")):
        return None  # e.g. an SFT batch, whose loss reads the log-probs wherever its loss_mask says
    sequences, prompts, responses = micro_batch["input_ids"], micro_batch["prompts"], micro_batch["responses"]
    if not all(getattr(tensor, "is_nested", False) for tensor in (sequences, prompts, responses)):
        return None
    sequence_tokens, response_tokens = int(sequences.values().shape[0]), int(responses.values().shape[0])
    if int(prompts.values().shape[0]) + response_tokens != sequence_tokens:
        return None  # not prompt + response per sample: keep verl's head over every position
    return ResponseLayout(sequences.offsets(), responses.offsets(), sequence_tokens, response_tokens)


def head_at_responses(layout: ResponseLayout, head: Callable[..., tuple[Any, Any]], hidden_states: Any,
                      vocab_weights: Any, input_ids: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``head(hidden_states, vocab_weights, input_ids, ...)`` -> (log_probs, entropy) over every position, computed
    at the layout's response positions only; the other positions get 0 (and no gradient)."""
    shape = input_ids.shape
    tokens = shape.numel()
    index = response_index(layout.sequence_offsets.to(hidden_states.device),
                           layout.response_offsets.to(hidden_states.device), layout.response_tokens)
    index = index.clamp(0, max(tokens - 1, 0))  # an out-of-range index would be a device-side assert
    rows = hidden_states.reshape(tokens, hidden_states.shape[-1]).index_select(0, index)
    log_probs, entropy = head(rows, vocab_weights, input_ids.reshape(tokens).index_select(0, index), *args, **kwargs)
    return (log_probs.new_zeros(tokens).index_copy(0, index, log_probs).view(shape),
            entropy.new_zeros(tokens).index_copy(0, index, entropy).view(shape))


def patch_head(torch_functional: ModuleType) -> None:
    """Make ``FusedLinearForPPO.forward`` compute at the recorded response positions when there are any."""
    fused = torch_functional.FusedLinearForPPO
    if getattr(fused, _PATCHED, False):
        return
    verl_forward = fused.forward

    @functools.wraps(verl_forward)
    def forward(self: Any, hidden_states: Any, vocab_weights: Any, input_ids: Any, *args: Any, **kwargs: Any):
        layout = _LAYOUT.get()
        # a head call that is not the recorded micro batch's whole packed sequence keeps verl's
        if layout is None or input_ids.shape.numel() < layout.sequence_tokens or layout.response_tokens == 0:
            return verl_forward(self, hidden_states, vocab_weights, input_ids, *args, **kwargs)
        return head_at_responses(layout, functools.partial(verl_forward, self), hidden_states, vocab_weights,
                                 input_ids, *args, **kwargs)

    fused.forward = forward
    setattr(fused, _PATCHED, True)


def patch_engine(transformer_impl: ModuleType) -> None:
    """Make ``FSDPEngineWithLMHead.forward_step`` record its micro batch's response layout for the head."""
    engine_class = transformer_impl.FSDPEngineWithLMHead
    if getattr(engine_class, _PATCHED, False):
        return
    verl_step = engine_class.forward_step

    @functools.wraps(verl_step)
    def forward_step(self: Any, micro_batch: Any, loss_function: Any, forward_only: Any):
        token = _LAYOUT.set(layout_of(self, micro_batch))
        try:
            return verl_step(self, micro_batch, loss_function, forward_only)
        finally:
            _LAYOUT.reset(token)

    engine_class.forward_step = forward_step
    setattr(engine_class, _PATCHED, True)


def install() -> None:
    """Patch verl's FSDP engine and fused head now where imported, else as soon as they are."""
    after_import(HEAD_MODULE, patch_head)
    after_import(ENGINE_MODULE, patch_engine)


# verl imports this module by name (VERL_USE_EXTERNAL_MODULES): check the versions, then apply
apply_if_named(__name__, install)
