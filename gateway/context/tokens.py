"""Token counting: the token allowance (the history tokens a request may carry:
GATEWAY_TOKEN_BUDGET, or a share of the model's window), and whether a request fits it.

A request is counted from its `RequestShape`: the system prompt, the history
view (its newest summary and the entries after it), whether the conversation
is a group, the reminder block, and entries about to join the view. Counts are
made with the main model's tokenizer and cached per entry; a request of plain
texts whose size in bytes is within the limit is known to fit without
counting anything (every token covers at least one byte).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.context.compiler import entry_message, split_view, summary_message
from gateway.models import Models
from gateway.models.providers import base_model
from gateway.settings.env import Settings
from gateway.state.session import Entry, HistoryView

DEFAULT_ALLOWANCE = 16_000  # tokens, for a model litellm has no window for
WINDOW_SHARE = 0.6  # of the model's input window, when GATEWAY_TOKEN_BUDGET is unset
FRAMING_ALLOWANCE = 16  # tokens per message for its role, separators and template


def token_allowance(settings: Settings, models: Models) -> int:
    """GATEWAY_TOKEN_BUDGET, else 60% of the model's input window, else DEFAULT_ALLOWANCE."""
    if settings.token_budget:
        return settings.token_budget
    return window_share(models, settings.model)


def window_share(models: Models, model: str) -> int:
    """60% of `model`'s input window, or DEFAULT_ALLOWANCE when litellm does not know it."""
    window = models.known_window(model)
    return int(window * WINDOW_SHARE) if window else DEFAULT_ALLOWANCE


@dataclass(frozen=True, slots=True)
class RequestShape:
    """What a full-mode request is built from, as far as its token count goes."""

    system_prompt: str
    view: HistoryView
    group: bool
    reminder: str | None = None
    extra: Sequence[Entry] = ()  # entries not in the view yet (the reply being recorded)

    def split(self) -> tuple[str | None, list[Entry]]:
        """The summary's text (None without one), and the entries after it, `extra` last."""
        segment, entries = split_view(self.view.entries, self.view.segments)
        summary = str(summary_message(segment)["content"]) if segment is not None else None
        return summary, [*entries, *self.extra]

    def fixed(self, summary: str | None) -> list[tuple[str, str]]:
        """(text, role) of the messages counted by their text: they recur every turn."""
        parts = [(self.system_prompt, "system")]
        if summary is not None:
            parts.append((summary, "user"))
        if self.reminder:
            parts.append((self.reminder, "user"))
        return parts


class TokenCounter:
    """Token counts with the main model's tokenizer, cached per entry.

    History entries never change once written, so each is counted once per
    process; a turn's count costs a dictionary lookup per entry in its view.
    The cache keeps the most recently used `capacity` counts (about 270 bytes
    each, key and ordering included): enough for the views of the sessions a
    worker is answering, and a few megabytes, not a share of every history seen.
    Entries' sizes in bytes (what most turns need, see `within`) have a smaller
    cache of their own: one costs microseconds to work out again, while a count
    costs a tokenizer run, so sizes never push counts out.
    """

    def __init__(
        self, models: Models, model: str, capacity: int = 20_000, sizes: int = 4_096
    ) -> None:
        self.models = models
        self.model = base_model(model)
        self.capacity, self.sizes_capacity = capacity, sizes
        self._cache: OrderedDict[tuple[str, bool], int] = OrderedDict()
        self._sizes: OrderedDict[tuple[str, bool], int] = OrderedDict()

    def message(self, message: dict[str, Any]) -> int:
        return self.models.count_tokens(self.model, [message])

    def entry(self, entry: Entry, group: bool) -> int:
        key = _entry_key(entry, group)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        message = entry_message(entry, group)
        count = self.message(message) if message is not None else 0
        self._remember(key, count)
        return count

    def count(self, shape: RequestShape) -> int:
        """Tokens of the full-mode request `shape` describes (reminder and `extra` included)."""
        summary, entries = shape.split()
        total = sum(self._fixed(text, role) for text, role in shape.fixed(summary))
        return total + sum(self.entry(entry, shape.group) for entry in entries)

    async def ensure(self, shape: RequestShape) -> None:
        """Count what `shape` needs that is not counted yet, in one call."""
        wanted = self.missing(shape)
        if wanted:
            counts = await self.models.count_many(self.model, [[m] for _, m in wanted])
            for (key, _), count in zip(wanted, counts, strict=True):
                self._remember(key, count)

    def missing(self, shape: RequestShape) -> list[tuple[tuple[str, bool], dict[str, Any]]]:
        """The parts of the request not counted yet (cache key, message), oldest first."""
        summary, entries = shape.split()
        wanted = []
        for text, role in shape.fixed(summary):
            key = _fixed_key(text, role)
            if key not in self._cache:
                wanted.append((key, {"role": role, "content": text}))
        for entry in entries:
            key = _entry_key(entry, shape.group)
            if key not in self._cache:
                message = entry_message(entry, shape.group)
                if message is not None:
                    wanted.append((key, message))
                else:
                    self._remember(key, 0)
        return wanted

    def within(self, limit: int, shape: RequestShape) -> bool:
        """Whether the full-mode request is at most `limit` tokens.

        Every token of a text covers at least one of its bytes, whatever the
        tokenizer, so a request of plain texts whose UTF-8 size (with room for
        each message's framing) is within `limit` is within it in tokens too:
        then nothing is counted. Only a request near the limit, or one with
        parts that are not plain text (images, tool calls), is counted exactly.
        """
        bound = self.byte_bound(shape)
        if bound is not None and bound <= limit:
            return True
        return self.count(shape) <= limit

    def byte_bound(self, shape: RequestShape) -> int | None:
        """An upper bound on the request's tokens from its size; None when there is none."""
        summary, entries = shape.split()
        texts = [shape.system_prompt, shape.reminder or ""]
        if summary is not None:
            texts.append(summary)
        total = sum(_size(text) for text in texts) + FRAMING_ALLOWANCE
        for entry in entries:
            size = self._entry_size(entry, shape.group)
            if size is None:
                return None
            total += size
        return total

    def _entry_size(self, entry: Entry, group: bool) -> int | None:
        key = (str(entry.get("id", "")), group)
        cached = self._sizes.get(key)
        if cached is not None:
            self._sizes.move_to_end(key)
            return cached if cached >= 0 else None
        message = entry_message(entry, group)
        content = message.get("content") if message is not None else ""
        plain = isinstance(content, str) and not (message or {}).get("tool_calls")
        size = _size(content) if plain and isinstance(content, str) else -1
        if entry.get("id"):
            self._sizes[key] = size
            if len(self._sizes) > self.sizes_capacity:
                self._sizes.popitem(last=False)
        return size if size >= 0 else None

    def _remember(self, key: tuple[str, bool], value: int) -> None:
        self._cache[key] = value
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)

    def _fixed(self, text: str, role: str) -> int:
        # The system prompt and the current summary recur every turn: cache them by text.
        key = _fixed_key(text, role)
        cached = self._cache.get(key)
        if cached is None:
            cached = self.message({"role": role, "content": text})
            self._remember(key, cached)
        return cached


def _fixed_key(text: str, role: str) -> tuple[str, bool]:
    return (f"{role}:{hash(text)}", False)


def _entry_key(entry: Entry, group: bool) -> tuple[str, bool]:
    """Entries never change once written: by id, or by content for one without."""
    name = entry.get("id") or hash(json.dumps(entry, sort_keys=True, default=str))
    return (f"entry:{name}", group)


def _size(text: str) -> int:
    """A text's UTF-8 size, with room for its message's framing."""
    return len(text.encode("utf-8", "surrogatepass")) + FRAMING_ALLOWANCE
