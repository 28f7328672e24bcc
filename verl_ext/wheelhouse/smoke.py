"""`smoke`: import the target's key modules from the install dir, in a fresh interpreter with the target env.

Prints one line per module (ok / FAIL, version, seconds) and every import of a skipped package that was
attempted on the way (and by which file), so a skip is confirmed at run time, not only statically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.install import MARKER

Log = Callable[[str], None]

# Runs in the child interpreter: argv[1] = JSON {"modules": [...], "skipped": [...]}.
_CHILD = r"""
import importlib, importlib.abc, json, sys, time, traceback
spec = json.loads(sys.argv[1])
skipped, attempts = set(spec["skipped"]), {}

class Recorder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in skipped and name not in attempts:
            where, frame = [], sys._getframe(1)
            while frame is not None and len(where) < 3:
                file = frame.f_code.co_filename
                if "importlib" not in file and not file.startswith("<"):
                    where.append(f"{file}:{frame.f_lineno}")
                frame = frame.f_back
            attempts[name] = where
        return None

sys.meta_path.insert(0, Recorder())
failed = 0
for name in spec["modules"]:
    start = time.time()
    try:
        module = importlib.import_module(name)
        version = getattr(module, "__version__", "")
        print(f"ok   {name:<52} {str(version):<10} {time.time() - start:5.1f} s", flush=True)
    except BaseException as exc:
        failed += 1
        print(f"FAIL {name:<52} {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc(limit=-4)
loaded = sorted({m.split(".")[0] for m in sys.modules} & skipped)
for name, where in sorted(attempts.items()):
    print(f"attempted import of skipped {name}: " + " <- ".join(where), flush=True)
print(f"skipped packages loaded: {loaded or 'none'}", flush=True)
sys.exit(1 if failed else 0)
"""


def child_env(manifest: dict[str, Any], site: Path) -> dict[str, str]:
    """os.environ plus the target env of the manifest ("{site}" replaced by the install dir)."""
    env = dict(os.environ)
    target_env = ((manifest.get("target") or {}).get("env")) or {"PYTHONPATH": "{site}"}
    env.update({k: str(v).replace("{site}", str(site)) for k, v in target_env.items()})
    return env


def smoke(
    site: Path,
    *,
    modules: list[str] | None = None,
    python: str = sys.executable,
    log: Log = print,
) -> int:
    """Import `modules` (default: the target's [smoke] list) from the install dir `site`; returns the exit code."""
    marker = site / MARKER
    if not marker.is_file():
        raise WheelhouseError(f"{marker} is missing: run `install --target-dir {site}` first")
    manifest = {"target": json.loads(marker.read_text(encoding="utf-8")).get("target")}
    target = manifest.get("target") or {}
    modules = modules or list(target.get("smoke_imports") or [])
    if not modules:
        raise WheelhouseError(f"{marker}: the target lists no smoke imports; pass --module")
    spec = json.dumps({"modules": modules, "skipped": list(target.get("skipped_imports") or [])})
    proc = subprocess.Popen(
        [python, "-c", _CHILD, spec], env=child_env(manifest, site), cwd=site.parent,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        log(line.rstrip("\n"))
    return proc.wait()
