"""Merge verl FSDP actor checkpoints (full fine-tune or LoRA) into Hugging Face models and PEFT adapters.

Command line: `merge-ppo` / `verl-ext merge` (see `verl_ext.merge.cli`, docs/merge.md). Python API::

    from verl_ext.merge import CheckpointMergeOptions, merge_checkpoint
    report = merge_checkpoint(CheckpointMergeOptions(checkpoint=Path("checkpoints/exp"), output=Path("out")))
"""

from .errors import MergeError, VerificationError

__all__ = [
    "AdapterMergeOptions",
    "CheckpointMergeOptions",
    "MergeError",
    "MergeReport",
    "VerificationError",
    "describe_checkpoint",
    "merge_adapter",
    "merge_checkpoint",
]


def __getattr__(name: str):
    # Imported lazily: the pipeline pulls in torch/transformers/peft, which `--help` does not need.
    if name in __all__:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
