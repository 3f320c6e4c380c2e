"""What reading a stream costs per chunk: no async generator started and dropped for each.

litellm takes each chat chunk with an `async for` over the provider's stream, and the
openai SDK's stream starts a new async generator for each `async for`: left alone,
every chunk starts one that the event loop must then finalize. The count is taken
with the interpreter's own async generator hooks, around asyncio's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.models import Usage
from tests.fakes.llm_server import FakeLLM
from tests.gateway.models.test_litellm_backend import boundary, call


@contextmanager
def generators_started() -> Iterator[list[Any]]:
    """Every async generator first iterated meanwhile, in this thread (asyncio's hooks
    still run)."""
    started: list[Any] = []
    hooks = sys.get_asyncgen_hooks()

    def firstiter(generator: Any) -> None:
        started.append(generator)
        if hooks.firstiter is not None:
            hooks.firstiter(generator)

    sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=hooks.finalizer)
    try:
        yield started
    finally:
        sys.set_asyncgen_hooks(*hooks)


async def generators_for(llm: FakeLLM, words: int) -> int:
    llm.reply = " ".join(f"w{i}" for i in range(words))
    async with boundary(llm, processes=0) as models:
        pieces = [p async for p in models.stream(call(), Usage())]  # a first call, to warm
        with generators_started() as started:
            pieces = [p async for p in models.stream(call(), Usage())]
    assert "".join(pieces) == llm.reply
    return len(started)


async def test_the_async_generators_a_stream_starts_do_not_grow_with_its_chunks(
    llm: FakeLLM,
) -> None:
    short, long = await generators_for(llm, 5), await generators_for(llm, 60)
    assert long - short < 5, f"{short} generators for 5 chunks, {long} for 60"
