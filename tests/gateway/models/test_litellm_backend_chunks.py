"""What reading a stream costs per chunk: no async generator started and dropped for each;
and at its end: the read stops at litellm's usage chunk.

litellm takes each chat chunk with an `async for` over the provider's stream, and the
openai SDK's stream starts a new async generator for each `async for`: left alone,
every chunk starts one that the event loop must then finalize. The count is taken
with the interpreter's own async generator hooks, around asyncio's.

Asked for one more item after its usage chunk, litellm's stream assembles the answer
again and runs its success logging (the cost reckoned twice more). The gateway ends its
read at that chunk, with the text and the provider's usage whole; a litellm callback,
which the gateway never registers, shows which calls reached that logging.

litellm also prices a stream as it opens, before any of it is read, by counting
an empty completion's tokens: that loads the model's tokenizer (40 MB). A model
process that streams answers with the provider's usage never loads it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.models import ModelCall, Usage
from gateway.models.litellm_backend import load_litellm
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


@contextmanager
def litellm_successes() -> Iterator[list[dict[str, Any]]]:
    """The call arguments of each call litellm's success logging reached meanwhile."""
    from litellm.integrations.custom_logger import CustomLogger

    litellm, reached = load_litellm(), list[dict[str, Any]]()

    class Seen(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(self, kwargs: Any, *_: Any, **__: Any) -> None:
            reached.append(kwargs)

    seen, callbacks = Seen(), litellm.callbacks
    litellm.callbacks = [*callbacks, seen]
    try:
        yield reached
    finally:
        litellm.callbacks = callbacks


async def test_a_stream_ends_at_litellms_usage_chunk_with_its_text_and_usage_whole(
    llm: FakeLLM,
) -> None:
    llm.reply = " ".join(f"w{i}" for i in range(30))
    async with boundary(llm, processes=0) as models:
        [p async for p in models.stream(call(), Usage())]  # a first call, to warm
        with litellm_successes() as reached:
            usage = Usage()
            pieces = [p async for p in models.stream(call(), usage)]
            # a one-shot call after it: its logging comes after any the stream's had
            side = ModelCall("openai/side-model", [{"role": "user", "content": "hi"}], 20.0)
            await models.complete(side)
            async with asyncio.timeout(10):
                while not reached:
                    await asyncio.sleep(0.01)
    assert "".join(pieces) == llm.reply
    assert usage.completion_tokens == 30  # the provider's count (one a word), not litellm's
    assert usage.prompt_tokens > 0
    assert [kwargs["model"] for kwargs in reached] == ["side-model"]


TOKENIZER_PROBE = """
import asyncio, json, sys
from gateway.models.litellm_backend import LitellmBackend, count_tokens, load_litellm, warm_up
from gateway.models.types import ModelCall, ModelSettings, ResponseChain, Usage
TOKENIZER = "litellm.litellm_core_utils.default_encoding"
async def main():
    await warm_up(load_litellm())
    seen = {"warmed": TOKENIZER in sys.modules}
    backend = LitellmBackend(ModelSettings(api_base=sys.argv[1], api_key="sk-test"))
    usage, chained, message = Usage(), Usage(), [{"role": "user", "content": "hello"}]
    call = ModelCall("openai/m", message, 20.0)
    pieces = [p async for p in backend.stream(call, usage)]
    seen |= {"streamed": TOKENIZER in sys.modules, "text": "".join(pieces)}
    pieces = [p async for p in backend.stream_response(call, chained, ResponseChain())]
    seen |= {"responses": TOKENIZER in sys.modules, "chained": "".join(pieces)}
    seen |= {"tokens": [usage.completion_tokens, chained.completion_tokens]}
    seen |= {"counted": count_tokens("openai/m", message)}
    print(json.dumps(seen | {"after_count": TOKENIZER in sys.modules}))
asyncio.run(main())
"""


def test_a_streamed_call_with_the_providers_usage_never_loads_the_tokenizer(
    llm: FakeLLM,
) -> None:
    llm.reply = "one two three"
    done = subprocess.run(  # a fresh interpreter: this one may have counted tokens already
        [sys.executable, "-c", TOKENIZER_PROBE, llm.api_base],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["text"] == seen["chained"] == "one two three"
    assert seen["tokens"] == [3, 3]  # the provider's usage, in both APIs
    assert (seen["warmed"], seen["streamed"], seen["responses"]) == (False, False, False)
    assert seen["counted"] > 0 and seen["after_count"]  # a count loads it: the probe sees it
