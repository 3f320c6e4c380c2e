"""The line protocol between a worker's pool and its model processes.

One JSON object per line.
- worker -> model process: `{"init": {...}}` once (`ModelSettings.to_init`), then
  `{"id": n, "op": "stream" | "responses" | "complete", "call": {...}}`,
  `{"id": n, "op": "count", "model": ..., "messages": [[...], ...]}` (token
  counts, one per list of messages), `{"id": n, "op": "window", "model": ...}`
  (the model's input window), `{"id": n, "op": "vision", "model": ...}` (whether it
  reads images), `{"id": n, "op": "transcribe", "model", "audio" (base64),
  "filename", "timeout"}` (a voice message's text) and `{"id": n, "op": "cancel"}`.
- model process -> worker: `{"ready": true}` once, then for a request
  `{"id": n, "piece": "..."}` any number of times and one of
  `{"id": n, "end": {...}}` or `{"id": n, "error": {"kind", "text", "retry_after"}}`.
  A stream's end carries its usage, its response id and the tool calls it asked
  for (`"calls": [{"id", "name", "arguments"}, ...]`); a call carries its tools.

An error crosses as the name of its class in the error tree, so the worker
raises the same ModelError the model process caught.
"""

from __future__ import annotations

import json
from typing import Any

from gateway import errors
from gateway.errors import ModelError, ModelRateLimited, ModelUnavailable
from gateway.models.types import ModelCall, ToolCall, Usage

LINE_LIMIT = 64 * 1024 * 1024  # a request carries a whole compiled conversation


def dump(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False) + "\n").encode()


def call_fields(call: ModelCall) -> dict[str, Any]:
    return {
        "model": call.model,
        "messages": list(call.messages),
        "timeout": call.timeout,
        "max_tokens": call.max_tokens,
        "temperature": call.temperature,
        "tools": list(call.tools) if call.tools else None,
    }


def call_from(fields: dict[str, Any]) -> ModelCall:
    return ModelCall(
        fields["model"],
        fields["messages"],
        float(fields["timeout"]),
        max_tokens=fields.get("max_tokens"),
        temperature=fields.get("temperature"),
        tools=fields.get("tools") or None,
    )


def calls_fields(calls: list[ToolCall]) -> list[dict[str, str]]:
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


def calls_from(end: dict[str, Any]) -> list[ToolCall]:
    """The tool calls a stream's end carries (none from a model process that sends none)."""
    return [
        ToolCall(str(c["id"]), str(c["name"]), str(c["arguments"])) for c in end.get("calls") or []
    ]


def usage_fields(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost": usage.cost,
    }


def fill_usage(usage: Usage, end: dict[str, Any]) -> None:
    usage.prompt_tokens = int(end.get("prompt_tokens", 0) or 0)
    usage.completion_tokens = int(end.get("completion_tokens", 0) or 0)
    cost = end.get("cost")
    usage.cost = float(cost) if cost is not None else None


def error_fields(exc: BaseException) -> dict[str, Any]:
    if not isinstance(exc, ModelError):
        exc = ModelUnavailable(f"{type(exc).__name__} in the model process")
    return {
        "kind": type(exc).__name__,
        "text": str(exc),
        "retry_after": exc.retry_after if isinstance(exc, ModelRateLimited) else None,
    }


def error_from(fields: dict[str, Any]) -> ModelError:
    kind = getattr(errors, str(fields.get("kind")), None)
    if not (isinstance(kind, type) and issubclass(kind, ModelError)):
        kind = ModelUnavailable
    text = str(fields.get("text", "the model process failed"))
    if issubclass(kind, ModelRateLimited):
        retry_after = fields.get("retry_after")
        return kind(text, retry_after=None if retry_after is None else float(retry_after))
    return kind(text)
