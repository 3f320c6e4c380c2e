"""`Models`: what the rest of the gateway calls, for any model name.

The backend is chosen once, when the Models is built: `for_settings` picks
litellm in this process or a pool of model processes. The offline `echo`
model is answered by its own backend whichever that is, and imports no
provider at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Self

from gateway.models.backend import ModelBackend
from gateway.models.litellm_backend import LitellmBackend, model_window
from gateway.models.pool import ModelPool
from gateway.models.scripted import echo
from gateway.models.types import (
    Charge,
    Message,
    ModelCall,
    ModelSettings,
    ResponseChain,
    ToolCall,
    Usage,
)
from gateway.settings.defaults import ECHO_MODEL

if TYPE_CHECKING:  # a model process imports this package, and reads no settings
    from gateway.settings.env import Settings

# Told of every call that ended with its usage: the worker counts it (`gateway.spend.usage`).
Meter = Callable[[ModelCall, Usage], Coroutine[Any, Any, None]]
METER_DELAY = 0.001  # seconds between a call's end and its usage write


class Models:
    """Streams, one-shot calls, token counts and windows: `echo`, or anything `backend` routes."""

    def __init__(self, backend: ModelBackend, offline: ModelBackend | None = None) -> None:
        self.backend = backend
        self.offline = offline or echo()
        self._windows: dict[str, int | None] = {}  # a model's window does not change
        self._vision: dict[str, bool] = {}
        self.meter: Meter | None = None
        self._metering: set[asyncio.Task[None]] = set()

    @classmethod
    def for_settings(cls, settings: Settings, *, processes: int = 0) -> Self:
        """litellm in this process, or `processes` model processes that make its calls."""
        values = ModelSettings.of(settings)
        if processes:
            return cls(ModelPool(values, processes))
        return cls(LitellmBackend(values))

    def _serving(self, model: str) -> ModelBackend:
        return self.offline if model == ECHO_MODEL else self.backend

    async def start(self) -> None:
        """litellm's import, or the model processes' start: before the first call needs it."""
        await self.backend.start()

    async def aclose(self) -> None:
        await self.backend.aclose()

    def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        """The reply's text in pieces; `usage` is filled in when the stream ends.

        With `call.tools`, the model may ask for tool calls instead of (or after)
        text: they are added to `calls` when the stream has ended, none when it
        failed. An answer of tool calls alone streams no text at all.

        Failures before the first piece are retried with backoff (429, 5xx,
        timeouts, refused connections), all within `call.timeout`; after it,
        they end the stream with a ModelError, since a half-shown answer cannot
        be silently redone. A stream silent for the idle timeout
        (`GATEWAY_STREAM_IDLE_TIMEOUT`), counted from its request (headers not
        sent yet included), is cut off with ModelStalled: retried like a timeout
        before the first piece, the end of the stream after it.
        """
        return self._metered(call, usage, self._serving(call.model).stream(call, usage, calls))

    def stream_response(
        self,
        call: ModelCall,
        usage: Usage,
        chain: ResponseChain,
        calls: list[ToolCall] | None = None,
    ) -> AsyncIterator[str]:
        """A turn through the Responses API, continuing `chain.previous_id` when set.

        `chain.response_id` is filled in with the new response's id, and `calls`
        with the function calls it asked for, as `stream` does. A provider
        that no longer holds the previous response raises ProviderStateLost
        (never retried here: the caller resends the turn in full).
        """
        pieces = self._serving(call.model).stream_response(call, usage, chain, calls)
        return self._metered(call, usage, pieces)

    async def complete(self, call: ModelCall) -> tuple[str, Usage]:
        """One non-streamed answer (side questions, summaries); `call.tools` is not sent.
        `call.timeout` bounds it whole, its retries included."""
        usage = Usage()
        text = await self._serving(call.model).complete(call, usage)
        self._count(call, usage)
        return text, usage

    async def _metered(
        self, call: ModelCall, usage: Usage, pieces: AsyncIterator[str]
    ) -> AsyncIterator[str]:
        """`pieces`, and the meter told of the usage once they have all come (a stream
        that failed or was stopped reports none)."""
        async for piece in pieces:
            yield piece
        self._count(call, usage)

    def _count(self, call: ModelCall, usage: Usage) -> None:
        """Tell the meter of a finished call beside what comes next: a stream's end
        reaches its reader at once, and the usage write goes on meanwhile."""
        if self.meter is None:
            return
        task = asyncio.create_task(self._meter_after_reader(self.meter, call, usage))
        self._metering.add(task)
        task.add_done_callback(self._metering.discard)

    @staticmethod
    async def _meter_after_reader(meter: Meter, call: ModelCall, usage: Usage) -> None:
        """The write waits on a timer first. Started at once, its few hundred microseconds
        of packing would run before the reader the stream's end wakes (that wake-up is
        queued behind the new task), and a reply's last edit would wait for them. A
        timer's callback joins the queue only after what is ready, so the reader always
        goes on first, and a last edit made within the delay goes out before the write."""
        await asyncio.sleep(METER_DELAY)
        await meter(call, usage)

    async def metered(self) -> None:
        """Until every usage write started so far has ended: a job completes after its own."""
        if self._metering:
            await asyncio.wait(set(self._metering))

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int:
        """Tokens of `messages` with the model's tokenizer where litellm has one, counted
        here and now (`count_many` is the one that stays off the event loop)."""
        return self._serving(model).count_tokens(model, messages)

    async def count_many(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        """`count_tokens` of each list of messages: in a model process when there are
        any, else in a thread (a tokenizer's first use loads its tables)."""
        return await self._serving(model).count(model, batches)

    async def window(self, model: str) -> int | None:
        """`model`'s input window in tokens, when litellm knows it; asked once per model."""
        if model not in self._windows:
            self._windows[model] = await self._serving(model).window(model)
        return self._windows[model]

    async def vision(self, model: str) -> bool:
        """Whether `model` reads images, as litellm's model map says; asked once per model."""
        if model not in self._vision:
            self._vision[model] = await self._serving(model).vision(model)
        return self._vision[model]

    async def transcribe(
        self, model: str, audio: bytes, filename: str, timeout: float, charge: Charge | None = None
    ) -> str:
        """The text of a voice message, through `model` (a transcription model)."""
        usage = Usage()
        text = await self._serving(model).transcribe(model, audio, filename, timeout, usage)
        self._count(ModelCall(model, (), timeout, charge=charge), usage)
        return text

    def known_window(self, model: str) -> int | None:
        """`window` without waiting: the one found before, else litellm's map read here.

        Reading the map imports litellm in this process (seconds, on the event
        loop): callers that can await `window` first, once, do.
        """
        if model not in self._windows:
            self._windows[model] = model_window(model)
        return self._windows[model]
