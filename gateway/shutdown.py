"""Stopping on a signal: the first asks for a graceful stop, the second stops at once.

    SIGINT, SIGTERM or SIGHUP ─> `requested` is set: the command takes no new work,
                                 lets what runs finish (for its grace period) and
                                 leaves the rest pending for the next run
    the second one            ─> the command's main task is cancelled: only the
                                 `finally` blocks on the way out run (running jobs
                                 are left pending, the model processes and the
                                 embedded Redis are stopped); the command exits 130
    a third                   ─> the process exits there and then

A stop cancels tasks, and a cancellation can be lost: Python 3.11's
`asyncio.wait_for` (which redis-py awaits inside its commands) returns the result
that arrived together with the cancel and drops the cancel. `cancel_and_wait`
cancels again what is still running, so no stop waits on a task that went on.

A Ctrl-C in a terminal reaches the whole foreground process group; the
processes the gateway starts (the embedded Redis, the model processes) run in
sessions of their own, so they are stopped by the gateway on its way out, not
by the terminal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Collection
from typing import Any

log = logging.getLogger(__name__)

FORCED_EXIT = 128 + signal.SIGINT  # what a shell reports for a process stopped by Ctrl-C
RECANCEL_EVERY = 0.25  # seconds a cancelled task gets before it is cancelled again


async def cancel_and_wait(
    tasks: Collection[asyncio.Task[Any]], within: float | None = None
) -> set[asyncio.Task[Any]]:
    """Cancel `tasks` and wait until they end, cancelling again every RECANCEL_EVERY
    seconds those that went on (their cancel was lost); the ones still running after
    `within` seconds are returned, not waited for."""
    running = set(tasks)
    deadline = None if within is None else time.monotonic() + within
    while running:
        for task in running:
            task.cancel()
        wait = RECANCEL_EVERY
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                break
        _, running = await asyncio.wait(running, timeout=wait)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # seen here, as `gather(return_exceptions=True)` sees it
    return running


class Shutdown:
    """The stop request of one command: set by a signal, or by the command itself."""

    def __init__(self, grace: float | None = None) -> None:
        self.requested = asyncio.Event()
        self.grace = grace
        self.signals = 0
        self._main: asyncio.Task[object] | None = None

    @property
    def forced(self) -> bool:
        """A stop at once was asked for."""
        return self.signals >= 2

    def install(self) -> Shutdown:
        """Take SIGINT, SIGTERM and SIGHUP over for the running task (the command's main one).

        A signal that is ignored when the command starts stays ignored: SIGHUP under
        `nohup`, SIGINT in a job a shell started in the background (`gateway run &`),
        which a Ctrl-C in that terminal is not meant for.
        """
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                loop.add_signal_handler(sig, self._on_signal)
        return self

    def _on_signal(self) -> None:
        self.signals += 1
        if self.signals == 1:
            self.requested.set()
            wait = (
                f"replies being written get {self.grace:g} s to finish; "
                if self.grace is not None
                else ""
            )
            log.warning("stopping: %sCtrl-C again stops at once", wait)
        elif self.signals == 2:
            log.warning("stopping at once")
            if self._main is not None:
                self._main.cancel()
        else:
            os._exit(FORCED_EXIT)  # the way out itself is stuck: nothing more is waited for
