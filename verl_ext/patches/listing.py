"""``verl-ext patches``: which of verl-ext's patches of verl / vLLM a train script started with the current environment
would apply, their switch, default, measured effect and evidence, and whether the installed verl / vLLM are the
versions each was written for (the train scripts' ``--dry-run`` prints the same list)."""

from __future__ import annotations

import argparse
import os
import sys

from verl_ext.patches.registry import active, listing, resolved_env, version_problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-ext patches", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 2 when the installed verl / vLLM refuse a patch the run would apply")
    args = parser.parse_args(argv)
    env = resolved_env(os.environ)
    print(listing(env))
    if args.check and any(version_problems(patch) for patch in active(env)):
        print("verl-ext patches: a patch above was written for other versions (REFUSED)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
