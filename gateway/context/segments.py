"""A compression segment, and which range of the history the next one covers.

A segment holds the ids and positions of its first and last entries, the
summary, when and by which model. Segments are contiguous and never overlap:
each starts right after the one before, and a fallback segment (the summariser
failed) is planned over again by the next compression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gateway.context.compiler import split_view
from gateway.state.session import Entry, HistoryView

KEEP_MIN = 5  # newest entries that always stay verbatim
KEEP_SHARE = 0.2  # ... or this share of the view's entries, whichever is more


@dataclass(frozen=True, slots=True)
class Segment:
    """A summarised range of the history, stored as JSON in Keys.segments."""

    first_id: str
    last_id: str
    first_index: int
    last_index: int
    summary: str
    created_at: float
    model: str
    fallback: bool
    messages: int  # entries of this segment's own range

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Plan:
    """The range the next segment covers, and the segments it builds on."""

    entries: list[Entry]
    first_index: int
    previous: dict[str, Any] | None  # the segment whose summary the new one extends
    replaces: dict[str, Any] | None  # a fallback segment the new one takes the place of

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.entries) - 1


def plan_segment(view: HistoryView, limit: int) -> Plan | None:
    """The next range to compress: the view's oldest entries beyond the newest kept verbatim.

    At least KEEP_MIN (or KEEP_SHARE of the view) newest entries stay; only
    entries before index `limit` are taken; the boundary never separates an
    assistant's tool call from its results. A fallback segment at the end is
    planned over again, so its messages get summarised after all.
    """
    _, entries = split_view(view.entries, view.segments)
    first_index = view.start + len(view.entries) - len(entries)
    keep = max(KEEP_MIN, math.ceil(len(entries) * KEEP_SHARE))
    cut = min(len(entries) - keep, limit - first_index)
    while cut > 0 and _splits_tool_call(entries, cut):
        cut -= 1
    if cut <= 0:
        return None
    last = view.segments[-1] if view.segments else None
    if last is not None and last.get("fallback"):
        previous = view.segments[-2] if len(view.segments) > 1 else None
        return Plan(list(entries[:cut]), first_index, previous, last)
    return Plan(list(entries[:cut]), first_index, last, None)


def _splits_tool_call(entries: Sequence[Entry], cut: int) -> bool:
    """True when a boundary before `entries[cut]` would part a tool call from its result."""
    if cut < len(entries) and entries[cut].get("role") == "tool":
        return True
    return bool(entries[cut - 1].get("role") == "assistant" and entries[cut - 1].get("tool_calls"))
