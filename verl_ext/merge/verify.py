"""`--verify`: run the same input through the written model and a reference, compare fp32 logits.

* Full fine-tune: the written model (loaded with transformers) against a model built from the rank shards
  by a deliberately simple, non-streaming loader (`torch.cat` of the DTensor local pieces), with the
  reference weights rounded to the output dtype first so both sides hold the same numbers.
* LoRA: the exported adapter on the base weights against the PEFT model rebuilt from the raw shards; the
  merged model (`merge_and_unload`, done in fp32) against base+adapter; and the written merged model
  against the fp32 merge rounded to the output dtype (bit-identical weights expected).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor, Shard
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from .errors import MergeError, VerificationError
from .shards import load_shard_file

# Logit tolerance of a check: max(LOGIT_ATOL, LOGIT_RTOL_EPS x eps(dtype) x max |reference logit|). The logits are
# compared in float32, where a merge's rounding grows with the logits' size and the model's depth: SmolLM2-135M's
# merged LoRA (30 layers) differed by 6.4e-5, 64 % of a fixed 1e-4 (issue 44). 128 x eps(float32) = 1.5e-5
# relative (the 17 leading bits of float32's 24 agree) keeps 1e-4 for logits up to ~6.6 and scales beyond; a wrong
# weight moves logits by far more (1e-3 added to one matrix of a 30-layer test model: 2.7e-2,
# tests/test_merge_units.py).
LOGIT_ATOL = 1e-4
LOGIT_RTOL_EPS = 128
LOGIT_TOLERANCE = LOGIT_ATOL  # the floor (the tolerance of small logits)
SCALED = "scaled"  # compare(tolerance=SCALED): the tolerance above, from the reference logits
PROBE_TEXT = "Solve the puzzle step by step. The quick brown fox jumps over the lazy dog; X to move, answer 42."


def logit_tolerance(want: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[float, str]:
    """The tolerance for logits compared with ``want`` in ``dtype``, and how it was computed."""
    scale = float(want.detach().abs().max()) if want.numel() else 0.0
    eps = torch.finfo(dtype).eps
    tolerance = max(LOGIT_ATOL, LOGIT_RTOL_EPS * eps * scale)
    rule = (f"max({LOGIT_ATOL:g}, {LOGIT_RTOL_EPS} x eps({str(dtype).removeprefix('torch.')}) "
            f"x max|logit| {scale:.3g})")
    return tolerance, rule


@dataclass(frozen=True)
class Check:
    """One verification result; `tolerance=None` marks an informational number; `rule` says how the tolerance
    was computed."""

    label: str
    max_abs_diff: float
    tolerance: float | None = LOGIT_TOLERANCE
    rule: str = ""

    @property
    def passed(self) -> bool:
        return self.tolerance is None or self.max_abs_diff <= self.tolerance

    def describe(self) -> str:
        if self.tolerance is None:
            return f"{self.label}: max abs logit diff {self.max_abs_diff:.3e} (informational)"
        verdict = "OK" if self.passed else "FAILED"
        used = f"{self.tolerance:.3e} = {self.rule}" if self.rule else f"{self.tolerance:.3e}"
        share = f", {self.max_abs_diff / self.tolerance:.0%} of it" if self.tolerance > 0 else ""
        return f"{self.label}: max abs logit diff {self.max_abs_diff:.3e} (<= {used}{share}) {verdict}"


def raise_on_failure(checks: list[Check]) -> None:
    """Raise VerificationError listing every failed check."""
    failed = [c.describe() for c in checks if not c.passed]
    if failed:
        raise VerificationError("verification failed: " + "; ".join(failed))


def probe_input_ids(tokenizer_dir: Path | None, vocab_size: int, trust_remote_code: bool) -> torch.Tensor:
    """Token ids of a fixed prompt from the output's tokenizer (fixed pseudo-random ids if there is none)."""
    ids: list[int] = []
    if tokenizer_dir is not None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), trust_remote_code=trust_remote_code)
            ids = [i for i in tokenizer(PROBE_TEXT)["input_ids"] if 0 <= i < vocab_size]
        except (OSError, ValueError, KeyError, TypeError):
            ids = []
    if len(ids) < 8:
        ids = [(7919 * k + 13) % vocab_size for k in range(24)]
    return torch.tensor([ids], dtype=torch.long)


@torch.no_grad()
def fp32_logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits of `model` (cast to float32 in place) for `input_ids`."""
    model.float().eval()
    return model(input_ids=input_ids).logits.float()


def compare(label: str, got: torch.Tensor, want: torch.Tensor, tolerance: float | str | None = SCALED) -> Check:
    """Max abs difference of two logit tensors, against ``tolerance``: SCALED (default: ``logit_tolerance`` of
    ``want`` in float32), a fixed number, or None (informational)."""
    if got.shape != want.shape:
        raise VerificationError(f"{label}: logits shapes differ {tuple(got.shape)} vs {tuple(want.shape)}")
    diff = (got.float() - want.float()).abs().max()
    if not torch.isfinite(diff):  # NaN compares False against any tolerance: fail it explicitly
        return Check(label, float("inf"), 0.0 if tolerance is not None else None, "logits are not finite")
    if tolerance == SCALED:
        value, rule = logit_tolerance(want)
        return Check(label, float(diff), value, rule)
    return Check(label, float(diff), None if tolerance is None else float(tolerance))


def load_written_model(model_dir: Path, trust_remote_code: bool) -> PreTrainedModel:
    """Load a written model with plain transformers, as a user would, in float32."""
    try:
        return AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32, trust_remote_code=trust_remote_code
        ).eval()
    except (OSError, ValueError, RuntimeError) as exc:
        raise VerificationError(f"transformers cannot load the written model in {model_dir}: {exc}") from exc


def load_reference_state_dict(
    model_files: tuple[Path, ...],
    allow_unsafe_pickle: bool,
    round_to: torch.dtype | None = None,
    tied_aliases: dict[str, str] | None = None,
) -> dict[str, torch.Tensor]:
    """Full state dict straight from the rank shards: every rank loaded, DTensor pieces concatenated.

    Floating tensors are cast to `round_to` (if given). Tied aliases (e.g. `lm_head.weight` ->
    `model.embed_tokens.weight`) are left out after checking that they equal their canonical tensor, since
    only one copy is written. Independent of the streaming merge on purpose (no ShardReader, no writer).
    """
    states = [load_shard_file(p, allow_unsafe_pickle=allow_unsafe_pickle) for p in model_files]
    tied_aliases = tied_aliases or {}

    def local_pieces(name: str) -> list[torch.Tensor]:
        value = states[0][name]
        if isinstance(value, DTensor) and isinstance(value.placements[-1], Shard):
            mesh = value.device_mesh.mesh
            replica_ranks = mesh.reshape(-1, mesh.shape[-1])[0].tolist()  # HSDP: first replica group
            return [states[r][name]._local_tensor for r in replica_ranks]
        return [value._local_tensor if isinstance(value, DTensor) else value]

    full: dict[str, torch.Tensor] = {}
    for name, value in states[0].items():
        canonical = tied_aliases.get(name)
        if canonical is not None and canonical in states[0]:
            if not all(torch.equal(a, b) for a, b in zip(local_pieces(name), local_pieces(canonical))):
                raise VerificationError(f"tied weights differ in the checkpoint: {name!r} != {canonical!r}")
            continue
        pieces = local_pieces(name)
        if round_to is not None and pieces[0].is_floating_point():
            pieces = [piece.to(round_to) for piece in pieces]
        dim = value.placements[-1].dim if len(pieces) > 1 else 0
        full[name] = torch.cat(pieces, dim=dim) if len(pieces) > 1 else pieces[0].clone()
    return full


def assert_same_weights(
    written: PreTrainedModel, source: dict[str, torch.Tensor], dtypes: dict[str, torch.dtype], label: str
) -> int:
    """Check that every tensor of the written model equals `source[name]` cast to `dtypes[name]`, bit for bit;
    returns the number compared."""
    state = written.state_dict()
    compared = 0
    for name, dtype in dtypes.items():
        if name not in state:
            raise VerificationError(f"{label}: written model lacks {name!r}")
        if not torch.equal(state[name].to(dtype), source[name].to(dtype)):
            diff = float((state[name].float() - source[name].float()).abs().max())
            raise VerificationError(f"{label}: {name!r} differs (max abs diff {diff:.3e})")
        compared += 1
    if compared == 0:
        raise MergeError(f"{label}: nothing to compare")
    return compared
