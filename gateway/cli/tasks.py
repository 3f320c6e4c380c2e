"""The tasks of a long-running command: started together, ended by the first, stopped in order.

`gateway run` holds a worker, a web server (`gateway/http/serve.py`), connections and
the console in one process; the other commands hold one or two of them. The first to end (a stop
asked for, a connection that failed) ends the command, and a failure is raised
from here once everything it started has stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

from gateway import shutdown
from gateway.errors import GatewayError

FORCED_CLEANUP = 0.5  # after a second Ctrl-C, what the run's parts still do on their way out


def stop_event() -> asyncio.Event:
    """Set by the first SIGINT, SIGTERM or SIGHUP; the second stops the command at once."""
    return shutdown.Shutdown().install().requested


def task(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    return asyncio.create_task(coro)


async def first(*tasks: asyncio.Task[Any], cancel: bool = True) -> None:
    """Wait for the first task to end; cancel the rest (unless told not to); re-raise a failure."""
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    if cancel:
        for pending_task in pending:
            pending_task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for done_task in done:
        if not done_task.cancelled() and done_task.exception() is not None:
            raise done_task.exception()  # type: ignore[misc]


def raise_first_failure(results: Sequence[object]) -> None:
    for result in results:
        if isinstance(result, GatewayError):
            raise result


async def stop_run(
    stopping: shutdown.Shutdown,
    working: asyncio.Task[None],
    ready: asyncio.Event,
    tasks: Sequence[asyncio.Task[Any]],
    readers: Sequence[asyncio.Task[Any]],
) -> list[object]:
    """Stop every part of a run: the worker and web finish what they hold (the worker
    for its grace), readers close. A second Ctrl-C (this task cancelled) cuts it short."""
    stopping.requested.set()
    parts = [*tasks, *readers]
    try:
        if stopping.forced:
            raise asyncio.CancelledError  # it came before this stop began
        stopped = [task(shutdown.cancel_and_wait(readers))]
        if not ready.is_set():  # still starting (seconds of import): it holds nothing yet
            stopped.append(task(shutdown.cancel_and_wait([working])))
        await asyncio.wait([*stopped, *tasks])
    except asyncio.CancelledError:
        # Their own clean-up (leases given up, the model processes stopped) takes
        # moments, and needs Redis still there; what is left is cancelled on exit.
        await shutdown.cancel_and_wait(parts, within=FORCED_CLEANUP)
        raise
    return [_outcome(part) for part in parts]


def _outcome(part: asyncio.Task[Any]) -> object:
    if part.cancelled():
        return asyncio.CancelledError()
    return part.exception() or part.result()
