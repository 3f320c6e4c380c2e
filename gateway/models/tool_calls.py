"""Tool calls read out of a model's answer, whichever API it came through.

A streamed chat completion sends each call in fragments keyed by `index`: the
first fragment carries the call's `id` and `function.name`, the later ones only
pieces of `function.arguments`; the calls of one answer have different indexes
and may interleave. `ToolCallParts` puts them together. The Responses API sends
each call whole, as a `function_call` output item (`function_call_of`).

A call the model did not name cannot be run, nor answered in a way the model
would understand: the whole answer is then a ModelBadResponse. A fragment that
is not a fragment at all (no object, no index to place it by) is dropped with a
log line, since the rest of the answer may still be whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ModelBadResponse
from gateway.models.types import ToolCall

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Part:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ToolCallParts:
    """The fragments of one streamed answer's tool calls, put together by their index."""

    def __init__(self) -> None:
        self._parts: dict[int, _Part] = {}

    def add(self, fragments: Any) -> None:
        """One chunk's `delta.tool_calls` (None when it has none)."""
        if not fragments:
            return
        if not isinstance(fragments, Sequence) or isinstance(fragments, str):
            log.warning("dropped a tool call delta that is not a list: %.100r", fragments)
            return
        for fragment in fragments:
            self._add_one(fragment)

    def _add_one(self, fragment: Any) -> None:
        index = _field(fragment, "index")
        if not isinstance(index, int) or isinstance(index, bool):
            log.warning("dropped a tool call fragment without an index: %.100r", fragment)
            return
        part = self._parts.setdefault(index, _Part())
        function = _field(fragment, "function")
        if call_id := _field(fragment, "id"):
            part.id = str(call_id)
        if name := _field(function, "name"):
            part.name = str(name)
        arguments = _field(function, "arguments")
        if isinstance(arguments, str):
            part.arguments.append(arguments)
        elif arguments is not None:  # a provider that sends the arguments as an object
            part.arguments.append(json.dumps(arguments))

    def calls(self) -> list[ToolCall]:
        """The calls, in index order, once the stream has ended.

        A call without an id gets one from its index (some providers send none,
        and the result must name the call it answers).
        """
        calls = []
        for index, part in sorted(self._parts.items()):
            if not part.name:
                raise ModelBadResponse("the model asked for a tool call without naming the tool")
            call_id = part.id or f"call_{index}"
            calls.append(ToolCall(call_id, part.name, "".join(part.arguments) or "{}"))
        return calls


def function_call_of(item: Any) -> ToolCall | None:
    """A Responses API output item as a ToolCall; None for any other kind of item."""
    if _field(item, "type") != "function_call":
        return None
    name = _field(item, "name")
    if not name:
        raise ModelBadResponse("the model asked for a tool call without naming the tool")
    call_id = _field(item, "call_id") or _field(item, "id")
    if not call_id:
        raise ModelBadResponse(f"the model's call of {name} came without an id")
    arguments = _field(item, "arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments) if arguments is not None else ""
    return ToolCall(str(call_id), str(name), arguments or "{}")


class FunctionCalls:
    """The `function_call` items of one Responses API answer, by their call id.

    A call is read from its `response.output_item.done` event and again from the
    `response.completed` output (litellm's replay of a whole answer as a stream
    may send only the latter); the id keeps it one call.
    """

    def __init__(self) -> None:
        self._calls: dict[str, ToolCall] = {}

    def add(self, item: Any) -> None:
        if (call := function_call_of(item)) is not None:
            self._calls[call.id] = call

    def calls(self) -> list[ToolCall]:
        return list(self._calls.values())


def _field(value: Any, name: str) -> Any:
    """`name` of an SDK object or a plain dict, None when it has none."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)
