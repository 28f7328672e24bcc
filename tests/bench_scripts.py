"""Import the standalone scripts under bench/ (not a package: they run as ``python bench/<purpose>/<name>.py``) in
tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def bench_script(name: str) -> Path:
    """The path of ``bench/<purpose>/<name>.py`` (bench/README.md lists the purpose folders)."""
    found = sorted((REPO / "bench").glob(f"*/{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"bench/*/{name}.py: {len(found)} matches, expected one")
    return found[0]


def load_bench_script(name: str) -> ModuleType:
    """Load ``bench/<purpose>/<name>.py`` as module ``name`` (registered in sys.modules so dataclasses/pickling
    work), with its folder on sys.path as when the script runs (bench scripts import the ones beside them)."""
    path = bench_script(name)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))  # last: a bench module must not shadow an installed one
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
