"""`pack` / `verify` / reassemble: one uncompressed tar of the wheels, split into numbered fixed-size chunks.

Chunk dir layout:
  wheels.tar.000, wheels.tar.001, ...   the tar stream cut every `chunk_bytes` (the last chunk is shorter)
  MANIFEST.json                         per-chunk and per-file size + sha256, the whole tar's size + sha256,
                                        the target summary and env (from the download lock, when there is one)
  SHA256SUMS                            the chunks in `sha256sum -c` format (checkable without this tool)
The tar is deterministic (sorted names, mtime 0, uid/gid 0); members are plain file names only.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.download import LOCK_NAME, read_lock
from verl_ext.wheelhouse.files import human, is_dist_file, parse_filename, sha256_file

MANIFEST = "MANIFEST.json"
SUMS = "SHA256SUMS"
TAR_NAME = "wheels.tar"
MIB = 1 << 20
_BLOCK = 1 << 20
Log = Callable[[str], None]


def chunk_name(index: int) -> str:
    return f"{TAR_NAME}.{index:03d}"


class ChunkWriter:
    """A write-only stream that cuts its bytes into `chunk_bytes`-sized files, hashing each and the whole."""

    def __init__(self, out: Path, chunk_bytes: int, log: Log = print) -> None:
        if chunk_bytes < 10240:  # at least one tar record
            raise WheelhouseError(f"chunk size {chunk_bytes} bytes is too small (minimum 10240)")
        self.out, self.chunk_bytes, self.log = out, chunk_bytes, log
        self.chunks: list[dict[str, Any]] = []
        self.total = hashlib.sha256()
        self.size = 0
        self._file: IO[bytes] | None = None
        self._hash = hashlib.sha256()
        self._used = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self._file is None:
                self._file = open(self.out / chunk_name(len(self.chunks)), "wb")
                self._hash, self._used = hashlib.sha256(), 0
            take = min(len(view), self.chunk_bytes - self._used)
            piece = view[:take]
            self._file.write(piece)
            self._hash.update(piece)
            self.total.update(piece)
            self._used += take
            self.size += take
            view = view[take:]
            if self._used == self.chunk_bytes:
                self._finish_chunk()
        return len(data)

    def _finish_chunk(self) -> None:
        assert self._file is not None
        self._file.close()
        entry = {"name": chunk_name(len(self.chunks)), "size": self._used, "sha256": self._hash.hexdigest()}
        self.chunks.append(entry)
        self.log(f"chunk {entry['name']}: {human(entry['size'])} sha256 {entry['sha256'][:16]}...")
        self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._finish_chunk()


class _HashingReader:
    """Wraps a binary file; hashes what is read through it."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.hash, self.size = f, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.hash.update(data)
        self.size += len(data)
        return data


def files_to_pack(src: Path) -> tuple[list[Path], dict[str, Any] | None]:
    """The files named by `src`'s download lock (sha256-checked), else every wheel/sdist in `src`."""
    if not src.is_dir():
        raise WheelhouseError(f"source dir {src} does not exist")
    if (src / LOCK_NAME).exists():
        lock = read_lock(src)
        paths = []
        for pin, entry in sorted(lock["files"].items()):
            path = src / entry["file"]
            if not path.is_file():
                raise WheelhouseError(f"{path.name} (pin {pin}) is recorded in {LOCK_NAME} but missing from {src}")
            if sha256_file(path) != entry["sha256"]:
                raise WheelhouseError(f"{path.name} (pin {pin}): sha256 differs from {LOCK_NAME}; download again")
            paths.append(path)
        return sorted(paths, key=lambda p: p.name), lock.get("target")
    paths = sorted((p for p in src.iterdir() if p.is_file() and is_dist_file(p.name)), key=lambda p: p.name)
    if not paths:
        raise WheelhouseError(f"no wheels or sdists in {src}")
    return paths, None


def pack(src: Path, out: Path, chunk_mib: float = 55.0, log: Log = print) -> dict[str, Any]:
    """Tar the files of `src` into chunks under `out`; write MANIFEST.json and SHA256SUMS; return the manifest."""
    start = time.monotonic()
    paths, target = files_to_pack(src)
    for path in paths:
        parse_filename(path.name)  # refuses anything that is not a wheel/sdist
    writer = ChunkWriter(out, int(chunk_mib * MIB), log)  # validates the size before anything is removed
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob(f"{TAR_NAME}.*"), out / MANIFEST, out / SUMS]:
        old.unlink(missing_ok=True)
    entries = []
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path in paths:
            info = tarfile.TarInfo(path.name)
            info.size, info.mtime, info.mode = path.stat().st_size, 0, 0o644
            with open(path, "rb") as f:
                reader = _HashingReader(f)
                tar.addfile(info, reader)  # type: ignore[arg-type]
            kind = parse_filename(path.name).kind
            entries.append({"name": path.name, "size": reader.size, "sha256": reader.hash.hexdigest(), "kind": kind})
    writer.close()
    manifest = {
        "format": 1,
        "tool": "verl-ext wheelhouse",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "target": target,
        "chunk_bytes": writer.chunk_bytes,
        "tar": {"name": TAR_NAME, "size": writer.size, "sha256": writer.total.hexdigest()},
        "total_file_bytes": sum(e["size"] for e in entries),
        "chunks": writer.chunks,
        "files": entries,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    (out / SUMS).write_text("".join(f"{c['sha256']}  {c['name']}\n" for c in writer.chunks), encoding="utf-8")
    log(
        f"packed {len(entries)} files ({human(manifest['total_file_bytes'])}) into {len(writer.chunks)} chunks "
        f"of <= {human(writer.chunk_bytes)} in {out} ({time.monotonic() - start:.1f} s)"
    )
    return manifest


def load_manifest(chunks: Path) -> dict[str, Any]:
    """Read and sanity-check MANIFEST.json of a chunk dir."""
    path = chunks / MANIFEST
    if not path.is_file():
        raise WheelhouseError(f"{path} is missing (copy MANIFEST.json next to the chunks)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WheelhouseError(f"{path}: not valid JSON ({exc})") from exc
    for key in ("format", "tar", "chunks", "files"):
        if key not in manifest:
            raise WheelhouseError(f"{path}: key {key!r} is missing")
    if manifest["format"] != 1:
        raise WheelhouseError(f"{path}: format {manifest['format']!r} is not supported (expected 1)")
    return manifest


@dataclass
class Verification:
    """Result of checking a chunk dir against its manifest."""

    problems: list[str] = field(default_factory=list)
    checked: int = 0
    size: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(chunks: Path, log: Log = print) -> Verification:
    """Check every chunk's presence, size and sha256, and the whole tar's sha256; collect every problem."""
    manifest = load_manifest(chunks)
    result = Verification()
    total = hashlib.sha256()
    whole_ok = True
    n = len(manifest["chunks"])
    for i, entry in enumerate(manifest["chunks"], 1):
        path = chunks / entry["name"]
        if not path.is_file():
            result.problems.append(f"missing chunk {entry['name']} ({i}/{n}, {entry['size']} bytes) in {chunks}")
            whole_ok = False
            continue
        size = path.stat().st_size
        if size != entry["size"]:
            result.problems.append(
                f"corrupt chunk {entry['name']}: {size} bytes, expected {entry['size']} (truncated or wrong file?)"
            )
            whole_ok = False
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                digest.update(block)
                total.update(block)
        if digest.hexdigest() != entry["sha256"]:
            result.problems.append(f"corrupt chunk {entry['name']}: sha256 {digest.hexdigest()} != {entry['sha256']}")
            whole_ok = False
            continue
        result.checked += 1
        result.size += size
        log(f"ok {entry['name']} ({i}/{n}, {human(size)})")
    expected = {e["name"] for e in manifest["chunks"]}
    for extra in sorted(p.name for p in chunks.glob(f"{TAR_NAME}.*") if p.name not in expected):
        result.problems.append(f"unexpected chunk {extra} (not in {MANIFEST}; from another pack?)")
    if whole_ok and total.hexdigest() != manifest["tar"]["sha256"]:
        result.problems.append(f"reassembled {TAR_NAME}: sha256 {total.hexdigest()} != {manifest['tar']['sha256']}")
    return result


class _ChunkReader:
    """A read-only stream over the chunks in order (no reassembled copy on disk)."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths: Iterator[Path] = iter(paths)
        self._file: IO[bytes] | None = None

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if self._file is None:
                path = next(self._paths, None)
                if path is None:
                    break
                self._file = open(path, "rb")
            data = self._file.read(-1 if n < 0 else n - len(out))
            if not data:
                self._file.close()
                self._file = None
                continue
            out += data
        return bytes(out)


def extract(chunks: Path, dest: Path, manifest: dict[str, Any], log: Log = print) -> list[Path]:
    """Stream the chunks through tar into `dest`, checking each file's name, size and sha256 against the manifest."""
    expected = {e["name"]: e for e in manifest["files"]}
    dest.mkdir(parents=True, exist_ok=True)
    paths = [chunks / c["name"] for c in manifest["chunks"]]
    got: list[Path] = []
    with tarfile.open(fileobj=_ChunkReader(paths), mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            name = member.name
            if "/" in name or "\\" in name or name in ("", ".", "..") or not member.isfile():
                raise WheelhouseError(f"{TAR_NAME}: refusing member {name!r} (only plain file names are packed)")
            if name not in expected:
                raise WheelhouseError(f"{TAR_NAME}: member {name} is not listed in {MANIFEST}")
            source = tar.extractfile(member)
            assert source is not None
            reader = _HashingReader(source)
            with open(dest / name, "wb") as f:
                while block := reader.read(_BLOCK):
                    f.write(block)
            if reader.size != expected[name]["size"] or reader.hash.hexdigest() != expected[name]["sha256"]:
                raise WheelhouseError(f"{name}: extracted file differs from {MANIFEST} (size or sha256)")
            got.append(dest / name)
    missing = sorted(set(expected) - {p.name for p in got})
    if missing:
        raise WheelhouseError(f"{TAR_NAME} lacks {len(missing)} file(s) listed in {MANIFEST}: {', '.join(missing)}")
    log(f"extracted {len(got)} files ({human(sum(p.stat().st_size for p in got))}) to {dest}")
    return got
