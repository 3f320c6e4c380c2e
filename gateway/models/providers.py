"""Which providers keep conversation state on their side, in one table, and their helpers.

A stateful provider holds the conversation itself: each turn sends only what
is new since the response it names (`previous_response_id`), so the tokens
sent per turn do not grow with the history. The gateway reaches it through
litellm's `responses` call. A model string opts in with the same routing
prefix litellm uses for its Responses API bridge, for example
`GATEWAY_MODEL=openai/responses/gpt-4.1`; every other model string is sent
the whole (compressed) conversation each turn through chat completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.models.types import Message


@dataclass(frozen=True, slots=True)
class StatefulProvider:
    """A provider that chains turns on a stored response id."""

    prefix: str  # the model-string prefix that routes to it (litellm's `responses` call)


# The one table. A provider not listed here is stateless.
STATEFUL: tuple[StatefulProvider, ...] = (
    StatefulProvider("openai/responses/"),  # OpenAI Responses API
    StatefulProvider("azure/responses/"),  # Azure OpenAI Responses API
)

# Error codes and texts that mean "the provider no longer has that response".
STATE_LOST_MARKERS = (
    "previous_response_not_found",
    "previous response with id",
    "no response found with id",
)


def stateful_provider(model: str) -> StatefulProvider | None:
    """The table row that `model` routes to, or None for a stateless model."""
    return next((row for row in STATEFUL if model.startswith(row.prefix)), None)


def is_stateful(model: str) -> bool:
    return stateful_provider(model) is not None


def base_model(model: str) -> str:
    """The model name without a routing prefix (`openai/responses/x` -> `openai/x`).

    litellm's model map and tokenizers know the base name only.
    """
    provider, sep, rest = model.partition("/")
    if sep and rest.startswith("responses/"):
        return f"{provider}/{rest.removeprefix('responses/')}"
    return model


def means_state_lost(text: str) -> bool:
    """True when a provider's error text says the chained response is gone."""
    lowered = text.lower()
    return any(marker in lowered for marker in STATE_LOST_MARKERS)


def to_responses_input(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Chat-completion messages as the Responses API's (instructions, input items).

    System messages become the instructions (they are not carried over a
    chain, so every call sends them); tool calls and tool results become
    `function_call` and `function_call_output` items.
    """
    instructions: list[str] = []
    items: list[Message] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            instructions.append(_text_of(message.get("content")))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id", "")),
                    "output": _text_of(message.get("content")),
                }
            )
        else:
            items.extend(_conversation_items(message))
    return ("\n\n".join(instructions) or None), items


def to_responses_tools(tools: Sequence[Message]) -> list[Message]:
    """Chat-format function tools in the Responses API's flat shape.

    `{"type": "function", "function": {"name", ...}}` becomes
    `{"type": "function", "name", "description", "parameters"}`; a tool already
    flat, or of another type, is sent as it is.
    """
    flat: list[Message] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, dict):
            flat.append({"type": "function", **function})
        else:
            flat.append(dict(tool))
    return flat


def _conversation_items(message: Message) -> list[Message]:
    role = str(message.get("role", "user"))
    content = message.get("content")
    items: list[Message] = []
    if isinstance(content, list):
        items.append({"role": role, "content": [_part(role, part) for part in content]})
    elif content or not message.get("tool_calls"):
        items.append({"role": role, "content": str(content or "")})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": str(call.get("id", "")),
                "name": str(function.get("name", "")),
                "arguments": str(function.get("arguments", "{}")),
            }
        )
    return items


def _part(role: str, part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        text_type = "output_text" if role == "assistant" else "input_text"
        return {"type": text_type, "text": str(part.get("text", ""))}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "input_image", "image_url": str(url or "")}
    return part


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
