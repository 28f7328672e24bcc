"""A thread-safe LRU cache that computes each key once, even when many threads ask at the same time.

verl's reward workers score the n samples of one GRPO group concurrently in a thread pool; without
per-key single flight, all n would miss the cache together and repeat the per-position analysis.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class OnceLRU(Generic[V]):
    """LRU mapping ``key -> value`` where ``get_or_compute`` runs ``compute`` once per key."""

    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._inflight: dict[Hashable, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            key_lock = self._inflight.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._data:  # computed by another thread while we waited
                    self._data.move_to_end(key)
                    self.hits += 1
                    return self._data[key]
            try:
                value = compute()
            except BaseException:
                with self._lock:
                    self._inflight.pop(key, None)
                raise
            with self._lock:
                self.misses += 1
                self._store(key, value)
                self._inflight.pop(key, None)
            return value

    def put(self, key: Hashable, value: V) -> None:
        """Store ``value`` for ``key`` (computed elsewhere, e.g. by the dataset ahead of the reward)."""
        with self._lock:
            self._store(key, value)

    def _store(self, key: Hashable, value: V) -> None:
        """Insert as most recent and evict the least recent beyond ``maxsize`` (the caller holds the lock)."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)
