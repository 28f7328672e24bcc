"""Code run around a function's calls, or around Python's garbage collections: what the patches we load into verl's
processes (the phase timer, the GC freeze) hook in with.

``around_calls`` handles the three kinds of functions verl's workers have: plain, ``async def``, and plain ones that
return an awaitable (an async method behind a plain decorator such as ``torch.no_grad``), where the call ends only
when the awaitable does. ``timed_collections`` makes a ``gc.callbacks`` entry that reports each collection's length.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, TypeVar

Token = TypeVar("Token")


def around_calls(function: Callable[..., Any], enter: Callable[[], Token],
                 leave: Callable[[Token, bool], None]) -> Callable[..., Any]:
    """``function`` with ``enter()`` before each call and ``leave(token, returned)`` once the call has ended
    (``returned`` False when it raised); attributes such as verl's ``@register`` dispatch mode are kept."""
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def around_async(*args: Any, **kwargs: Any) -> Any:
            token = enter()
            returned = False
            try:
                result = await function(*args, **kwargs)
                returned = True
                return result
            finally:
                leave(token, returned)
        return around_async

    async def awaited(result: Any, token: Any) -> Any:
        returned = False
        try:
            value = await result
            returned = True
            return value
        finally:
            leave(token, returned)

    @functools.wraps(function)
    def around(*args: Any, **kwargs: Any) -> Any:
        token = enter()
        try:
            result = function(*args, **kwargs)
        except BaseException:
            leave(token, False)
            raise
        if inspect.isawaitable(result):
            return awaited(result, token)
        leave(token, True)
        return result
    return around


def timed_collections(record: Callable[[dict[str, int], float], None]) -> Callable[[str, dict[str, int]], None]:
    """A ``gc.callbacks`` entry that calls ``record(info, seconds)`` at the end of each garbage collection."""
    started: list[float] = []

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            record(info, time.perf_counter() - started.pop())
    return on_collection
