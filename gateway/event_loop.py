"""The event loop each gateway process runs on: uvloop where it is installed, else asyncio's.

uvloop runs asyncio's API on libuv: the same callbacks, transports and timers, with less
CPU for each wake-up, socket read and pipe write. On the bench of a short Slack turn
(`bench/cpu.py`) it took 7 to 20 % off the worker's and its model process's CPU. Nothing
in the gateway depends on which loop runs it; `GATEWAY_EVENT_LOOP=asyncio` keeps asyncio's
own (where uvloop has no build, or to rule it out when chasing a fault). A model process
reads the same variable: it has no settings of its own.

Both loops keep time by the monotonic clock; uvloop's `time()` moves in steps of a
millisecond, finer than any interval the gateway waits on.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

log = logging.getLogger(__name__)

Choice = Literal["uvloop", "asyncio"]
T = TypeVar("T")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop `choice` names: uvloop's unless asyncio is asked for, or
    uvloop is not installed (then asyncio's, said once at debug level)."""
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        log.debug("uvloop is not installed: running on asyncio's own event loop")
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def running() -> str:
    """The running loop, as logs and `gateway doctor` name it: `uvloop 0.23.0`, `asyncio`."""
    loop = asyncio.get_running_loop()
    if type(loop).__module__.startswith("uvloop"):
        return f"uvloop {importlib.metadata.version('uvloop')}"
    return "asyncio"


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """`asyncio.run(main)`, on the loop `choice` names."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
