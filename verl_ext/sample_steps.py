"""Which step a scored sample belongs to, counted across every reward worker process of a run.

verl 0.9.1 does not pass the trainer's step to ``compute_score``, and its reward workers are separate processes.
The sample log's side file ``<log>.count`` (a few bytes of JSON, updated under ``flock``) counts each split's
samples in the order they were scored. A sync GRPO step scores exactly ``TRAIN_BATCH_SIZE x ROLLOUT_N`` training
samples (verl_ext/runlog.py relies on the same), so with that ``per_step`` (``VERL_EXT_SAMPLES_PER_STEP``, which
the train scripts export) sample ``i`` is in block ``i // per_step``. Without it (and for validation, whose size
the scripts do not know) a block is a burst: a sample after ``GAP_S`` seconds without one of its split starts the
next block. Blocks count from 1 in each log; the scripts pass the step a resumed run starts after
(``VERL_EXT_SAMPLE_STEP_OFFSET``) so that training blocks are verl's step numbers.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from dataclasses import dataclass

GAP_S = 30.0
_fds: dict[tuple[int, str], int] = {}  # (pid, path): a forked child opens its own (flock is per open file)
# flock excludes other open files, not other threads sharing this process's descriptor: verl's reward workers
# score from several threads, whose interleaved truncate/write left '{...}}' in the side file on the H100
# (docs/runs/2026-11-26-h100-smollm2-mixture/), so threads also take this lock
_thread_lock = threading.Lock()


MAX_CASES = 128  # case names the side file remembers (it is read whole under the lock: keep it small)
MAX_CASE_CHARS = 64


@dataclass(frozen=True)
class Position:
    """A sample's place: its ``block`` (1-based in this log), its ``index`` in that block (0-based), its
    ``case_index`` among the samples of its case in that block (0-based), ``cases``, the number of cases of its
    split seen in the log so far (itself included; at most ``MAX_CASES``), ``case_rank``, its case's place in
    the order they were first seen (0-based), and ``case_before``, the number of its case's samples in the block
    before this one (0: none, or the first block)."""

    block: int
    index: int
    case_index: int = 0
    cases: int = 1
    case_rank: int = 0
    case_before: int = 0


def _fd(path: str) -> int:
    key = (os.getpid(), path)
    fd = _fds.get(key)
    if fd is None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _fds[key] = fd
    return fd


def claim(count_path: str, split: str, now: float, per_step: int | None, case: str = "") -> Position:
    """Count one sample of ``split`` (and of ``case`` within its block) and return its position (raises
    OSError/ValueError when the side file cannot be used)."""
    with _thread_lock:
        return _claim_locked(_fd(count_path), split, now, per_step, case[:MAX_CASE_CHARS])


def _count_case(state: dict, split: str, block: int, case: str) -> tuple[int, int, int, int]:
    """This sample's index among its case's samples in ``block``, the number of cases seen so far, its case's
    rank among them and its case's count in the block before (0 when unknown)."""
    key = f"{split}/cases"
    cases = state.get(key)
    if not isinstance(cases, dict):
        cases = {}
    counts = cases.get("counts") if isinstance(cases.get("counts"), dict) else {}
    before = cases.get("before") if isinstance(cases.get("before"), dict) else {}
    if cases.get("block") != block:  # a new block: the last one's counts become "before"
        before = counts if cases.get("block") == block - 1 else {}
        counts = {}
    seen = cases.get("seen") if isinstance(cases.get("seen"), list) else []
    if case not in seen and len(seen) < MAX_CASES:
        seen.append(case)
    case_index = int(counts.get(case, 0))
    if case in counts or len(counts) < MAX_CASES:
        counts[case] = case_index + 1
    state[key] = {"block": block, "counts": counts, "before": before, "seen": seen}
    return (case_index, max(1, len(seen)), seen.index(case) if case in seen else len(seen),
            int(before.get(case, 0)))


def _claim_locked(fd: int, split: str, now: float, per_step: int | None, case: str = "") -> Position:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        raw = os.pread(fd, 65536, 0).decode()
        # the first JSON object: a side file left with trailing bytes by an older version is still read
        state = json.JSONDecoder().raw_decode(raw.strip())[0] if raw.strip() else {}
        count, block, index, last = state.get(split) or (0, 0, -1, 0.0)
        count, block, index, last = int(count), int(block), int(index), float(last)
        if per_step:
            block, index = count // per_step + 1, count % per_step
        elif count == 0 or now - last >= GAP_S:
            block, index = block + 1, 0
        else:
            index += 1
        state[split] = [count + 1, block, index, now]
        case_index, cases, case_rank, case_before = _count_case(state, split, block, case)
        data = json.dumps(state).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return Position(block, index, case_index, cases, case_rank, case_before)
