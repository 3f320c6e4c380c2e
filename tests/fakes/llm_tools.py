"""The fake model's tool calls: how a test scripts them, and how OpenAI's APIs send them.

A reply may be an `Answer` (text, then tool calls) instead of a plain text:

    llm.reply = Answer(calls=[FakeToolCall("search", '{"q": "redis"}')])
    llm.answer_next(Answer(calls=[...]), "the final text")     # one per request, in order
    llm.reply = tools_then_text([FakeToolCall("clock", "{}")])  # a whole tool round trip

Chat completions stream each call as OpenAI does: a first fragment with the
call's index, id, type and name and empty arguments, then the arguments in
pieces of a few characters, each in a chunk of its own; the last chunk's
finish_reason is "tool_calls". The Responses API sends each call as a
`function_call` output item: `response.output_item.added`, the arguments in
`response.function_call_arguments.delta` events, `...arguments.done`,
`response.output_item.done`, and the item again in `response.completed`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from tests.fakes.llm_shapes import JSON, new_id

ARGUMENT_PIECE = 7  # characters of arguments per streamed fragment: several for any real call


@dataclasses.dataclass(frozen=True)
class FakeToolCall:
    """A tool call the fake model makes. `name=None` sends a call that names no tool
    (a malformed answer); `id` is made up when not given."""

    name: str | None
    arguments: str = "{}"
    id: str = dataclasses.field(default_factory=lambda: new_id("call"))

    def pieces(self) -> list[str]:
        """The arguments in the fragments they stream in."""
        text = self.arguments
        return [text[i : i + ARGUMENT_PIECE] for i in range(0, len(text), ARGUMENT_PIECE)]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the fake model answers: `text` (streamed first), then `calls`.

    `raw_deltas` are chat-completion deltas sent verbatim after the calls, for
    answers malformed on purpose.
    """

    text: str = ""
    calls: Sequence[FakeToolCall] = ()
    raw_deltas: Sequence[JSON] = ()


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """A tool result the request sent back: the call it answers and its output."""

    call_id: str
    output: str


def tool_results(body: JSON) -> list[ToolResult]:
    """The tool results at the end of a request (chat `tool` messages, or Responses
    `function_call_output` items); empty when it ends with anything else."""
    items = body.get("messages", body.get("input"))
    results: list[ToolResult] = []
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            break
        if item.get("role") == "tool":
            results.append(ToolResult(str(item.get("tool_call_id")), _text(item.get("content"))))
        elif item.get("type") == "function_call_output":
            results.append(ToolResult(str(item.get("call_id")), _text(item.get("output"))))
        else:
            break
    return results[::-1]


def results_text(results: Sequence[ToolResult]) -> str:
    """The default answer to tool results: each call's id and output, so a test can see
    that they reached the model."""
    return "results: " + "; ".join(f"{r.call_id}={r.output}" for r in results)


def tools_then_text(
    calls: Sequence[FakeToolCall],
    then: Callable[[list[ToolResult]], str] = results_text,
    *,
    text: str = "",
) -> Callable[[JSON], str | Answer]:
    """A reply that calls `calls` (after `text`) when the request ends with anything but
    tool results, and answers `then(results)` when it ends with them."""

    def reply(body: JSON) -> str | Answer:
        results = tool_results(body)
        return then(results) if results else Answer(text, calls)

    return reply


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


# -- chat completions ----------------------------------------------------------------


def chat_tool_deltas(calls: Sequence[FakeToolCall]) -> list[JSON]:
    """Each call's streamed deltas: its opening fragment, then its argument pieces."""
    deltas: list[JSON] = []
    for index, call in enumerate(calls):
        function: JSON = {"arguments": ""}
        if call.name is not None:
            function["name"] = call.name
        opening = {"index": index, "id": call.id, "type": "function", "function": function}
        deltas.append({"tool_calls": [opening]})
        for piece in call.pieces():
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def chat_message_calls(calls: Sequence[FakeToolCall]) -> list[JSON]:
    """The calls as a whole (non-streamed) assistant message's `tool_calls`."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


# -- the Responses API ---------------------------------------------------------------


def function_call_item(item_id: str, call: FakeToolCall, *, done: bool = True) -> JSON:
    """A `function_call` output item (its arguments empty while in progress)."""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if done else "",
        "status": "completed" if done else "in_progress",
    }


# A step of a stream: the event, and whether it is paced like a token.
Step = tuple[JSON, bool]


def function_call_steps(
    event: Callable[..., JSON], output_index: int, item_id: str, call: FakeToolCall
) -> list[Step]:
    """One call's Responses stream events; `event(kind, **fields)` numbers each."""
    where = {"item_id": item_id, "output_index": output_index}
    steps: list[Step] = [
        (
            event(
                "response.output_item.added",
                output_index=output_index,
                item=function_call_item(item_id, call, done=False),
            ),
            True,
        )
    ]
    for piece in call.pieces():
        steps.append((event("response.function_call_arguments.delta", **where, delta=piece), True))
    done_fields = {**where, "name": call.name, "arguments": call.arguments}
    steps.append((event("response.function_call_arguments.done", **done_fields), False))
    done_item = function_call_item(item_id, call)
    steps.append(
        (event("response.output_item.done", output_index=output_index, item=done_item), False)
    )
    return steps
