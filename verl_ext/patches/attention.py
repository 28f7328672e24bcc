"""Padding-free attention for verl's packed micro batches without flash-attn: PyTorch's own varlen kernel.

With ``use_remove_padding`` verl packs a micro batch's sequences into one row and relies on the attention to keep
them apart. transformers does that only with flash-attn, a CUDA extension that has to be built for the exact
torch; under SDPA a packed row gets one L x L block mask and attention spans the whole pack, so the scripts ran
padded rows instead (every row padded to the longest one of its micro batch). This module registers
``torch_varlen`` with transformers' attention and mask interfaces: ``torch.nn.attention.varlen.varlen_attn``
(the FlashAttention-2 kernel that ships inside PyTorch >= 2.10) over the sequence boundaries read off
``position_ids``, each sequence restarting at 0, as transformers' flash-attention path reads them.

Import it before the model is built (verl: ``actor_rollout_ref.model.external_lib=verl_ext.patches.attention``; the train
scripts set it with ``ATTN_IMPLEMENTATION=torch_varlen``), then load the model with
``attn_implementation="torch_varlen"``. Inputs with a padding mask or a KV cache (generation) take transformers'
SDPA path unchanged; on a CPU the packed path runs SDPA once per sequence (same result, for tests).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

ATTN_IMPLEMENTATION = "torch_varlen"

VarlenKernel = Callable[..., torch.Tensor]


def varlen_kernel() -> VarlenKernel:
    """PyTorch's varlen attention (torch >= 2.10), or a clear error naming the installed torch."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as error:
        raise RuntimeError(
            f"attn_implementation={ATTN_IMPLEMENTATION!r} needs torch.nn.attention.varlen (PyTorch >= 2.10); this "
            f"is torch {torch.__version__}: use ATTN_IMPLEMENTATION=sdpa (or flash_attention_2 with flash-attn)"
        ) from error
    return varlen_attn


class _LastBoundaries:
    """The boundaries of the last position_ids seen: every layer of a forward (and its activation-checkpointing
    recompute) gets the same tensor, so they are read once per forward. Reading them waits for the GPU
    (``nonzero``, the longest length as a Python int); once per layer that stalled the kernel queue and ate the
    packing's gain (H100, 128 x 8 x 512: update 22.5-26.4 s against 20-22 s padded)."""

    def __init__(self) -> None:
        self.source: weakref.ref | None = None
        self.version = -1
        self.value: tuple[torch.Tensor, int] | None = None

    def get(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, int] | None:
        same = self.source is not None and self.source() is position_ids and self.version == position_ids._version
        return self.value if same else None

    def put(self, position_ids: torch.Tensor, value: tuple[torch.Tensor, int]) -> None:
        self.source, self.version, self.value = weakref.ref(position_ids), position_ids._version, value


_last_boundaries = _LastBoundaries()


def sequence_boundaries(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cumulative sequence starts (int32, from 0 to the token count) and the longest sequence's length.

    Rows are flattened; a sequence starts wherever its position is 0 (verl's packed rows, verl's trailing pad
    segment, and each row of an unpacked batch), and the first token always starts one.
    """
    if position_ids.dim() != 2:
        raise ValueError(
            f"attn_implementation={ATTN_IMPLEMENTATION!r} reads sequence boundaries from (batch, seq) position_ids; "
            f"got shape {tuple(position_ids.shape)} (multimodal rope?): use ATTN_IMPLEMENTATION=sdpa for this model"
        )
    cached = _last_boundaries.get(position_ids)
    if cached is not None:
        return cached
    flat = position_ids.reshape(-1)
    starts = flat == 0
    starts[0] = True
    start_index = starts.nonzero().flatten().to(torch.int32)
    cu_seqlens = F.pad(start_index, (0, 1), value=flat.numel())  # the end, without a host-to-device copy
    boundaries = cu_seqlens, int(cu_seqlens.diff().max())
    _last_boundaries.put(position_ids, boundaries)
    return boundaries


def per_sequence_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                      *, scale: float | None) -> torch.Tensor:
    """Causal attention of each packed sequence on its own with SDPA: the packed path off CUDA (tests, CPU)."""
    bounds = cu_seqlens.tolist()
    outputs = []
    for start, end in zip(bounds, bounds[1:]):
        # (tokens, heads, dim) -> (1, heads, tokens, dim) and back
        q, k, v = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)[0].transpose(0, 1))
    return torch.cat(outputs)


@torch.compiler.disable
def packed_causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, position_ids: torch.Tensor,
                            *, scale: float | None, kernel: VarlenKernel | None = None) -> torch.Tensor:
    """Causal attention within each sequence of packed rows.

    query: (batch, heads, seq, dim); key/value: (batch, heads, seq, dim) (key-value heads already repeated).
    Returns (batch, seq, heads, dim), the layout transformers' attention functions return. Runs eagerly inside a
    compiled decoder layer (``verl_ext.patches.compiled_layers``): the boundaries are read back from the device and cached
    in Python, which a graph cannot hold.
    """
    batch, heads, seq, dim = query.shape
    cu_seqlens, longest = sequence_boundaries(position_ids)
    q, k, v = (t.transpose(1, 2).reshape(batch * seq, heads, dim) for t in (query, key, value))
    if kernel is None and not query.is_cuda:
        out = per_sequence_sdpa(q, k, v, cu_seqlens, scale=scale)
    else:
        kernel = kernel or varlen_kernel()
        # window (-1, 0): everything before the token and nothing after it, i.e. causal (torch's convention)
        out = kernel(q, k, v, cu_seqlens, cu_seqlens, longest, longest, scale=scale, window_size=(-1, 0))
    return out.view(batch, seq, heads, dim)


def varlen_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             sliding_window: int | None = None, position_ids: torch.Tensor | None = None,
                             **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention function for ``attn_implementation="torch_varlen"``."""
    if attention_mask is not None or query.shape[2] != key.shape[2]:
        # a padding mask (see varlen_mask) or a KV cache: transformers' own SDPA path, with its mask
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      sliding_window=sliding_window, position_ids=position_ids, **kwargs)
    if dropout:
        raise ValueError(f"attn_implementation={ATTN_IMPLEMENTATION!r} has no attention dropout (got {dropout}); "
                         "set the model's attention_dropout to 0 or use ATTN_IMPLEMENTATION=sdpa")
    if not kwargs.get("is_causal", getattr(module, "is_causal", True)):
        raise ValueError(f"attn_implementation={ATTN_IMPLEMENTATION!r} covers causal (decoder) attention; "
                         f"{type(module).__name__} is bidirectional: use ATTN_IMPLEMENTATION=sdpa for this model")
    if sliding_window is not None:
        raise ValueError(f"attn_implementation={ATTN_IMPLEMENTATION!r} covers full causal attention; layer "
                         f"{getattr(module, 'layer_idx', '?')} has a sliding window of {sliding_window}: use "
                         "ATTN_IMPLEMENTATION=sdpa for this model")
    batch, _, seq, _ = query.shape
    if position_ids is None:
        position_ids = torch.arange(seq, device=query.device).expand(batch, seq)
    n_rep = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    return packed_causal_attention(query, key, value, position_ids, scale=scaling), None


def varlen_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                mask_function: Callable = causal_mask_function, attention_mask: torch.Tensor | None = None,
                **kwargs) -> torch.Tensor | None:
    """No mask where the attention reads sequence boundaries from position_ids (no padding, no cache, which
    covers verl's packed rows); otherwise SDPA's mask for the SDPA path of ``varlen_attention_forward``."""
    unpadded = attention_mask is None or bool(attention_mask.all())
    if unpadded and q_length == kv_length and not q_offset and not kv_offset:
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask, **kwargs)


def register() -> None:
    """Make ``attn_implementation="torch_varlen"`` known to transformers in this process (idempotent)."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, varlen_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, varlen_mask)


register()
