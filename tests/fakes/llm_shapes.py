"""The JSON shapes the fake model server answers with, as OpenAI's API writes them.

Kept apart from the server so the wire format can be read in one place: chat
completions (whole and streamed chunks), Responses API objects and their stream
events, and OpenAI's error body.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

JSON = dict[str, Any]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def new_id(prefix: str) -> str:
    """An id in OpenAI's style: a prefix and random hex."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def split_words(text: str) -> list[str]:
    """Cut text into word-sized pieces whose concatenation is exactly the text."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


# Keys whose values are structure, not text the model reads.
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "model", "call_id", "cache_control"})


def count_words(value: object) -> int:
    """A rough token count: the words in every text string inside a JSON value."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):
        return sum(count_words(item) for key, item in value.items() if key not in _NOT_TEXT)
    if isinstance(value, list):
        return sum(count_words(item) for item in value)
    return 0


@functools.cache
def _encoding() -> Any:
    """cl100k_base (what litellm counts a model it does not know with), read from the copy
    litellm ships, offline, without importing litellm into the fake's process."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None
    bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def count_tokens(value: object) -> int:
    """The tokens of every text string inside a JSON value."""
    if isinstance(value, str):
        return len(_encoding().encode(value, disallowed_special=()))
    if isinstance(value, dict):
        return sum(count_tokens(item) for key, item in value.items() if key not in _NOT_TEXT)
    if isinstance(value, list):
        return sum(count_tokens(item) for item in value)
    return 0


def prompt_tokens(messages: object) -> int:
    """A request's prompt as OpenAI counts it: each message's texts, its role and 3 tokens
    of framing, and 3 for the start of the reply (a string: one message)."""
    items = messages if isinstance(messages, list) else [messages] if messages else []
    return sum(count_tokens(item) + 4 for item in items) + 3


def content_text(content: object) -> str:
    """The text of a message content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        )
    return ""


def last_user_text(items: object) -> str:
    """The text of the last user message in a chat `messages` list or a Responses `input`."""
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return content_text(item.get("content"))
    return ""


def error_body(
    status: int, message: str | None = None, code: str | None = None, param: str | None = None
) -> JSON:
    """OpenAI's error envelope for an HTTP status."""
    kind, default_code = _ERROR_TYPES.get(status, ("server_error", None))
    if message is None:
        message = {429: "Rate limit reached for requests", 500: "The server had an error"}.get(
            status, f"fake error {status}"
        )
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code if code is not None else default_code,
        }
    }


def chat_usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(
    completion_id: str,
    model: str,
    text: str,
    usage: JSON,
    tool_calls: list[JSON] | None = None,
) -> JSON:
    """A whole (non-streamed) chat.completion object; with `tool_calls`, an answer that
    calls tools (its content null when it has no text)."""
    message: JSON = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message.update(content=text or None, tool_calls=tool_calls)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "message": message,
            }
        ],
        "usage": usage,
    }


def chat_chunk(
    completion_id: str,
    model: str,
    delta: JSON | None,
    finish_reason: str | None = None,
    usage: JSON | None = None,
) -> JSON:
    """One chat.completion.chunk; `delta=None` gives the usage-only chunk (empty choices)."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    chunk: JSON = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def responses_usage(input_tokens: int, output_tokens: int) -> JSON:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def output_message(item_id: str, text: str, status: str = "completed") -> JSON:
    """A Responses API output item holding the assistant's text."""
    content = (
        [{"type": "output_text", "text": text, "annotations": []}]
        if text or status == "completed"
        else []
    )
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def response_object(
    response_id: str, body: JSON, *, status: str, output: list[JSON], usage: JSON | None
) -> JSON:
    """A Responses API `response` object echoing the request's settings."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": str(body.get("model", "")),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


async def write_event(stream: web.StreamResponse, payload: JSON) -> None:
    """Write one server-sent event holding `payload` as JSON."""
    # Responses API events carry their type on an `event:` line too, as OpenAI's do.
    event = payload.get("type")
    prefix = f"event: {event}\n" if isinstance(event, str) else ""
    await stream.write(f"{prefix}data: {json.dumps(payload)}\n\n".encode())


class ResponseEvents:
    """The Responses API stream events, numbered in the order they are built.

    Events are built up front and written later, so build them in stream order.
    """

    def __init__(self, item_id: str) -> None:
        self.item_id = item_id
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> JSON:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence, **fields}

    def _part(self, text: str = "") -> dict[str, Any]:
        return {
            "item_id": self.item_id,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": text, "annotations": []},
        }

    def started(self, started: JSON) -> list[JSON]:
        return [
            self.event("response.created", response=started),
            self.event("response.in_progress", response=started),
        ]

    def message_opening(self) -> list[JSON]:
        return [
            self.event(
                "response.output_item.added",
                output_index=0,
                item=output_message(self.item_id, "", "in_progress"),
            ),
            self.event("response.content_part.added", **self._part()),
        ]

    def delta(self, piece: str) -> JSON:
        return self.event(
            "response.output_text.delta",
            item_id=self.item_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
        )

    def message_closing(self, text: str) -> list[JSON]:
        return [
            self.event(
                "response.output_text.done",
                item_id=self.item_id,
                output_index=0,
                content_index=0,
                text=text,
                logprobs=[],
            ),
            self.event("response.content_part.done", **self._part(text)),
            self.event(
                "response.output_item.done", output_index=0, item=output_message(self.item_id, text)
            ),
        ]

    def completed(self, done: JSON) -> JSON:
        return self.event("response.completed", response=done)
