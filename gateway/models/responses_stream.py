"""The Responses API's stream, read one event at a time (litellm's parsed events).

Text deltas are the reply; `response.created` and later events carry the
response id a chain continues; `function_call` items (each one's
`response.output_item.done`, and the `response.completed` output) are the
tool calls; a failed or incomplete response becomes a ModelError here.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ModelError, ModelRejected, ModelUnavailable, ProviderStateLost
from gateway.models.providers import means_state_lost
from gateway.models.tool_calls import FunctionCalls
from gateway.models.types import ResponseChain, Usage


def response_event(event: Any, usage: Usage, chain: ResponseChain, calls: FunctionCalls) -> str:
    """The text of one Responses API stream event; records the id, usage and function
    calls it carries."""
    kind = str(getattr(getattr(event, "type", ""), "value", getattr(event, "type", "")))
    response = getattr(event, "response", None)
    if response is not None and getattr(response, "id", None):
        chain.response_id = str(response.id)
    if kind == "response.output_text.delta":
        return str(getattr(event, "delta", "") or "")
    if kind == "response.output_item.done":
        calls.add(getattr(event, "item", None))
    elif kind == "response.completed":
        _fill_response_usage(usage, getattr(response, "usage", None))
        for item in getattr(response, "output", None) or []:
            calls.add(item)
    elif kind in {"response.failed", "response.incomplete", "error"}:
        raise _response_failure(event, response)
    return ""


def _response_failure(event: Any, response: Any) -> ModelError:
    error = getattr(response, "error", None) or event
    message = str(getattr(error, "message", "") or getattr(error, "code", "") or "failed")
    code = str(getattr(error, "code", "") or "")
    text = f"response {code}: {message}"[:200]
    if means_state_lost(f"{code} {message}"):
        return ProviderStateLost(text)
    return ModelUnavailable(text) if "server" in code else ModelRejected(text)


def _fill_response_usage(usage: Usage, reported: Any) -> None:
    if not reported:
        return
    if isinstance(reported, dict):
        get = reported.get
    else:

        def get(name: str, default: Any = None) -> Any:
            return getattr(reported, name, default)

    usage.prompt_tokens = int(get("input_tokens", 0) or get("prompt_tokens", 0) or 0)
    usage.completion_tokens = int(get("output_tokens", 0) or get("completion_tokens", 0) or 0)
