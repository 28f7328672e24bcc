"""Optional per-sample log of what ``compute_score`` saw: one JSON line per scored response.

verl 0.9.1's v1 trainer does not put custom reward fields into its training metrics or rollout dumps, so
legal-move rate, format rate and our own time per sample would otherwise be invisible. When
``VERL_EXT_SAMPLE_LOG`` names a file (the train scripts set it next to the run's log), every reward call
appends ``{"time", "split", "env", "case"}`` and every metric of ``verl_ext.reward.METRIC_KEYS`` (score,
valid, format_ok, failed, reward_ms, dataset_ms, and the full-game counts: game, win, draw, loss, ...). Reward workers are separate processes: each line is one ``O_APPEND`` write smaller
than ``PIPE_BUF``, so lines from different workers never interleave. Logging never raises.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

ENV_VAR = "VERL_EXT_SAMPLE_LOG"
_MAX_LINE_BYTES = 4096  # POSIX PIPE_BUF: smaller appends are atomic
logger = logging.getLogger(__name__)
_disabled = False


def record(info: Mapping[str, Any], result: Mapping[str, float]) -> None:
    """Append one sample line when ``VERL_EXT_SAMPLE_LOG`` is set; after a failure, warn once and stop."""
    global _disabled
    path = os.environ.get(ENV_VAR)
    if not path or _disabled:
        return
    try:
        entry = {"time": time.time(), "split": str(info.get("split", ""))[:16], "env": str(info.get("env", ""))[:64],
                 "case": str(info.get("case", ""))[:200], **{k: float(v) for k, v in result.items()}}
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        if len(line) > _MAX_LINE_BYTES:
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except Exception:  # never let bookkeeping take training down
        _disabled = True
        logger.warning("could not append to %s=%s; per-sample logging is off for this process",
                           ENV_VAR, path, exc_info=True)
