"""Import the standalone scripts under bench/ (not a package: they run as ``python bench/<name>.py``) in tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_bench_script(name: str) -> ModuleType:
    """Load ``bench/<name>.py`` as module ``name`` (registered in sys.modules so dataclasses/pickling work), with
    bench/ on sys.path as when the script runs (bench scripts import each other)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.append(str(REPO / "bench"))  # last: a bench module must not shadow an installed one
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
