"""A backend that answers from a script, in this process: no HTTP, no litellm.

The offline `echo` model is one (`echo()`): it streams back a short, clearly
labelled echo of what the user wrote. Tests build others, to run turns with
no model server at all, the way httpx's MockTransport stands in for the
network:

    backend = ScriptedBackend("the answer")
    backend.fail_next(ModelUnavailable("down"), after_pieces=2)
    models = Models(backend)

A script may also answer with tool calls (a `ScriptedAnswer`), for turns that
use tools: its text streams first, its calls are handed over at the end.

    ScriptedBackend(lambda call: ScriptedAnswer(calls=[ToolCall("c1", "search", "{}")])
                    if call.messages[-1]["role"] == "user" else "done")
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from gateway.errors import ModelError
from gateway.models.types import Message, ModelCall, ResponseChain, ToolCall, Usage


@dataclass(frozen=True, slots=True)
class ScriptedAnswer:
    """An answer with tool calls: `text` streamed first (may be empty), then `calls`."""

    text: str = ""
    calls: Sequence[ToolCall] = ()


Reply = str | ScriptedAnswer | Callable[[ModelCall], str | ScriptedAnswer]
ECHO_LABEL = "(echo: no model is configured, so I repeat what you wrote; set GATEWAY_MODEL)"


class ScriptedBackend:
    """Answers every call with `reply` (a text or a ScriptedAnswer, or a function of the
    call that gives one), word by word.

    The most recent calls are kept in `calls`. A failure queued with
    `fail_next` is raised by the next call, after that many pieces. Tokens are
    estimated: a quarter of the characters sent, one for each word answered.
    """

    def __init__(self, reply: Reply, *, window: int | None = None, keep: int = 100) -> None:
        self.reply = reply
        self.input_window = window
        self.sees_images = False
        self.calls: deque[ModelCall] = deque(maxlen=keep)
        self._failures: deque[tuple[ModelError, int]] = deque()
        self._response_ids = itertools.count(1)

    def fail_next(self, error: ModelError, *, after_pieces: int = 0) -> None:
        """The next call raises `error` once it has streamed `after_pieces` pieces."""
        self._failures.append((error, after_pieces))

    async def start(self) -> None:
        """Nothing to start."""

    async def aclose(self) -> None:
        """Nothing to close."""

    async def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        async for piece in self._pieces(call, usage, calls):
            yield piece

    async def stream_response(
        self,
        call: ModelCall,
        usage: Usage,
        chain: ResponseChain,
        calls: list[ToolCall] | None = None,
    ) -> AsyncIterator[str]:
        chain.response_id = f"scripted-{next(self._response_ids)}"
        async for piece in self._pieces(call, usage, calls):
            yield piece

    async def complete(self, call: ModelCall, usage: Usage) -> str:
        """The answer's text; a one-shot call offers no tools, so any calls are left out."""
        return "".join([piece async for piece in self._pieces(call, usage, None)])

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int:
        return _characters(messages) // 4 + 1

    async def count(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        return [self.count_tokens(model, batch) for batch in batches]

    async def window(self, model: str) -> int | None:
        return self.input_window

    async def vision(self, model: str) -> bool:
        return self.sees_images

    async def transcribe(
        self, model: str, audio: bytes, filename: str, timeout: float, usage: Usage
    ) -> str:
        return f"(a voice message of {len(audio)} bytes)"

    def _answer(self, call: ModelCall) -> ScriptedAnswer:
        reply = self.reply(call) if callable(self.reply) else self.reply
        return ScriptedAnswer(reply) if isinstance(reply, str) else reply

    async def _pieces(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None
    ) -> AsyncIterator[str]:
        self.calls.append(call)
        error, after = self._failures.popleft() if self._failures else (None, 0)
        answer = self._answer(call)
        # An answer of tool calls alone streams no text (not even an empty piece).
        words = answer.text.split(" ") if answer.text or not answer.calls else []
        for index, word in enumerate(words):
            if error is not None and index == after:
                raise error
            yield word if index == 0 else f" {word}"
            await asyncio.sleep(0)
        if error is not None:
            raise error
        usage.prompt_tokens = _characters(call.messages) // 4
        usage.completion_tokens = len(words) + len(answer.calls)
        if calls is not None:
            calls.extend(answer.calls)


def echo() -> ScriptedBackend:
    """The offline `echo` model: what the user wrote last, clearly labelled."""
    return ScriptedBackend(echo_reply)


def echo_reply(call: ModelCall) -> str:
    said = last_user_text(call.messages).split("<system-reminder>")[0]
    said = " ".join(said.rpartition("Side question:")[2].split())
    return f"{ECHO_LABEL} You said: {said[:500]}" if said else ECHO_LABEL


def last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def _characters(messages: Sequence[Message]) -> int:
    return sum(len(str(message.get("content", ""))) for message in messages)
