"""`merge-ppo` (also `verl-ext merge`): turn verl FSDP checkpoints into Hugging Face models / PEFT adapters.

    merge-ppo [checkpoint] PATH -o OUT [--step N] [--merge-lora] [--verify] ...   # PATH: experiment/step/actor dir
    merge-ppo adapter --adapter DIR -o OUT [--base DIR_OR_ID] [--verify] ...       # any PEFT adapter
    merge-ppo inspect PATH [--step N]                                              # print the layout
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import MergeError, VerificationError

SUBCOMMANDS = ("checkpoint", "adapter", "inspect")
EXIT_ERROR = 1
EXIT_VERIFY_FAILED = 3
EXIT_INTERRUPTED = 130


def _step(text: str) -> int | None:
    if text == "latest":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"step must be a number or 'latest', got {text!r}")
    return int(text)


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", "--target-dir", "--target_dir", dest="output", type=Path, required=True,
        help="output directory (created atomically; must be empty or absent unless --force)",
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "auto"],
        help="dtype of the written model weights; auto keeps the checkpoint's (default: %(default)s)",
    )
    parser.add_argument(
        "--max-shard-size", default="5GB", help="largest safetensors file, e.g. 2GB, 500MB (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    parser.add_argument(
        "--verify", action="store_true",
        help="load the result and compare its fp32 logits with a reference built from the inputs "
        "(max abs diff <= 1e-4)",
    )
    parser.add_argument(
        "--push-to-hub", metavar="REPO_ID", help="upload the output to this Hub repo (token: $HF_TOKEN)"
    )
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="allow custom model code from the config (off by default)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """Argument parser with the `checkpoint`, `adapter` and `inspect` subcommands."""
    parser = argparse.ArgumentParser(
        prog="merge-ppo",
        description="Merge verl FSDP (full or LoRA) actor checkpoints into Hugging Face models. "
        "The subcommand 'checkpoint' is the default: `merge-ppo PATH -o OUT`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ckpt = sub.add_parser("checkpoint", help="merge a verl FSDP actor checkpoint (default subcommand)")
    ckpt.add_argument(
        "path", type=Path,
        help="experiment dir (trainer.default_local_dir), a global_step_N dir, or its actor/ dir",
    )
    ckpt.add_argument(
        "--step", type=_step, default=None,
        help="step to merge when PATH is an experiment dir (default: latest, from latest_checkpointed_iteration.txt)",
    )
    ckpt.add_argument(
        "--merge-lora", action="store_true",
        help="LoRA runs: also merge the adapter into the base model (adapter goes to OUT/lora_adapter)",
    )
    ckpt.add_argument(
        "--base-model", metavar="DIR_OR_ID",
        help="LoRA runs: base model recorded in adapter_config.json; required with --merge-lora when the "
        "checkpoint holds only LoRA weights (checkpoint.save_lora_only)",
    )
    ckpt.add_argument(
        "--lora-alpha", type=float, default=None, help="LoRA alpha if lora_train_meta.json lacks it"
    )
    ckpt.add_argument(
        "--allow-unsafe-pickle", action="store_true",
        help="load shards with weights_only=False (only for trusted files that weights_only loading rejects)",
    )
    _add_output_options(ckpt)

    adapter = sub.add_parser("adapter", help="merge any PEFT LoRA adapter into its base model")
    adapter.add_argument("--adapter", required=True, metavar="DIR_OR_ID", help="PEFT adapter dir (or Hub id)")
    adapter.add_argument(
        "--base", metavar="DIR_OR_ID", help="base model dir or Hub id (default: the adapter's base_model_name_or_path)"
    )
    _add_output_options(adapter)

    inspect = sub.add_parser("inspect", help="print what a checkpoint holds, without merging")
    inspect.add_argument("path", type=Path, help="experiment, global_step_N or actor dir")
    inspect.add_argument("--step", type=_step, default=None, help="step (default: latest)")
    inspect.add_argument("--allow-unsafe-pickle", action="store_true", help=argparse.SUPPRESS)
    return parser


def _with_default_subcommand(argv: list[str]) -> list[str]:
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        return ["checkpoint", *argv]
    return argv


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt so the staging dir is cleaned up (SIGKILL cannot be caught)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted (callers such as pytest swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _configure_logging() -> None:
    """Our progress messages on stderr; other libraries' loggers are left alone."""
    logger = logging.getLogger("verl_ext.merge")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not any(isinstance(h, _CurrentStderrHandler) for h in logger.handlers):
        handler = _CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("merge-ppo: %(message)s"))
        logger.addHandler(handler)


def _run(args: argparse.Namespace) -> int:
    from . import pipeline

    if getattr(args, "no_progress", False):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()

    if args.command == "inspect":
        print(pipeline.describe_checkpoint(args.path, args.step, args.allow_unsafe_pickle))
        return 0
    common = dict(
        output=args.output,
        dtype=args.dtype,
        max_shard_size=args.max_shard_size,
        force=args.force,
        verify=args.verify,
        push_to_hub=args.push_to_hub,
        private=args.private,
        trust_remote_code=args.trust_remote_code,
        progress=not args.no_progress,
    )
    if args.command == "adapter":
        report = pipeline.merge_adapter(pipeline.AdapterMergeOptions(adapter=args.adapter, base=args.base, **common))
    else:
        report = pipeline.merge_checkpoint(
            pipeline.CheckpointMergeOptions(
                checkpoint=args.path,
                step=args.step,
                merge_lora=args.merge_lora,
                base_model=args.base_model,
                lora_alpha=args.lora_alpha,
                allow_unsafe_pickle=args.allow_unsafe_pickle,
                **common,
            )
        )
    print(report.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `merge-ppo` and `verl-ext merge`; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(_with_default_subcommand(argv))
    _configure_logging()
    try:
        with _sigterm_as_interrupt():
            return _run(args)
    except VerificationError as exc:
        print(f"merge-ppo: {exc}", file=sys.stderr)
        return EXIT_VERIFY_FAILED
    except MergeError as exc:
        print(f"merge-ppo: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("merge-ppo: interrupted (unfinished output is never moved to the output path)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
