"""Waiting on an event: the one polling helper of the tests and benchmarks.

A test that needs something to happen waits for the event itself (a state, a log line, a
metric, an answer), bounded by a timeout, and fails with a message saying what did not
happen; it never sleeps a fixed time and hopes. `wait_until` polls from a thread,
`wait_until_async` from a coroutine (its condition may be a coroutine function).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

Message = str | Callable[[], object]


class WaitTimeout(AssertionError):
    """What a test waited for did not happen in time: a failed assertion."""


def _timed_out(message: Message, timeout: float) -> WaitTimeout:
    said = message() if callable(message) else message
    return WaitTimeout(f"not within {timeout:g} s: {said or 'condition not reached'}")


def wait_until(
    condition: Callable[[], object],
    timeout: float = 10.0,
    message: Message = "",
    *,
    step: float = 0.05,
) -> None:
    """Poll `condition` every `step` seconds until it is true; raise `WaitTimeout` with
    `message` (a text, or a function giving what was seen) once `timeout` passed. The
    condition is checked once more at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise _timed_out(message, timeout)
        time.sleep(step)


async def wait_until_async(
    condition: Callable[[], object | Awaitable[object]],
    timeout: float = 10.0,
    message: Message = "",
    *,
    step: float = 0.05,
) -> None:
    """`wait_until` for a coroutine: the event loop runs while it waits, and the condition
    may be a coroutine function (awaited on every poll)."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() >= deadline:
            raise _timed_out(message, timeout)
        await asyncio.sleep(step)
