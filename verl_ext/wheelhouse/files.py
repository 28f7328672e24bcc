"""Distribution files: names, kinds (wheel / sdist), checksums and metadata, read with the standard library."""

from __future__ import annotations

import email.message
import email.parser
import hashlib
import re
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from verl_ext.wheelhouse import WheelhouseError

SDIST_SUFFIXES = (".tar.gz", ".zip")
_BLOCK = 1 << 20


def normalize(name: str) -> str:
    """PEP 503 normalized project name (`Foo_Bar.baz` -> `foo-bar-baz`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def human(size: int) -> str:
    """`123456789` -> `117.7 MiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.2f} GiB"


@dataclass(frozen=True)
class DistFile:
    """A wheel or sdist file name split into project name, version and kind."""

    filename: str
    name: str  # normalized
    version: str
    kind: str  # "wheel" | "sdist"


def is_dist_file(filename: str) -> bool:
    return filename.endswith(".whl") or filename.endswith(SDIST_SUFFIXES)


def parse_filename(filename: str) -> DistFile:
    """Split `vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl` or `zss-1.2.0.tar.gz`."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        if len(parts) not in (5, 6):
            raise WheelhouseError(f"{filename}: not a wheel file name (name-version-[build-]python-abi-platform.whl)")
        return DistFile(filename, normalize(parts[0]), parts[1], "wheel")
    for suffix in SDIST_SUFFIXES:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, sep, version = stem.rpartition("-")
            if not sep or not name or not version:
                raise WheelhouseError(f"{filename}: not an sdist file name (name-version{suffix})")
            return DistFile(filename, normalize(name), version, "sdist")
    raise WheelhouseError(f"{filename}: neither a wheel (.whl) nor an sdist ({', '.join(SDIST_SUFFIXES)})")


def read_metadata(path: Path) -> email.message.Message:
    """The core metadata (METADATA of a wheel, PKG-INFO of an sdist) of a distribution file."""
    kind = parse_filename(path.name).kind
    try:
        if kind == "wheel":
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
                if not names:
                    raise WheelhouseError(f"{path.name}: no *.dist-info/METADATA inside the wheel")
                text = zf.read(names[0]).decode("utf-8")
        elif path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/PKG-INFO")]
                if not names:
                    raise WheelhouseError(f"{path.name}: no top-level PKG-INFO inside the sdist")
                text = zf.read(names[0]).decode("utf-8")
        else:
            with tarfile.open(path, "r:gz") as tf:
                members = [m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
                if not members:
                    raise WheelhouseError(f"{path.name}: no top-level PKG-INFO inside the sdist")
                handle = tf.extractfile(members[0])
                assert handle is not None
                text = handle.read().decode("utf-8")
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise WheelhouseError(f"{path.name}: cannot read metadata ({exc})") from exc
    return email.parser.Parser().parsestr(text)
