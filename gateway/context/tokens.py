"""Token counting: the token allowance (the history tokens a request may carry:
GATEWAY_TOKEN_BUDGET, or a share of the model's window), and whether a request fits it.

A request is counted from its `RequestShape`: the system prompt, the history
view (its newest summary and the entries after it), whether the conversation
is a group, the reminder block, and entries about to join the view. Counts are
made with the main model's tokenizer and cached per entry. Most requests are
known to fit without counting anything, by one of two upper bounds:

- their size in bytes, for a request of plain texts (every token covers at least
  one byte);
- the provider's own count of the conversation's last request (`sent`, recorded on
  the reply it got), plus the size in bytes of what came after it: a conversation
  past the allowance in bytes but not in tokens is never counted.
"""

from __future__ import annotations

import hashlib
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
# A provider's count below one token per this many bytes of the plain text it covered is not
# believed (a garbled usage figure); text that dense (long runs of one character) is counted.
MAX_BYTES_PER_TOKEN = 16
# A message counted alone includes the tokens that start the reply (3, in OpenAI's framing),
# which a whole request has once: a provider's count of a request, plus this per message,
# is in the same measure as the counts of its messages one by one.
REPLY_PRIMING = 3


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

        When either upper bound (`bound`) is within `limit`, nothing is counted.
        Only a request near the limit, or one with new parts that are not plain
        text (images, tool calls), is counted exactly.
        """
        bound = self.bound(shape)
        if bound is not None and bound <= limit:
            return True
        return self.count(shape) <= limit

    def bound(self, shape: RequestShape) -> int | None:
        """An upper bound on the request's tokens without counting; None when there is none.

        The smaller of its size in bytes (every token of a text covers at least one of
        its bytes, whatever the tokenizer) and the provider's count of the last request
        of the conversation that shares its system prompt and summary (`sent`), with
        the size of everything after that request's last entry and of the reminder.
        """
        summary, entries = shape.split()
        sizes = [self._entry_size(entry, shape.group) for entry in entries]
        fixed = sum(_size(text) for text in (shape.system_prompt, shape.reminder or ""))
        fixed += _size(summary) if summary is not None else 0
        plain = [size for size in sizes if size is not None]
        by_bytes = fixed + FRAMING_ALLOWANCE + sum(plain) if len(plain) == len(sizes) else None
        by_usage = self._usage_bound(shape, summary, entries, sizes)
        if by_usage is None or (by_bytes is not None and by_bytes <= by_usage):
            return by_bytes
        return by_usage

    def _usage_bound(
        self,
        shape: RequestShape,
        summary: str | None,
        entries: Sequence[Entry],
        sizes: Sequence[int | None],
    ) -> int | None:
        found = _last_sent(entries)
        if found is None:
            return None
        index, tokens, through, prefix = found
        if prefix != request_prefix(shape.system_prompt, summary, shape.group):
            return None
        covered = next((i for i in range(index - 1, -1, -1) if entries[i].get("id") == through), -1)
        if covered < 0:
            return None
        covered_bytes = _size(shape.system_prompt) + sum(size or 0 for size in sizes[: covered + 1])
        if tokens * MAX_BYTES_PER_TOKEN < covered_bytes:
            return None
        after = [size for size in sizes[covered + 1 :] if size is not None]
        if len(after) < len(sizes) - covered - 1:
            return None
        messages = covered + 2 + (summary is not None)  # and the system prompt, the reminder
        priming = REPLY_PRIMING * messages
        return tokens + priming + _size(shape.reminder or "") + sum(after)

    def sent(self, shape: RequestShape, tokens: int) -> dict[str, Any] | None:
        """What a reply records of the request that got it (`shape`), as the provider counted
        it (`tokens`), for the next request's bound; None without a count or an entry."""
        summary, entries = shape.split()
        through = str(entries[-1].get("id") or "") if entries else ""
        if tokens <= 0 or not through:
            return None
        prefix = request_prefix(shape.system_prompt, summary, shape.group)
        return {"tokens": tokens, "through": through, "prefix": prefix}

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


def request_prefix(system_prompt: str, summary: str | None, group: bool) -> str:
    """What a provider's count holds for later requests only when they share it: the system
    prompt, the summary standing for the compressed past, and how entries are rendered."""
    text = f"{system_prompt}\x00{summary or ''}\x00{int(group)}"
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _last_sent(entries: Sequence[Entry]) -> tuple[int, int, str, str] | None:
    """(index, tokens, last entry id, prefix) of the newest reply that recorded its
    request's count, when its record is well formed."""
    for index in range(len(entries) - 1, -1, -1):
        sent = entries[index].get("sent")
        if sent is None:
            continue
        try:
            tokens, through, prefix = int(sent["tokens"]), str(sent["through"]), sent["prefix"]
        except (KeyError, TypeError, ValueError):
            return None
        return (index, tokens, through, str(prefix)) if tokens > 0 else None
    return None


def _size(text: str) -> int:
    """A text's UTF-8 size, with room for its message's framing."""
    return len(text.encode("utf-8", "surrogatepass")) + FRAMING_ALLOWANCE
