"""What makes the model calls: the few methods a turn, a side question and a summary need.

Three backends implement it: litellm in this process
(`litellm_backend.LitellmBackend`), model processes that each run one of those
(`pool.ModelPool`), and answers from a script (`scripted.ScriptedBackend`: the
offline `echo` model, and tests that need no model server). `Models` picks
one when it is built and never asks again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from gateway.models.types import Message, ModelCall, ResponseChain, ToolCall, Usage


class ModelBackend(Protocol):
    async def start(self) -> None:
        """Pay what the first call would (an import, a process start) before any is made."""

    async def aclose(self) -> None:
        """Let go of what `start` or a call took up; safe to call when never started."""

    def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        """The reply's text in pieces; `usage` is filled in when the stream ends, and
        `calls` (when given) with the tool calls the answer asked for.

        Failures before the first piece may be retried; after it they end the
        stream with a ModelError, since a half-shown answer cannot be redone.
        """
        ...

    def stream_response(
        self,
        call: ModelCall,
        usage: Usage,
        chain: ResponseChain,
        calls: list[ToolCall] | None = None,
    ) -> AsyncIterator[str]:
        """A turn through the Responses API, continuing `chain.previous_id` when set.

        `chain.response_id` is filled in with the new response's id, and `calls`
        (when given) with the function calls it asked for. A provider
        that no longer holds the previous response raises ProviderStateLost.
        """
        ...

    async def complete(self, call: ModelCall, usage: Usage) -> str:
        """One non-streamed answer; `usage` is filled in."""
        ...

    async def count(self, model: str, batches: Sequence[Sequence[Message]]) -> list[int]:
        """Tokens of each list of messages, with `model`'s tokenizer, off the event loop."""
        ...

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int:
        """Tokens of `messages`, counted at once in this process."""
        ...

    async def window(self, model: str) -> int | None:
        """`model`'s input window in tokens, when it is known."""
        ...

    async def vision(self, model: str) -> bool:
        """Whether `model` reads images."""
        ...

    async def transcribe(
        self, model: str, audio: bytes, filename: str, timeout: float, usage: Usage
    ) -> str:
        """The text spoken in `audio` (a voice message named `filename`); `usage` is filled
        in with what the provider reported, and the cost where litellm can reckon it."""
        ...
