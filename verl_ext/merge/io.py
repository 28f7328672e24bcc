"""Atomic output directories: build everything in a hidden sibling dir, rename it into place at the end.

A merge that crashes or is killed never leaves a half-written model at the target path: the target either
does not exist, still holds its previous content, or holds the complete new model. A SIGKILLed run can leave
its hidden `.<name>.merge-tmp-*` staging dir behind; it is reported on the next run and safe to delete.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import MergeError

logger = logging.getLogger(__name__)
STAGING_MARKER = ".merge-tmp-"


def check_target(target: Path, force: bool) -> None:
    """Refuse a target that is a file, or a non-empty directory unless `force`."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise MergeError(f"output path {target} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise MergeError(f"output directory {target} is not empty; pass --force to replace it")


def guard_output(output: Path, protected: Path, force: bool) -> None:
    """`check_target`, and refuse an output dir that contains `protected` (the input), which --force would delete."""
    check_target(output, force)
    if protected.resolve().is_relative_to(output.resolve()):
        raise MergeError(f"output directory {output} contains the input {protected}; choose another output path")


def list_files(directory: Path) -> list[str]:
    """Relative paths of all files under `directory`, sorted."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _stale_staging_dirs(target: Path) -> list[Path]:
    prefix = f".{target.name}{STAGING_MARKER}"
    if not target.parent.is_dir():
        return []
    return sorted(p for p in target.parent.iterdir() if p.name.startswith(prefix))


@contextmanager
def staged_output(target: Path, force: bool) -> Iterator[Path]:
    """Yield an empty staging dir next to `target`; on success replace `target` with it, on error delete it."""
    target = Path(target).absolute()
    check_target(target, force)
    for stale in _stale_staging_dirs(target):
        logger.warning("leftover staging dir from an interrupted merge (safe to delete): %s", stale)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING_MARKER}", dir=target.parent))
    try:
        yield staging
        publish(staging, target, force)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def publish(staging: Path, target: Path, force: bool) -> None:
    """Move a finished staging dir to `target`, replacing an existing dir only with `force`."""
    check_target(target, force)  # again: something may have appeared while we merged
    os.chmod(staging, 0o755)  # mkdtemp creates 0700
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    if target.exists():
        # Two renames: the old content stays complete until the new one is in place.
        retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-", dir=target.parent))
        os.replace(target, retired / "old")
        try:
            os.replace(staging, target)
        except OSError:
            os.replace(retired / "old", target)
            raise
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staging, target)
    _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
