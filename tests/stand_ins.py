"""Stand-ins for modules that do not install on the CPU machines (vLLM): a package tree on a folder to put first on
``PYTHONPATH``, holding one module with the names and behaviour a patch relies on."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_stand_in(root: Path, module: str, source: str) -> Path:
    """Write ``source`` as the dotted ``module`` under ``root`` (every parent a package) and return ``root``."""
    *packages, name = module.split(".")
    folder = root.joinpath(*packages)
    folder.mkdir(parents=True, exist_ok=True)
    for depth in range(1, len(packages) + 1):
        root.joinpath(*packages[:depth], "__init__.py").touch()
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return root
