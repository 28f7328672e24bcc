"""Copy the non-weight files of a Hugging Face model dir (config, tokenizer, generation config, custom code)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from transformers import GenerationConfig, PretrainedConfig

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
WEIGHT_INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
GENERATION_CONFIG_NAME = "generation_config.json"
# A model dir holding adapter_config.json is taken for a PEFT adapter by transformers' from_pretrained.
ADAPTER_FILE_NAMES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def copy_non_weight_files(src_dir: Path, dst_dir: Path, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy top-level files of `src_dir` except weights and `skip`; returns the copied names."""
    copied = []
    for path in sorted(Path(src_dir).iterdir()):
        name = path.name
        if not path.is_file() or name in skip or name in WEIGHT_INDEX_NAMES or name.endswith(WEIGHT_SUFFIXES):
            continue
        shutil.copy2(path, Path(dst_dir) / name)
        copied.append(name)
    return copied


def write_model_metadata(hf_dir: Path, out_dir: Path, config: PretrainedConfig, dtype: torch.dtype) -> None:
    """Write config.json (with `dtype`), the tokenizer files and a generation config into `out_dir`.

    The generation config comes from the checkpoint when verl saved one (it copies the base model's), else it
    is derived from the model config, as `save_pretrained` would.
    """
    copy_non_weight_files(hf_dir, out_dir, skip=("config.json", *ADAPTER_FILE_NAMES))
    config = copy.deepcopy(config)
    config.dtype = dtype
    config.save_pretrained(str(out_dir))
    if not (out_dir / GENERATION_CONFIG_NAME).exists():
        GenerationConfig.from_model_config(config).save_pretrained(str(out_dir))


def copy_tokenizer_files(src_dir: Path, dst_dir: Path) -> list[str]:
    """Copy tokenizer/processor files (everything but weights, adapter files, config and generation config)."""
    return copy_non_weight_files(src_dir, dst_dir, skip=("config.json", GENERATION_CONFIG_NAME, *ADAPTER_FILE_NAMES))
