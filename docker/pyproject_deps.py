"""Print the requirements of pyproject.toml (base dependencies plus the given extras), one per line.

The Docker image installs these in a cached layer before the source is copied, so a source edit does not
re-download the stack. The list is computed from pyproject.toml at build time: there is no second copy of it.

    python docker/pyproject_deps.py pyproject.toml --extra vllm > /tmp/requirements.txt
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """Base dependencies followed by each extra's, in pyproject order; unknown extras raise ValueError."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise ValueError(f"unknown extra(s) {unknown}; pyproject.toml defines {sorted(optional)}")
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += optional[extra]
    return reqs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--extra", action="append", default=[], help="optional-dependencies group (repeatable)")
    args = parser.parse_args(argv)
    try:
        reqs = requirements(args.pyproject, args.extra)
    except ValueError as exc:
        print(f"pyproject_deps: {exc}", file=sys.stderr)
        return 2
    print("\n".join(reqs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
