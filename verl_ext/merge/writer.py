"""Write a sharded safetensors model one tensor (or tensor piece) at a time.

`safetensors.torch.save_file` needs every tensor of a file in memory at once and copies each to `bytes`.
Since all shapes are known before the merge starts, the headers can be written up front and tensor bytes
streamed after them, so peak memory is one tensor piece regardless of model size. The format is the
documented one: 8-byte little-endian header length, a JSON header padded with spaces to 8 bytes, raw data.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
from tqdm import tqdm

from .errors import MergeError

SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_FILE_NAME = "model.safetensors"


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the output model."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * self.dtype.itemsize


def parse_size(text: str) -> int:
    """Parse '5GB', '500MB', '2GiB' or a plain byte count."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    cleaned = text.strip().upper()
    number = cleaned.rstrip("KMGIB")
    unit = cleaned[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in units or value <= 0:
        raise MergeError(f"invalid size {text!r}; use e.g. 5GB, 500MB, 2GiB or a byte count")
    return int(value * units[unit])


class ShardedSafetensorsWriter:
    """Writes `tensors` (in the given order) into numbered `model-00001-of-00003.safetensors`-style files of at most
    `max_shard_bytes` each (a single tensor larger than that gets a file of its own)."""

    def __init__(self, out_dir: Path, tensors: list[PlannedTensor], max_shard_bytes: int) -> None:
        for tensor in tensors:
            if tensor.dtype not in SAFETENSORS_DTYPES:
                raise MergeError(f"cannot write {tensor.name!r}: dtype {tensor.dtype} has no safetensors code")
        self.out_dir = Path(out_dir)
        self.groups = self._split(tensors, max_shard_bytes)
        count = len(self.groups)
        self.file_names = [SINGLE_FILE_NAME] if count == 1 else [
            f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)
        ]
        self._order = [(file_index, t) for file_index, group in enumerate(self.groups) for t in group]
        self._next = 0
        self._file: BinaryIO | None = None
        self._file_index = -1
        self.total_bytes = sum(t.nbytes for t in tensors)

    @staticmethod
    def _split(tensors: list[PlannedTensor], max_shard_bytes: int) -> list[list[PlannedTensor]]:
        groups: list[list[PlannedTensor]] = [[]]
        size = 0
        for tensor in tensors:
            if groups[-1] and size + tensor.nbytes > max_shard_bytes:
                groups.append([])
                size = 0
            groups[-1].append(tensor)
            size += tensor.nbytes
        return groups

    @staticmethod
    def _header(group: list[PlannedTensor]) -> bytes:
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tensor in group:
            header[tensor.name] = {
                "dtype": SAFETENSORS_DTYPES[tensor.dtype],
                "shape": list(tensor.shape),
                "data_offsets": [offset, offset + tensor.nbytes],
            }
            offset += tensor.nbytes
        encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
        encoded += b" " * (-len(encoded) % 8)
        return struct.pack("<Q", len(encoded)) + encoded

    def _switch_file(self, file_index: int) -> None:
        self._close_file()
        path = self.out_dir / self.file_names[file_index]
        self._file = open(path, "wb")  # noqa: SIM115 - closed in _close_file
        self._file.write(self._header(self.groups[file_index]))
        self._file_index = file_index

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def write(self, name: str, chunks: Iterable[torch.Tensor]) -> None:
        """Append the next planned tensor; `chunks` are contiguous pieces whose bytes, in order, form it."""
        if self._next >= len(self._order):
            raise MergeError(f"writer got unplanned tensor {name!r}")
        file_index, planned = self._order[self._next]
        if planned.name != name:
            raise MergeError(f"writer expected {planned.name!r} next, got {name!r}")
        if file_index != self._file_index:
            self._switch_file(file_index)
        assert self._file is not None
        written = 0
        for chunk in chunks:
            if chunk.dtype != planned.dtype or not chunk.is_contiguous():
                raise MergeError(f"{name!r}: chunk must be contiguous {planned.dtype}, got {chunk.dtype}")
            raw = chunk.reshape(-1).view(torch.uint8).numpy()
            self._file.write(memoryview(raw))
            written += raw.nbytes
            del raw, chunk  # before the next chunk is produced: a chunk may pin an mmapped shard file
        if written != planned.nbytes:
            raise MergeError(f"{name!r}: wrote {written} bytes, expected {planned.nbytes} for shape {planned.shape}")
        self._next += 1

    def close(self) -> list[Path]:
        """Finish the last file and write the index (for more than one file); returns the files written."""
        if self._next != len(self._order):
            missing = [t.name for _, t in self._order[self._next : self._next + 5]]
            raise MergeError(f"writer closed before all tensors were written; next missing: {missing}")
        if self._file_index < 0 and self._order:
            self._switch_file(0)
        self._close_file()
        if not self._order:
            raise MergeError("no tensors to write")
        paths = [self.out_dir / name for name in self.file_names]
        if len(self.file_names) > 1:
            weight_map = {t.name: self.file_names[i] for i, t in self._order}
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
            (self.out_dir / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return paths

    def abort(self) -> None:
        """Close any open file without completing it (the staging dir is discarded by the caller)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def write_weights(
    out_dir: Path,
    plan: list[PlannedTensor],
    chunks_for: Callable[[PlannedTensor], Iterable[torch.Tensor]],
    max_shard_bytes: int,
    progress: bool,
) -> None:
    """Stream every planned tensor into sharded safetensors files (+ index), with a progress bar."""
    writer = ShardedSafetensorsWriter(out_dir, plan, max_shard_bytes)
    try:
        with tqdm(
            total=writer.total_bytes, unit="B", unit_scale=True, desc="writing weights", disable=not progress
        ) as bar:
            for planned in plan:
                writer.write(planned.name, chunks_for(planned))
                bar.update(planned.nbytes)
        writer.close()
    except BaseException:
        writer.abort()
        raise
