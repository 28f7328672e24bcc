"""GGUF -> Hugging Face folder: transformers' GGUF loader, the special-token fix, safetensors, provenance.

The folder is built in a hidden sibling staging dir and renamed into place at the end (`verl_ext.merge.io`, the
same rules as merge-ppo): a non-empty target is refused unless `force`, and a crash leaves the target as it was.
Remote code is never trusted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from . import PretrainedError
from .fetch import GGUFFile
from .provenance import write_provenance
from .sources import GGUFWheelSource
from .tokens import check_folder, fix_special_tokens

DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
EXTRA_HINT = 'pip install -e ".[smollm2]"  (or: pip install gguf==0.19.0 "accelerate>=1.0")'


@dataclass
class Conversion:
    """What was written, with the model's shape and the time each stage took."""

    out: Path
    dtype: str
    parameters: int
    layers: int
    vocab: int
    architecture: str
    token_ids: dict[str, int]
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"{self.out}: {self.architecture}, {self.parameters / 1e6:.1f}M parameters, {self.layers} layers, "
                f"vocab {self.vocab}, {self.dtype}; eos {self.token_ids['eos']}, pad {self.token_ids['pad']}, "
                f"bos {self.token_ids['bos']}")


def check_dependencies() -> None:
    """transformers' GGUF loader needs `gguf` and `accelerate`; say how to get them before anything loads."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise PretrainedError(f"converting a GGUF needs {' and '.join(missing)}, not installed here: {EXTRA_HINT}")


def torch_dtype(name: str) -> Any:
    """`bf16` / `fp32` -> the torch dtype; anything else is an error naming it."""
    import torch

    if name not in DTYPES:
        raise PretrainedError(f"--dtype {name!r}: choose from {', '.join(DTYPES)}")
    return getattr(torch, DTYPES[name])


def provenance_record(source: GGUFWheelSource, gguf: GGUFFile, conversion: Conversion, before: dict[str, Any],
                      command: str) -> dict[str, Any]:
    """Everything the provenance note says, as JSON."""
    import torch
    import transformers

    tokens = {role: {"token": getattr(source.tokens, role), "id": conversion.token_ids[role]}
              for role in ("bos", "eos", "pad")}
    return {
        "model": source.title,
        "upstream": source.upstream,
        "package": source.package,
        "version": source.version,
        "wheel_file": source.wheel_file,
        "wheel_sha256": source.wheel_sha256 if gguf.wheel is not None else None,
        "source_origin": gguf.origin,
        "gguf_member": source.member,
        "gguf_sha256": source.member_sha256,
        "license": source.license,
        "license_file": "LICENSE" if gguf.license_file is not None else None,
        "quantization": source.quantization,
        "weights": f"de-quantized from {source.quantization}",
        "dtype": conversion.dtype,
        "architecture": conversion.architecture,
        "parameters": conversion.parameters,
        "layers": conversion.layers,
        "vocab_size": conversion.vocab,
        "special_tokens": tokens,
        "special_tokens_gguf": before,
        "transformers_version": transformers.__version__,
        "gguf_version": dist_version("gguf"),
        "torch_version": torch.__version__,
        "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
    }


def _readable(folder: Path) -> None:
    """Files as the umask allows (transformers writes the weights 0600): a shared or container user can read them."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def convert(source: GGUFWheelSource, gguf: GGUFFile, out: Path, dtype: str, force: bool, command: str) -> Conversion:
    """Load the GGUF with transformers, fix the special tokens, save safetensors + tokenizer + provenance into
    `out` atomically, and check the saved folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..merge.io import staged_output

    check_dependencies()
    seconds: dict[str, float] = {}
    folder, name = str(gguf.path.parent), gguf.path.name
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype(dtype),
                                                 trust_remote_code=False)
    seconds["load"] = time.perf_counter() - start
    before = {"eos": tokenizer.eos_token, "pad": tokenizer.pad_token}
    ids = fix_special_tokens(tokenizer, model, source.tokens, source.model_max_length)
    config = model.config
    conversion = Conversion(out=Path(out), dtype=DTYPES[dtype], parameters=sum(p.numel() for p in model.parameters()),
                            layers=int(config.num_hidden_layers), vocab=int(config.vocab_size),
                            architecture=type(model).__name__, token_ids=ids)
    start = time.perf_counter()
    with staged_output(Path(out), force) as stage:
        model.save_pretrained(stage)
        tokenizer.save_pretrained(stage)
        if gguf.license_file is not None:
            shutil.copyfile(gguf.license_file, stage / "LICENSE")
        check_folder(stage, source.tokens, ids)
        write_provenance(stage, provenance_record(source, gguf, conversion, before, command))
        _readable(stage)
    seconds["save"] = time.perf_counter() - start
    conversion.seconds = seconds
    return conversion
