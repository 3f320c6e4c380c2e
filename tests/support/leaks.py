"""A Redis connection a test left open fails that test, saying where it was opened.

An asyncio Redis connection still connected when its test's event loop has closed
is a leak: left alone, it is garbage-collected during some later test, whose run
then fails on the ResourceWarning with nothing to say where the connection came
from. Every connection made during a test is remembered (weakly) with the stack
that made it; after the test's fixtures are torn down, one still connected on a
closed loop is reported as the test's error, with that stack, and kept referenced
to the end of the run so that no later test trips on its collection.
"""

from __future__ import annotations

import traceback
import weakref
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

_opened: weakref.WeakKeyDictionary[AbstractConnection, str] = weakref.WeakKeyDictionary()
_kept: list[AbstractConnection] = []  # the leaks found: never collected, never warned of again
_init = AbstractConnection.__init__


_ROOT = str(Path(__file__).resolve().parents[2])


def _remembered_init(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    ours = [
        frame
        for frame in traceback.extract_stack()[:-1]
        if frame.filename.startswith(_ROOT) and "/.venv/" not in frame.filename
    ]
    _opened[self] = "".join(traceback.format_list(ours[-8:]))


AbstractConnection.__init__ = _remembered_init  # type: ignore[method-assign]


def _left_open() -> list[tuple[AbstractConnection, str]]:
    found = []
    for connection, stack in list(_opened.items()):
        writer = getattr(connection, "_writer", None)
        loop = getattr(writer, "_loop", None)
        if writer is not None and loop is not None and loop.is_closed():
            found.append((connection, stack))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    leaked = _left_open()
    _opened.clear()
    if not leaked:
        return
    _kept.extend(connection for connection, _ in leaked)
    where = "\n".join(f"{c!r} opened at:\n{stack}" for c, stack in leaked)
    pytest.fail(f"{len(leaked)} Redis connection(s) left open by this test:\n{where}")
