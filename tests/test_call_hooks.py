"""verl_ext.patches.call_hooks: code around a call (plain, async, or returning an awaitable) and around GC collections."""

from __future__ import annotations

import asyncio
import gc

import pytest

from verl_ext.patches.call_hooks import around_calls, timed_collections


def recorder():
    events: list[tuple] = []
    return events, (lambda: events.append(("enter",)) or len(events)), (lambda token, ok: events.append(("leave", token, ok)))


async def later(value):
    await asyncio.sleep(0)
    return value


async def failing_later():
    await asyncio.sleep(0)
    raise ValueError("late")


@pytest.mark.parametrize("make_call, run", [
    (lambda: (lambda: 7), lambda f: f()),
    (lambda: later, lambda f: asyncio.run(f(7))),
    (lambda: (lambda: later(7)), lambda f: asyncio.run(f())),  # an async method behind a plain decorator
])
def test_leave_follows_the_end_of_each_kind_of_call(make_call, run):
    events, enter, leave = recorder()
    assert run(around_calls(make_call(), enter, leave)) == 7
    assert events == [("enter",), ("leave", 1, True)]


@pytest.mark.parametrize("make_call, run", [
    (lambda: (lambda: 1 / 0), lambda f: f()),
    (lambda: failing_later, lambda f: asyncio.run(f())),
    (lambda: (lambda: failing_later()), lambda f: asyncio.run(f())),
])
def test_leave_is_told_when_the_call_raised(make_call, run):
    events, enter, leave = recorder()
    with pytest.raises((ZeroDivisionError, ValueError)):
        run(around_calls(make_call(), enter, leave))
    assert events == [("enter",), ("leave", 1, False)]


def test_attributes_of_the_function_are_kept():
    def method():
        return None
    method.dispatch_mode = "ONE_TO_ALL"
    wrapped = around_calls(method, lambda: None, lambda token, ok: None)
    assert wrapped.dispatch_mode == "ONE_TO_ALL" and wrapped.__wrapped__ is method and wrapped.__name__ == "method"


def test_each_collection_is_timed_with_its_generation():
    seen: list[tuple[int, float]] = []
    callback = timed_collections(lambda info, seconds: seen.append((info["generation"], seconds)))
    gc.callbacks.append(callback)
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        gc.callbacks.remove(callback)
    assert [generation for generation, _ in seen][-2:] == [1, 2] and all(s >= 0 for _, s in seen)
