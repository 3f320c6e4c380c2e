"""A socket a test left open fails that test, saying where it was opened.

An asyncio connection (Redis, HTTP to a loopback fake, a model client's pool)
still open when its test's event loop has closed is a leak: left alone, it is
garbage-collected during some later test, whose run then fails on the
ResourceWarning with nothing to say where the socket came from. Every socket
transport made during a test is remembered (weakly) with the stack that made it;
after the test's fixtures are torn down, one still open on a closed loop is
reported as the test's error, with that stack, and kept referenced to the end of
the run so that no later test trips on its collection. A TLS connection its owner
closed whose goodbye (the close_notify exchange, which asyncio runs after
`close()` returns) was still under way when the loop closed is no leak: it is only
kept referenced.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import traceback
import weakref
from asyncio import selector_events, sslproto
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import pytest

_Transport = selector_events._SelectorTransport
_opened: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_kept: list[Any] = []  # the leaks found: never collected, never warned of again
_init = _Transport.__init__

_ROOT = str(Path(__file__).resolve().parents[2])


def _where(stack: traceback.StackSummary) -> str:
    """Our frames that led here, and the library's last few (which client it was)."""
    ours = [f for f in stack if f.filename.startswith(_ROOT) and "/.venv/" not in f.filename]
    libraries = [f for f in stack if "/site-packages/" in f.filename][-3:]
    return "".join(traceback.format_list(ours[-8:] + libraries))


def _remembered_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    stack = _where(traceback.extract_stack()[:-1])
    task = asyncio.current_task(self._loop)
    if task is not None:  # a task's stack starts at its coroutine: name who it is
        stack = f"  in task {task.get_name()}, {task.get_coro()!r}\n{stack}"
    _opened[self] = stack


_Transport.__init__ = _remembered_init  # type: ignore[method-assign]


def _closing_tls(transport: Any) -> bool:
    """Whether this socket carries TLS its owner has closed (the goodbye under way)."""
    protocol = getattr(transport, "_protocol", None)
    if not isinstance(protocol, sslproto.SSLProtocol):
        return False
    state = getattr(protocol, "_state", None)
    return state in (sslproto.SSLProtocolState.FLUSHING, sslproto.SSLProtocolState.SHUTDOWN)


def _left_open() -> list[tuple[Any, str]]:
    found = []
    for transport, stack in list(_opened.items()):
        loop: asyncio.AbstractEventLoop | None = getattr(transport, "_loop", None)
        if getattr(transport, "_sock", None) is None or loop is None or not loop.is_closed():
            continue
        if _closing_tls(transport):
            _kept.append(transport)
        else:
            found.append((transport, stack))
    return found


@pytest.fixture
async def model_clients_closed() -> AsyncIterator[None]:
    """litellm keeps an HTTP client for each event loop it is called on, for the life of
    the process: a test's are closed (and forgotten) in its own loop, before it ends."""
    yield
    litellm = sys.modules.get("litellm")  # a test that never called it does not import it
    if litellm is not None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        await close_litellm_async_clients()
        litellm.in_memory_llm_clients_cache.flush_cache()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every coroutine test closes litellm's clients last (set up first, torn down last)."""
    for item in items:
        if inspect.iscoroutinefunction(getattr(item, "obj", None)):
            item.fixturenames.insert(0, "model_clients_closed")  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    leaked = _left_open()
    _opened.clear()
    if not leaked:
        return
    _kept.extend(transport for transport, _ in leaked)
    where = "\n".join(f"{t!r} opened at:\n{stack}" for t, stack in leaked)
    pytest.fail(f"{len(leaked)} socket(s) left open by this test:\n{where}")
