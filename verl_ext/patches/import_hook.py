"""Patch a module right after it is imported, without importing it early (``after_import``).

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` from ``verl/__init__.py``, before any of verl's
submodules: too early to import the module a patch is for (verl is half-initialised, and a process that never
uses the module would pay for its import). ``after_import(name, patch)`` runs ``patch(module)`` as soon as the
module has executed, or at once if it already has. The patch runs before the importing statement gets its
names, so ``from module import function`` elsewhere binds the patched function.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Sequence

Patch = Callable[[ModuleType], Any]

_PENDING: dict[str, list[Patch]] = {}
_state = threading.local()


def after_import(name: str, patch: Patch) -> None:
    """Run ``patch(module)`` once module ``name`` has been executed: now if it is imported, else on its import."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    _PENDING.setdefault(name, []).append(patch)
    if not any(isinstance(finder, _PatchAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())


def pending() -> dict[str, int]:
    """Module names still waiting for their import, with how many patches each."""
    return {name: len(patches) for name, patches in _PENDING.items()}


def uninstall() -> None:
    """Forget the patches not yet run and remove the import hook (patches already run stay)."""
    _PENDING.clear()
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _PatchAfterImport)]


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds a pending module with the other finders and wraps its loader so the patches run after it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) \
            -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PENDING or getattr(_state, "finding", False):
            return None
        _state.finding = True  # a finder that asks importlib again must not land back here
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                    return spec
            return None
        finally:
            _state.finding = False


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then the module's pending patches."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for patch in _PENDING.pop(module.__name__, []):
            patch(module)
        if not _PENDING:
            uninstall()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self._loader, name)
