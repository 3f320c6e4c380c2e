"""The litellm backend: every call, count and lookup that goes through litellm.

litellm is imported on first use only (it costs seconds and hundreds of MB),
so processes that never call a model never load it; and it is told to use its
bundled model map instead of fetching one at import. This is the one module
that imports it; its exceptions are mapped to the error tree here.

Long because: every call shape litellm serves here (chat completions, the
Responses API, their streams, counts, transcription, all on `LitellmBackend`)
and the mapping of its errors stay behind that one import.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any

from gateway.errors import (
    ModelBadResponse,
    ModelError,
    ModelRateLimited,
    ModelRejected,
    ModelStalled,
    ModelTimeout,
    ModelUnavailable,
    ProviderStateLost,
)
from gateway.models.cost import call_cost, transcription_usage
from gateway.models.providers import (
    base_model,
    means_state_lost,
    to_responses_input,
    to_responses_tools,
)
from gateway.models.responses_stream import response_event
from gateway.models.retries import Deadline, with_retries
from gateway.models.tool_calls import FunctionCalls, ToolCallParts
from gateway.models.types import Message, ModelCall, ModelSettings, ResponseChain, ToolCall, Usage
from gateway.settings.defaults import ECHO_MODEL

log = logging.getLogger(__name__)

# An opened stream: its first text (None: it ended without any), its iterator, the tool
# calls read from it so far (each attempt has its own, so a retry repeats none), and the
# function that reads the text of each later item.
Opened = tuple[str | None, Any, ToolCallParts | FunctionCalls, Callable[[Any], str]]
CLOSE_TIMEOUT = 5.0  # for closing a stalled stream's connection

# litellm prepares a call in an executor thread, which hands back the coroutine
# that sends the request. A call cancelled meanwhile (a /stop, an early start that
# is not kept) never sends it, and Python warns that it was never awaited.
UNSENT_REQUEST = (
    r"coroutine '(OpenAIChatCompletion\.(async_streaming|acompletion)"
    r"|BaseLLMHTTPHandler\.\w+)' was never awaited"
)

_litellm: ModuleType | None = None


def load_litellm() -> ModuleType:
    """Import litellm once, offline (its bundled model map, no telemetry)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        litellm.disable_streaming_logging = True  # no callbacks here; saves CPU per call
        _unpriced_at_open(litellm)
        warnings.filterwarnings("ignore", message=UNSENT_REQUEST, category=RuntimeWarning)
        _litellm = litellm
    return _litellm


def _unpriced_at_open(litellm: ModuleType) -> None:
    """litellm prices a stream the moment it opens, before any of it is read (for the
    headers its proxy sends): with no usage yet, it counts the tokens of an empty
    completion for each name the model could be priced under. That loads the model's
    tokenizer (tiktoken's cl100k_base: 40 MB in every model process) and costs about
    0.5 ms a call, for a figure nobody reads: the gateway prices each call itself, from
    the provider's usage, when the stream ends (`cost.py`). So a stream (chat or
    Responses) that has not been read is given no price; all else is priced as before."""
    price = getattr(litellm, "response_cost_calculator", None)
    if not callable(price) or hasattr(price, "__wrapped__"):
        return
    streams = _stream_types(litellm)
    if not streams:
        return

    @functools.wraps(price)
    def priced(*args: Any, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("response_object"), streams):
            return None
        return price(*args, **kwargs)

    setattr(litellm, "response_cost_calculator", priced)  # noqa: B010  (a module's attribute)


def _stream_types(litellm: ModuleType) -> tuple[type, ...]:
    """litellm's chat stream and Responses stream classes (those this litellm has)."""
    found = [getattr(litellm, "CustomStreamWrapper", None)]
    try:
        from litellm.responses.streaming_iterator import BaseResponsesAPIStreamingIterator
    except ImportError:
        pass
    else:
        found.append(BaseResponsesAPIStreamingIterator)
    return tuple(kind for kind in found if isinstance(kind, type))


async def warm_up(litellm: ModuleType) -> None:
    """One chat stream and one Responses call answered by litellm itself (its mock
    response: nothing is sent anywhere). A first call loads modules and tables that
    the import leaves for later: about 0.4 s of CPU that would otherwise land on the
    first turn, inside its idle timeout.

    The stream is closed after its first chunk, as a turn's stream is at its usage
    chunk (`_closed_at_usage`): read to its end, a mock stream (it carries no usage) has
    litellm count its tokens, which loads the tokenizer that nothing else needs."""
    messages = [{"role": "user", "content": "."}]
    try:
        stream = await litellm.acompletion(
            model="openai/warm-up", messages=messages, stream=True, mock_response=".", api_key="-"
        )
        async for _ in stream:
            break
        await _close(stream)
        await litellm.aresponses(model="openai/warm-up", input=".", mock_response=".", api_key="-")
    except Exception as exc:  # a litellm without mock responses: the first call pays
        log.debug("litellm's warm-up call failed: %s", type(exc).__name__)


def model_window(model: str) -> int | None:
    """The input window litellm's model map gives `model`, in tokens (`Models` keeps it)."""
    if model == ECHO_MODEL:
        return None  # and litellm stays unimported
    try:
        info = load_litellm().get_model_info(base_model(model))
    except Exception:  # litellm raises plain Exception for a model it has no entry for
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def model_vision(model: str) -> bool:
    """Whether litellm's model map says `model` reads images (`Models` keeps the answer)."""
    if model == ECHO_MODEL:
        return False
    try:
        return bool(load_litellm().supports_vision(model=model))
    except Exception:  # a model it has no entry for
        return False


def count_tokens(model: str, messages: Sequence[Message]) -> int:
    """Tokens of `messages` with the model's tokenizer where litellm has one."""
    return int(load_litellm().token_counter(model=model, messages=list(messages)))


class LitellmBackend:
    """Streams, one-shot calls, counts and windows through litellm, in this process."""

    def __init__(self, settings: ModelSettings) -> None:
        self.api_base = settings.api_base
        self.api_key = settings.api_key
        self.retries = settings.retries
        self.idle_timeout = settings.idle_timeout
        self.prices = settings.prices

    async def start(self) -> None:
        """Import litellm now (seconds of it), and pay its first call's own costs, so that
        no turn pays for them (nor counts them as the model's silence)."""
        await warm_up(load_litellm())

    async def aclose(self) -> None:
        """Nothing to let go of: litellm's clients live as long as the process."""

    async def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        """The reply's text in pieces; `usage` and `calls` are filled in when the stream ends.

        Failures before the first piece are retried with backoff (429, 5xx,
        timeouts, refused connections), all within the call's timeout (see
        `retries`); after it, they end the stream with a ModelError, since a
        half-shown answer cannot be silently redone. A stream silent for the
        idle timeout (`GATEWAY_STREAM_IDLE_TIMEOUT`), counted from the moment
        its request is sent, is cut off with ModelStalled: retried like a
        timeout before the first piece, the end of the stream after it.
        """
        opened = await with_retries(
            lambda d: self._open_stream(call, usage, d), self.retries, call.timeout
        )
        async for piece in self._read(opened, call):
            yield piece
        _hand_over(opened, calls)
        self._price(call, usage)

    async def stream_response(
        self,
        call: ModelCall,
        usage: Usage,
        chain: ResponseChain,
        calls: list[ToolCall] | None = None,
    ) -> AsyncIterator[str]:
        """A turn through the Responses API, continuing `chain.previous_id` when set.

        `chain.response_id` is filled in with the new response's id, `calls` with
        the function calls it asked for. A provider that no longer holds the
        previous response raises ProviderStateLost (never retried here: the
        caller resends the turn in full).
        """
        opened = await with_retries(
            lambda d: self._open_response_stream(call, usage, chain, d), self.retries, call.timeout
        )
        async for piece in self._read(opened, call):
            yield piece
        _hand_over(opened, calls)
        self._price(call, usage)

    async def complete(self, call: ModelCall, usage: Usage) -> str:
        """One non-streamed answer (side questions, summaries): offered no tools. Its
        attempts share the call's timeout: nothing shows before the whole answer, so
        that is the only bound a silent provider meets."""
        response = await with_retries(
            lambda d: self._acompletion(call, d, stream=False), self.retries, call.timeout
        )
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ModelBadResponse("the answer held no choices")
        text = choices[0].message.content or ""
        _fill_usage(usage, getattr(response, "usage", None))
        self._price(call, usage)
        return str(text)

    def _price(self, call: ModelCall, usage: Usage) -> None:
        """The ended call's cost, beside its tokens (None where no price is known)."""
        usage.cost = call_cost(load_litellm(), call.model, usage, self.prices)

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int:
        return count_tokens(model, messages)

    async def count(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        """`count_tokens` of each list, in a thread (a tokenizer's first use loads its tables)."""
        return await asyncio.to_thread(lambda: [count_tokens(model, b) for b in batches])

    async def window(self, model: str) -> int | None:
        return await asyncio.to_thread(model_window, model)

    async def vision(self, model: str) -> bool:
        return await asyncio.to_thread(model_vision, model)

    async def transcribe(
        self, model: str, audio: bytes, filename: str, timeout: float, usage: Usage
    ) -> str:
        """The text of a voice message (litellm's transcription endpoint), not retried."""
        litellm = load_litellm()
        kwargs: dict[str, Any] = {
            "model": model,
            "file": (filename, audio),
            "timeout": timeout,
            "api_base": self.api_base,
            "api_key": self.api_key,
        }
        try:
            response = await asyncio.wait_for(litellm.atranscription(**kwargs), timeout)
        except Exception as exc:  # litellm raises many types; each is mapped to our tree
            raise self._map(exc) from exc
        transcription_usage(litellm, model, response, usage, self.prices)
        return str(getattr(response, "text", "") or "")

    async def _acompletion(self, call: ModelCall, deadline: Deadline, *, stream: bool) -> Any:
        litellm = load_litellm()
        kwargs: dict[str, Any] = {
            "model": call.model,
            "messages": list(call.messages),
            "stream": stream,
            "timeout": call.timeout,
            "num_retries": 0,
            "api_base": self.api_base,
            "api_key": self.api_key,
        }
        if stream:
            kwargs["stream_options"] = {"include_usage": True}
            if call.tools:
                kwargs["tools"] = list(call.tools)
        return await self._send(litellm.acompletion, kwargs, call, deadline, "max_tokens")

    async def _aresponses(self, call: ModelCall, chain: ResponseChain, deadline: Deadline) -> Any:
        litellm = load_litellm()
        instructions, items = to_responses_input(call.messages)
        kwargs: dict[str, Any] = {
            "model": call.model,
            "input": items,
            "stream": True,
            "timeout": call.timeout,
            "api_base": self.api_base,
            "api_key": self.api_key,
        }
        if instructions is not None:
            kwargs["instructions"] = instructions
        if chain.previous_id:
            kwargs["previous_response_id"] = chain.previous_id
        if call.tools:
            kwargs["tools"] = to_responses_tools(call.tools)
        return await self._send(litellm.aresponses, kwargs, call, deadline, "max_output_tokens")

    async def _send(
        self,
        endpoint: Callable[..., Awaitable[Any]],
        kwargs: dict[str, Any],
        call: ModelCall,
        deadline: Deadline,
        max_tokens_name: str,
    ) -> Any:
        """One litellm request with the call's limits, ended at its deadline, its failure
        mapped to our tree."""
        if call.max_tokens is not None:
            kwargs[max_tokens_name] = call.max_tokens
        if call.temperature is not None:
            kwargs["temperature"] = call.temperature
        try:
            return await asyncio.wait_for(endpoint(**kwargs), deadline.left())
        except Exception as exc:  # litellm raises many types; each is mapped to our tree
            raise self._map(exc) from exc

    async def _open_response_stream(
        self, call: ModelCall, usage: Usage, chain: ResponseChain, deadline: Deadline
    ) -> Opened:
        """Open a Responses stream and read it up to its first text (see `_open_stream`)."""
        send = functools.partial(self._aresponses, call, chain, deadline)
        iterator, first = await self._opening(send, call, deadline)
        calls = FunctionCalls()
        text_of = functools.partial(response_event, usage=usage, chain=chain, calls=calls)
        return await self._first_text(iterator, first, call, text_of), iterator, calls, text_of

    async def _open_stream(self, call: ModelCall, usage: Usage, deadline: Deadline) -> Opened:
        """Open the stream and read it up to its first text, so that every failure
        before anything is shown (no headers, a stall after them, or after a tool
        call's first fragments, included) can retry. An answer of tool calls alone is
        read to its end here."""
        send = functools.partial(self._acompletion, call, deadline, stream=True)
        iterator, first = await self._opening(send, call, deadline)
        parts = ToolCallParts()
        text_of = functools.partial(_chunk_text, usage=usage, parts=parts)
        return await self._first_text(iterator, first, call, text_of), iterator, parts, text_of

    async def _opening(
        self, send: Callable[[], Awaitable[Any]], call: ModelCall, deadline: Deadline
    ) -> tuple[Any, Any]:
        """The stream `send` opens and its first item (None: it ended at once).

        The wait for the response's headers and the one for its first item are one
        silence, counted from the moment the request is sent: over the idle timeout
        (or past the call's deadline), the stream is closed and raises ModelStalled.
        """
        silence = deadline.bound(min(self.idle_timeout, call.timeout))
        opened: list[Any] = []

        async def first_item() -> Any:
            opened.append(_one_iterator((await send()).__aiter__()))
            return await _next_or_none(opened[0])

        try:
            first = await asyncio.wait_for(first_item(), silence)
        except TimeoutError:
            if opened:
                await _close(opened[0])
            raise ModelStalled(f"the model sent nothing for {silence:g}s") from None
        except Exception as exc:  # litellm raises many types; each is mapped to our tree
            raise self._map(exc) from exc
        return opened[0], first

    async def _read(self, opened: Opened, call: ModelCall) -> AsyncIterator[str]:
        """An opened stream's text: the first piece, then each later item's, read by the
        function its opening used."""
        text, iterator, _, text_of = opened
        if text is None:
            return
        yield text
        while (item := await self._next_item(iterator, call)) is not None:
            if text := text_of(item):
                yield text
            if await _closed_at_usage(iterator, item):
                return

    async def _first_text(
        self, iterator: Any, first: Any, call: ModelCall, text_of: Callable[[Any], str]
    ) -> str | None:
        """The stream's first text, from its `first` item on, each read by `text_of`;
        None when it ends without any."""
        item = first
        while item is not None:
            if text := text_of(item):
                return text
            if await _closed_at_usage(iterator, item):
                return None
            item = await self._next_item(iterator, call)
        return None

    async def _next_item(self, iterator: Any, call: ModelCall) -> Any:
        """The stream's next item, None at its end; a failure becomes a ModelError.

        A stream that sends nothing for the idle timeout is closed (its connection
        is not left to the garbage collector) and raises ModelStalled. So does one
        whose read litellm timed out: its timeout is the call's, counted per read, a
        silence as well; when the call's timeout is not above the idle timeout, the
        two timers come due together, and litellm's comes first.
        """
        idle = min(self.idle_timeout, call.timeout)
        try:
            async with asyncio.timeout(idle):  # no task per item, as wait_for makes one
                return await iterator.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            await _close(iterator)
            raise ModelStalled(f"the model sent nothing for {idle:g}s") from None
        except Exception as exc:  # litellm raises many types; each is mapped to our tree
            mapped = self._map(exc)
            if type(mapped) is ModelTimeout:
                raise ModelStalled(f"the model sent nothing for {idle:g}s") from exc
            raise mapped from exc

    def _map(self, exc: BaseException) -> ModelError:
        """litellm's exception, as a ModelError a caller can act on (never with the key)."""
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, asyncio.TimeoutError):
            return ModelTimeout("the model did not answer in time")
        name = type(exc).__name__
        status = getattr(exc, "status_code", None)
        full_detail = self._redact(str(getattr(exc, "message", "") or exc))
        detail = full_detail[:200]
        text = f"{name}{f' {status}' if status else ''}: {detail}"
        if means_state_lost(full_detail):
            return ProviderStateLost(text)
        if name == "Timeout" or "Timeout" in name:
            return ModelTimeout(text)
        if name == "RateLimitError" or status == 429:
            return ModelRateLimited(text, retry_after=_retry_after(exc))
        if name in {
            "APIConnectionError",
            "InternalServerError",
            "ServiceUnavailableError",
            "BadGatewayError",
        } or (isinstance(status, int) and status >= 500):
            return ModelUnavailable(text)
        return ModelRejected(text)

    def _redact(self, text: str) -> str:
        return text.replace(self.api_key, "***") if self.api_key else text


def _chunk_text(chunk: Any, usage: Usage, parts: ToolCallParts) -> str:
    """The text of one chat stream chunk; records the usage and tool call fragments it
    carries."""
    _fill_usage(usage, getattr(chunk, "usage", None))
    choices = getattr(chunk, "choices", None) or []
    if not choices:
        return ""
    delta = getattr(choices[0], "delta", None)
    parts.add(getattr(delta, "tool_calls", None))
    return str(getattr(delta, "content", None) or "")


def _hand_over(opened: Opened, calls: list[ToolCall] | None) -> None:
    """The ended stream's tool calls, into the caller's list (when it gave one)."""
    found = opened[2].calls()
    if calls is not None:
        calls.extend(found)


class _OneIterator:
    """A provider's stream read through one iterator of it, however often it is asked for one.

    litellm's chat stream takes each chunk with `async for chunk in completion_stream:`
    and returns from inside the loop. The openai SDK's stream makes a new async generator
    for each `async for`, so each chunk started one and dropped it, and the event loop
    finalized each (a write to its self-pipe, a wake-up, a task to close it): 22 of the
    model process's 29 socket writes of a short turn.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.iterator = stream.__aiter__()

    def __aiter__(self) -> Any:
        return self.iterator

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    async def aclose(self) -> None:
        """The iterator, then the stream (the connection) under it."""
        try:
            await self.iterator.aclose()
        finally:
            close = getattr(self.stream, "aclose", None) or getattr(self.stream, "close", None)
            if close is not None and inspect.isawaitable(result := close()):
                await result


def _one_iterator(wrapper: Any) -> Any:
    """`wrapper` (litellm's chat stream) with its provider stream read by `_OneIterator`
    where that stream makes an async generator each time it is iterated; anything else
    (a Responses stream, a mock response) as it is."""
    inner = getattr(wrapper, "completion_stream", None)
    if inner is not None and inspect.isasyncgenfunction(getattr(type(inner), "__aiter__", None)):
        wrapper.completion_stream = _OneIterator(inner)
    return wrapper


async def _closed_at_usage(stream: Any, item: Any) -> bool:
    """Whether `item` is the last a chat stream has, litellm's usage chunk: then the
    stream is closed here.

    Asked for usage, litellm's chat stream sends it in a chunk of its own (no choices)
    once its provider's stream has ended (usage found on earlier chunks it strips), and
    says so in `sent_last_chunk`. Asked for one more item after it, the stream would
    assemble the whole answer a second time, in a thread, and run litellm's success
    logging, which reckons the call's cost twice more: 2.5 ms of CPU a call, a quarter
    of the call's own (bench/model_call.py). The gateway reads neither (it registers no
    litellm callbacks, and prices the call itself).
    """
    last = (
        getattr(stream, "sent_last_chunk", False) is True
        and getattr(item, "usage", None) is not None
        and not getattr(item, "choices", None)
    )
    if last:
        await stream.aclose()
    return last


async def _next_or_none(iterator: Any) -> Any:
    """The stream's next item; None at its end."""
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return None


async def _close(stream: Any) -> None:
    """Close a stream's connection now (a stalled one's, one read no further); a close
    that fails or hangs is only logged."""
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await asyncio.wait_for(close(), CLOSE_TIMEOUT)
    except Exception as exc:  # the stream is given up either way; the close is a courtesy
        log.debug("closing a stalled model stream failed: %r", exc)


def _fill_usage(usage: Usage, reported: Any) -> None:
    if reported:
        usage.prompt_tokens = int(getattr(reported, "prompt_tokens", 0) or 0)
        usage.completion_tokens = int(getattr(reported, "completion_tokens", 0) or 0)


def _retry_after(exc: BaseException) -> float | None:
    """The wait a 429 asked for (at most a minute), None when it named none we can read."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        return min(60.0, float(headers["retry-after"]))
    except (KeyError, TypeError, ValueError):
        return None
