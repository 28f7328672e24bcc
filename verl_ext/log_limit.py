"""A warning that may fire on every sample of a run, logged often enough to be seen and rarely enough not to
flood the log: the first ``burst`` messages, then at most one per ``interval_s`` saying how many were held back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    """``warn(message)``: log through ``logger`` unless the rate limit holds it back (counted, then reported)."""

    def __init__(self, logger: logging.Logger, burst: int = 5, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.burst, self.interval_s, self.clock = logger, burst, interval_s, clock
        self.seen = 0
        self.held_back = 0
        self._last = float("-inf")
        self._lock = threading.Lock()

    def warn(self, message: str, *args: object) -> bool:
        """Log ``message % args`` as a warning, or count it as held back; returns whether it was logged."""
        with self._lock:
            self.seen += 1
            now = self.clock()
            if self.seen > self.burst and now - self._last < self.interval_s:
                self.held_back += 1
                return False
            held, self.held_back, self._last = self.held_back, 0, now
        suffix = f" ({held} more like it held back since the last one logged)" if held else ""
        self.logger.warning(message + suffix, *args)
        return True
