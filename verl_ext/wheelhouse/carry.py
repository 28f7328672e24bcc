"""The chunk size that fits a per-call carry limit beside the working tree sent with every call.

A lent GPU machine receives files through calls that each carry at most 64 MiB, the checkout's working tree
(tracked files plus untracked files git does not ignore) included. The tree grows with every evidence folder, so a
fixed chunk size stops fitting (55 MiB did past a 9 MiB tree, 52 MiB plus trl's wheel past 11 MiB):
`pack --chunk-mib auto` sizes the chunks from the tree at pack time.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.chunks import MIB

CARRY_LIMIT_MIB = 64.0
# Room for what rides with a chunk (MANIFEST.json, SHA256SUMS, trl's wheel: ~1 MiB) and for the evidence folders
# a few sessions commit before the chunks are packed again (~0.4 MiB each).
HEADROOM_MIB = 4.0
MIN_CHUNK_MIB = 8.0
TAR_BLOCK = 512


def _git(repo: Path, *args: str) -> bytes:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout
    except FileNotFoundError as exc:
        raise WheelhouseError("--chunk-mib auto needs git to list the working tree; pass a size in MiB") from exc
    except subprocess.CalledProcessError as exc:
        reason = exc.stderr.decode(errors="replace").strip().splitlines()
        raise WheelhouseError(
            f"--chunk-mib auto: {repo} is not in a git checkout ({reason[-1] if reason else 'git failed'});"
            " run pack from the checkout that makes the carry calls, or pass a size in MiB"
        ) from exc


def carried_bytes(size: int) -> int:
    """What one file of ``size`` bytes counts against the carry limit, as in a tar archive: a 512-byte header and
    the content padded to 512-byte blocks. (On 2026-11-27 a call with 63.5 MiB of file contents, 2,084 of them
    in the tree, was refused as over 64 MiB; with this overhead it comes to ~65 MiB.)"""
    return TAR_BLOCK + -(-size // TAR_BLOCK) * TAR_BLOCK


def working_tree_bytes(repo: Path) -> tuple[Path, int]:
    """The checkout holding ``repo`` and the bytes a carry call sends along from it: its tracked files plus its
    untracked files that git does not ignore, each counted as ``carried_bytes``."""
    top = Path(os.fsdecode(_git(repo, "rev-parse", "--show-toplevel").strip()))
    total = 0
    for name in _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split(b"\0"):
        path = top / os.fsdecode(name)
        if name and path.is_file():  # a tracked file deleted from the tree is not carried
            total += carried_bytes(path.stat().st_size)
    return top, total


def auto_chunk_mib(
    tree_bytes: int, limit_mib: float = CARRY_LIMIT_MIB, headroom_mib: float = HEADROOM_MIB
) -> float:
    """Whole MiB per chunk so that one chunk, the tree and the headroom stay within ``limit_mib``."""
    size = math.floor(limit_mib - tree_bytes / MIB - headroom_mib)
    if size < MIN_CHUNK_MIB:
        raise WheelhouseError(
            f"--chunk-mib auto: the working tree is {tree_bytes / MIB:.1f} MiB, which leaves {size} MiB per chunk"
            f" under the {limit_mib:g} MiB carry limit ({headroom_mib:g} MiB kept free); below {MIN_CHUNK_MIB:g}"
            " MiB a wheelhouse of ~470 MiB takes dozens of calls: move large files out of the tree or pass a size"
        )
    return float(size)
