"""`download`: fetch every pin of a target with `pip download --no-deps`, one file per pin, into a lock-recorded dir.

Wheels are fetched for the target's interpreter and platform (`--only-binary=:all: --python-version ... --platform
...`), the pins listed in `[sdist]` as source archives. `DEST/wheelhouse-lock.json` records pin -> file, size,
sha256; a pin whose recorded file is present with that sha256 is not fetched again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.files import human, is_dist_file, parse_filename, sha256_file
from verl_ext.wheelhouse.targets import Pin, Target

LOCK_NAME = "wheelhouse-lock.json"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Fetched:
    """One downloaded file of a pin."""

    pin: str
    file: str
    size: int
    sha256: str
    seconds: float
    cached: bool


def pip_command(target: Target, pin: Pin, dest: Path, python: str, extra_args: list[str]) -> list[str]:
    """The `pip download` command line for one pin (`--no-deps`: the target file lists every file explicitly)."""
    cmd = [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--dest", str(dest)]
    if pin.sdist:
        # pip refuses --platform/--python-version for sdists; their metadata is prepared with the local setuptools
        cmd += ["--no-binary=:all:", "--no-build-isolation"]
    else:
        cmd += ["--only-binary=:all:", "--python-version", target.python_version]
        cmd += ["--implementation", target.implementation, "--abi", target.abi]
        for platform in target.platforms():
            cmd += ["--platform", platform]
    return cmd + list(extra_args) + [pin.line]


def read_lock(dest: Path) -> dict[str, Any]:
    """The lock file of a download dir (empty when there is none)."""
    path = dest / LOCK_NAME
    if not path.exists():
        return {"format": 1, "target": None, "files": {}}
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WheelhouseError(f"{path}: not valid JSON ({exc}); delete it to download again") from exc
    if not isinstance(lock, dict) or not isinstance(lock.get("files"), dict):
        raise WheelhouseError(f"{path}: key 'files' missing or not an object; delete the file to download again")
    return lock


def write_lock(dest: Path, target: Target, fetched: dict[str, Fetched]) -> Path:
    """Write the lock file: target summary + pin -> {file, size, sha256}, sorted by pin."""
    path = dest / LOCK_NAME
    files = {k: {"file": f.file, "size": f.size, "sha256": f.sha256} for k, f in sorted(fetched.items())}
    lock = {"format": 1, "target": target.summary(), "files": files}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(lock, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _cached(dest: Path, pin: Pin, lock: dict[str, Any]) -> Fetched | None:
    entry = lock["files"].get(pin.line)
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        return None
    path = dest / entry["file"]
    if not path.is_file() or path.stat().st_size != entry.get("size") or sha256_file(path) != entry.get("sha256"):
        return None
    return Fetched(pin.line, entry["file"], entry["size"], entry["sha256"], 0.0, cached=True)


def fetch_one(target: Target, pin: Pin, dest: Path, python: str, extra_args: list[str]) -> Fetched:
    """Run pip for one pin in a scratch dir, check the single file it produced, move it into `dest`."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest) as tmp:
        proc = subprocess.run(
            pip_command(target, pin, Path(tmp), python, extra_args), capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            tail = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()][-2:]
            raise WheelhouseError(f"{pin.line} (bundle {pin.bundle}): pip download failed: {' | '.join(tail)}")
        files = sorted(p for p in Path(tmp).iterdir() if p.is_file() and is_dist_file(p.name))
        if len(files) != 1:
            raise WheelhouseError(f"{pin.line}: expected one file from pip, got {[p.name for p in files]}")
        got = parse_filename(files[0].name)
        if got.name != pin.name or got.version != pin.version:
            raise WheelhouseError(f"{pin.line}: pip returned {files[0].name} (project {got.name} {got.version})")
        if got.kind != ("sdist" if pin.sdist else "wheel"):
            raise WheelhouseError(f"{pin.line}: expected a {'sdist' if pin.sdist else 'wheel'}, got {files[0].name}")
        final = dest / files[0].name
        shutil.move(str(files[0]), final)
    return Fetched(pin.line, final.name, final.stat().st_size, sha256_file(final), time.monotonic() - start, False)


def download(
    target: Target,
    dest: Path,
    *,
    jobs: int = 4,
    python: str = sys.executable,
    extra_args: list[str] | None = None,
    log: Log = print,
    with_bundles: tuple[str, ...] | list[str] = (),
) -> dict[str, Fetched]:
    """Fetch every pin the target lacks (optional bundles only when named in `with_bundles`) into `dest`; returns
    pin -> file. Raises listing every failed pin."""
    pins = target.to_bring(with_bundles)
    dest.mkdir(parents=True, exist_ok=True)
    lock = read_lock(dest)
    for pin in target.pins:
        if pin not in pins and (pin.bundle not in target.optional or pin.bundle in with_bundles):
            log(f"skip {pin.line}: the target already has it")
    for name in sorted(target.optional - set(with_bundles)):
        log(f"optional bundle {name!r} not brought (--with {name} brings it)")
    done: dict[str, Fetched] = {}
    todo: list[Pin] = []
    for pin in pins:
        hit = _cached(dest, pin, lock)
        if hit is None:
            todo.append(pin)
        else:
            done[pin.line] = hit
    log(f"{len(pins)} pins for {target.name}: {len(done)} already here (sha256 checked), {len(todo)} to fetch")
    errors: list[str] = []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(fetch_one, target, pin, dest, python, list(extra_args or [])): pin for pin in todo}
        for i, future in enumerate(as_completed(futures), 1):
            pin = futures[future]
            try:
                got = future.result()
            except WheelhouseError as exc:
                errors.append(str(exc))
                log(f"[{i}/{len(todo)}] FAILED {exc}")
                continue
            done[pin.line] = got
            log(f"[{i}/{len(todo)}] {pin.line} -> {got.file} ({human(got.size)}, {got.seconds:.1f} s)")
    write_lock(dest, target, done)
    total = sum(f.size for f in done.values())
    log(f"{len(done)} files, {human(total)} in {dest} ({time.monotonic() - start:.0f} s); lock: {dest / LOCK_NAME}")
    if errors:
        raise WheelhouseError(f"{len(errors)} pin(s) failed to download:\n  " + "\n  ".join(errors))
    return done
