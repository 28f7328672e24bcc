"""`install`: verify the chunks, reassemble and untar them, then one offline `pip install --target`.

All files go to pip in one call (`--no-index --no-deps --no-compile --no-build-isolation --upgrade`): the sdists
are built against the image's setuptools, and one call keeps every package's scripts in the same `bin/`.
Then `compileall` writes the bytecode of the whole target on every core (pip's own compile step is serial): a
process that imports verl, vLLM and transformers from source files without `.pyc` compiles them again every
time, and images that set PYTHONDONTWRITEBYTECODE=1 (the lent GPU machine's does) never cache it.
A marker file in the target dir records the installed tar's sha256, so a repeated install is a no-op.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.chunks import extract, load_manifest, verify

MARKER = ".wheelhouse-installed.json"
Log = Callable[[str], None]


def pip_install_command(python: str, target_dir: Path, files: list[Path]) -> list[str]:
    """The offline pip command: wheels first, then sdists, all in one call."""
    ordered = sorted(files, key=lambda p: (not p.name.endswith(".whl"), p.name))
    return [
        python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-build-isolation",
        "--upgrade", "--disable-pip-version-check", "--target", str(target_dir), *map(str, ordered),
    ]  # fmt: skip


def compile_bytecode_command(python: str, target_dir: Path) -> list[str]:
    """`compileall` over the install dir with one worker per core, printing only the files it cannot compile."""
    return [python, "-m", "compileall", "-q", "-j", "0", str(target_dir)]


def compile_bytecode(python: str, target_dir: Path, log: Log = print) -> float:
    """Write `.pyc` files for everything under `target_dir`; returns the seconds it took.

    Some wheels ship files that are not valid Python for this interpreter (templates, test data); compileall
    reports them and carries on, so a non-zero exit is logged with its first lines, not raised."""
    t0 = time.monotonic()
    proc = subprocess.run(compile_bytecode_command(python, target_dir), capture_output=True, text=True, check=False)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        shown = "\n  ".join(lines[:6])
        log(f"compileall: {len(lines)} line(s) of complaints (files that are not Python for {python}), e.g.:\n  {shown}")
    log(f"bytecode written in {seconds:.1f} s")
    return seconds


def env_lines(manifest: dict[str, Any], target_dir: Path) -> list[str]:
    """`KEY=value` lines of the target's env with "{site}" replaced by the install dir."""
    env = ((manifest.get("target") or {}).get("env")) or {"PYTHONPATH": "{site}"}
    return [f"{k}={str(v).replace('{site}', str(target_dir))}" for k, v in env.items()]


def _check_build_tools(python: str, sdists: list[Path]) -> None:
    if not sdists:
        return
    proc = subprocess.run([python, "-c", "import setuptools, wheel"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        names = ", ".join(p.name for p in sdists)
        raise WheelhouseError(f"{python} lacks setuptools/wheel, needed to build the sdists {names} offline")


def install(
    chunks: Path,
    target_dir: Path,
    *,
    python: str = sys.executable,
    force: bool = False,
    bytecode: bool = True,
    log: Log = print,
) -> dict[str, Any]:
    """Verify, reassemble, extract and pip-install the chunk dir into `target_dir`, then (with `bytecode`) write
    the `.pyc` files; returns the manifest."""
    start = time.monotonic()
    manifest = load_manifest(chunks)
    marker = target_dir / MARKER
    if not force and marker.is_file():
        try:
            done = json.loads(marker.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            done = {}
        if done.get("tar_sha256") == manifest["tar"]["sha256"]:
            log(f"already installed in {target_dir} (same tar sha256, {len(manifest['files'])} files); --force redoes it")
            return manifest
    log(f"verifying {len(manifest['chunks'])} chunks in {chunks}")
    result = verify(chunks, log=log)
    if not result.ok:
        raise WheelhouseError(f"{len(result.problems)} problem(s) with the chunks:\n  " + "\n  ".join(result.problems))
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheelhouse-files-", dir=target_dir.parent) as tmp:
        files = extract(chunks, Path(tmp), manifest, log=log)
        sdists = [p for p in files if not p.name.endswith(".whl")]
        _check_build_tools(python, sdists)
        log(f"pip install --no-index --no-deps: {len(files) - len(sdists)} wheels + {len(sdists)} sdists -> {target_dir}")
        t0 = time.monotonic()
        proc = subprocess.run(pip_install_command(python, target_dir, files), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n  ".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise WheelhouseError(f"pip install failed (exit {proc.returncode}):\n  {tail}")
        log(f"pip finished in {time.monotonic() - t0:.1f} s")
    if bytecode:
        compile_bytecode(python, target_dir, log=log)
    record = {"tar_sha256": manifest["tar"]["sha256"], "files": len(manifest["files"]),
              "manifest_created": manifest.get("created"), "target": manifest.get("target")}  # fmt: skip
    marker.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    log(f"installed {len(manifest['files'])} files into {target_dir} in {time.monotonic() - start:.1f} s")
    log("run with:  export " + " ".join(env_lines(manifest, target_dir)))
    return manifest
