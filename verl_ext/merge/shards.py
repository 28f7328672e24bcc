"""Read verl's per-rank FSDP model shards (DTensor state dicts) without loading them into memory.

Every `model_world_size_W_rank_R.pt` is a `torch.save`d dict `{fqn: DTensor}` (FSDP1 with a device mesh and
FSDP2 both produce DTensors with `Shard(0)` placements; HSDP adds a leading `Replicate()` mesh dim). Files are
opened with `torch.load(mmap=True, weights_only=True)`, so only the pages of the tensor being merged are read;
the mappings are dropped and re-opened once a byte budget has been read, which keeps the resident set small.
"""

from __future__ import annotations

import gc
import logging
import pickle
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from verl.model_merger.fsdp_model_merger import merge_non_dtensor_shards

from .errors import MergeError

# Pages of the mmapped shards count towards RSS until unmapped; re-open a file after reading this much of it.
DEFAULT_READ_BUDGET_BYTES = 128 * 1024**2
# Converted (dtype-cast) copies are made this many bytes at a time.
CONVERT_BLOCK_BYTES = 32 * 1024**2


def load_shard_file(path: Path, *, mmap: bool = True, allow_unsafe_pickle: bool = False) -> dict:
    """`torch.load` one rank file on CPU, turning torch's low-level failures into a MergeError naming the file."""
    # Unpickling a DTensor's DeviceMesh without a process group logs a harmless warning per file.
    mesh_logger = logging.getLogger("torch.distributed.device_mesh")
    previous_level = mesh_logger.level
    mesh_logger.setLevel(logging.ERROR)
    try:
        state_dict = torch.load(path, map_location="cpu", mmap=mmap, weights_only=not allow_unsafe_pickle)
    except FileNotFoundError as exc:
        raise MergeError(f"missing model shard {path}") from exc
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc):
            first_line = str(exc).strip().splitlines()[0]
            raise MergeError(
                f"{path} holds objects that weights_only loading refuses ({first_line}). If you trust this "
                "file, re-run with --allow-unsafe-pickle"
            ) from exc
        raise MergeError(f"corrupt model shard {path}: {exc}") from exc
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise MergeError(f"corrupt or truncated model shard {path}: {str(exc).strip().splitlines()[0]}") from exc
    finally:
        mesh_logger.setLevel(previous_level)
    if not isinstance(state_dict, dict):
        raise MergeError(f"{path} should hold a state dict, found {type(state_dict).__name__}")
    return state_dict


@dataclass(frozen=True)
class TensorInfo:
    """Where one checkpoint entry lives across ranks and how its pieces join up."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    ranks: tuple[int, ...]  # ranks whose local pieces, in this order, make the full tensor
    shard_dim: int | None  # concatenation dim; None: take the single piece of ranks[0]
    is_dtensor: bool

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * self.dtype.itemsize


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _dtensor_layout(name: str, value: DTensor, world_size: int, path: Path) -> tuple[tuple[int, ...], int | None]:
    """Ranks to read (in concatenation order) and the shard dim for one DTensor."""
    mesh = value.device_mesh.mesh
    if mesh.numel() != world_size:
        raise MergeError(
            f"world-size mismatch: {path} entry {name!r} is sharded over {mesh.numel()} ranks "
            f"(mesh {tuple(mesh.shape)}) but fsdp_config.json says world_size={world_size}"
        )
    placements = tuple(value.placements)
    shard_dims = [i for i, p in enumerate(placements) if isinstance(p, Shard)]
    for placement in placements:
        if type(placement).__name__ == "_StridedShard" or not isinstance(placement, (Shard, Replicate)):
            raise MergeError(
                f"unsupported placement {placement} for {name!r} in {path} (only Shard/Replicate, i.e. FSDP or HSDP)"
            )
    if len(shard_dims) > 1:
        raise MergeError(f"{name!r} in {path} is sharded over {len(shard_dims)} mesh dims (FSDP+TP is unsupported)")
    # Replicated mesh dims (HSDP's ddp dim) hold identical copies: read coordinate 0 of each.
    if not shard_dims:
        return (int(mesh.reshape(-1)[0]),), None
    mesh_dim = shard_dims[0]
    index: list[int | slice] = [0] * mesh.ndim
    index[mesh_dim] = slice(None)
    ranks = tuple(int(r) for r in mesh[tuple(index)].tolist())
    return ranks, placements[mesh_dim].dim


def build_tensor_index(
    shard_states: list[dict], model_files: tuple[Path, ...]
) -> dict[str, TensorInfo]:
    """Describe every entry of the checkpoint, validating that all ranks agree and pieces add up."""
    world_size = len(model_files)
    rank0 = shard_states[0]
    for rank, state in enumerate(shard_states[1:], start=1):
        if state.keys() != rank0.keys():
            only0 = sorted(set(rank0) - set(state))[:5]
            only_r = sorted(set(state) - set(rank0))[:5]
            raise MergeError(
                f"ranks disagree on the state dict keys: {model_files[rank]} lacks {only0} and adds {only_r} "
                f"compared with {model_files[0]}"
            )
    index: dict[str, TensorInfo] = {}
    for name, value in rank0.items():
        if isinstance(value, DTensor):
            ranks, shard_dim = _dtensor_layout(name, value, world_size, model_files[0])
            shape, dtype = tuple(value.shape), value.dtype
            for rank in ranks:
                other = shard_states[rank][name]
                if not isinstance(other, DTensor) or tuple(other.shape) != shape or other.dtype != dtype:
                    raise MergeError(
                        f"{model_files[rank]} entry {name!r} disagrees with rank 0 on type/shape/dtype "
                        f"({type(other).__name__} {tuple(getattr(other, 'shape', ()))} vs DTensor {shape})"
                    )
            if shard_dim is not None:
                pieces = [shard_states[r][name]._local_tensor.shape for r in ranks]
                joined = sum(p[shard_dim] for p in pieces)
                rest_ok = all(
                    tuple(p[:shard_dim]) + tuple(p[shard_dim + 1 :]) == shape[:shard_dim] + shape[shard_dim + 1 :]
                    for p in pieces
                )
                if joined != shape[shard_dim] or not rest_ok:
                    raise MergeError(
                        f"local pieces of {name!r} {[tuple(p) for p in pieces]} do not make up its global shape "
                        f"{shape} along dim {shard_dim}; the shards under {model_files[0].parent} are inconsistent"
                    )
            index[name] = TensorInfo(name, shape, dtype, ranks, shard_dim, is_dtensor=True)
        elif isinstance(value, torch.Tensor):
            # Plain tensors are replicated on every rank (buffers, unsharded params); ShardReader checks that.
            index[name] = TensorInfo(name, tuple(value.shape), value.dtype, tuple(range(world_size)), None, False)
        else:
            raise MergeError(f"{model_files[0]} entry {name!r} is a {type(value).__name__}, not a tensor")
    return index


class ShardReader:
    """Hands out the local pieces of one checkpoint entry at a time from mmapped rank files.

    Reading a piece faults its pages in, and they stay resident while the file is mapped, so a rank's
    mapping is dropped once `read_budget_bytes` of it has been read (it is re-mapped on next use).
    """

    def __init__(
        self,
        model_files: tuple[Path, ...],
        *,
        allow_unsafe_pickle: bool = False,
        read_budget_bytes: int = DEFAULT_READ_BUDGET_BYTES,
    ) -> None:
        self.model_files = model_files
        self.allow_unsafe_pickle = allow_unsafe_pickle
        self.read_budget_bytes = read_budget_bytes
        self._open: dict[int, dict] = {}
        self._bytes_read: dict[int, int] = {}

    def open_all(self) -> list[dict]:
        """Map every rank file (metadata only: no tensor data is read)."""
        return [self._state(rank) for rank in range(len(self.model_files))]

    def _state(self, rank: int) -> dict:
        if rank not in self._open:
            self._open[rank] = load_shard_file(self.model_files[rank], allow_unsafe_pickle=self.allow_unsafe_pickle)
            self._bytes_read[rank] = 0
        return self._open[rank]

    def _drop_if_over_budget(self, rank: int) -> None:
        if self._bytes_read.get(rank, 0) >= self.read_budget_bytes:
            del self._open[rank]
            self._bytes_read[rank] = 0
            # The mapping goes away with the last tensor view of the file (no reference cycles: no gc needed).

    def release(self) -> None:
        """Unmap all files so the pages read so far leave the resident set."""
        self._open.clear()
        self._bytes_read.clear()
        gc.collect()

    def _local(self, rank: int, name: str) -> torch.Tensor:
        self._drop_if_over_budget(rank)
        value = self._state(rank).get(name)
        if value is None:
            raise MergeError(f"{self.model_files[rank]} has no entry {name!r}")
        local = value._local_tensor if isinstance(value, DTensor) else value
        self._bytes_read[rank] += local.nbytes
        return local

    def pieces(self, info: TensorInfo) -> list[torch.Tensor]:
        """Local pieces of `info` in concatenation order (views into the mapped files)."""
        if info.shard_dim is not None:
            return [self._local(rank, info.name) for rank in info.ranks]
        copies = [self._local(rank, info.name) for rank in info.ranks]
        if not info.is_dtensor:
            # Same rule as verl's merger: a plain entry must be identical on every rank.
            try:
                merge_non_dtensor_shards(info.name, copies)
            except ValueError as exc:
                raise MergeError(f"{exc} (shards in {self.model_files[0].parent})") from exc
        return copies[:1]

    def full_tensor(self, info: TensorInfo, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The whole entry as one new tensor (cast to `dtype` if given)."""
        pieces = self.pieces(info)
        out = torch.empty(info.shape, dtype=dtype or info.dtype)
        if info.shard_dim is None:
            out.copy_(pieces[0])
            return out
        offset = 0
        for piece in pieces:
            size = piece.shape[info.shard_dim]
            out.narrow(info.shard_dim, offset, size).copy_(piece)
            offset += size
        return out

    def iter_byte_chunks(self, info: TensorInfo, dtype: torch.dtype) -> Iterator[torch.Tensor]:
        """Yield contiguous tensors whose bytes, concatenated, are the row-major bytes of the full entry.

        Pieces split along dim 0 are already row-major slices of the result, so they are streamed one rank at
        a time (a large tensor never has all its source pages resident); any other split is assembled first.
        """
        if info.shard_dim is None:
            yield from _row_blocks(self.pieces(info)[0], dtype)
        elif info.shard_dim != 0:
            yield self.full_tensor(info, dtype)
        else:
            for rank in info.ranks:
                yield from _row_blocks(self._local(rank, info.name), dtype)
                self._drop_if_over_budget(rank)  # before the next rank's piece is read


def _row_blocks(tensor: torch.Tensor, dtype: torch.dtype) -> Iterator[torch.Tensor]:
    """`tensor` cast to `dtype` as contiguous blocks of rows (dim 0), in order."""
    if tensor.dim() == 0 or tensor.shape[0] == 0:
        yield tensor.to(dtype).contiguous()
        return
    row_bytes = max(1, tensor[0].numel() * max(dtype.itemsize, tensor.dtype.itemsize))
    rows = max(1, CONVERT_BLOCK_BYTES // row_bytes)
    for block in tensor.split(rows, dim=0):
        yield block.to(dtype).contiguous()
