"""Splitting a reply into pieces that each fit the platform's length limit.

A piece is measured the way the platform counts (a renderer's measure, UTF-16
units, ...), cut where a reader expects a break, and a code block cut in two is
closed and reopened so every piece renders on its own.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

Measure = Callable[[str], int]

_FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")
_BREAKS = (re.compile("\n\n"), re.compile("\n"), re.compile(" "))  # the best first


def split_markdown(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split `text` into pieces whose measure is at most `limit`.

    Cuts at a paragraph break, else a line break, else a space, else anywhere,
    preferring a piece that measures at least half the limit. A code block that
    has to be cut is closed at the end of one piece and reopened (same info
    string) at the start of the next, so every piece renders on its own.

    A streamed reply is split on every flush, on the worker's event loop, and
    `measure` renders what it measures: the cut is found by measuring a few heads
    about a piece long (see `_Cutter`), never the whole rest of the text per try.
    """
    pieces: list[str] = []
    rest, ratio = text, 1.0
    while rest:
        cutter = _Cutter(rest, limit, measure, ratio)
        if cutter.whole_fits():
            pieces.append(rest)
            break
        head, rest = cutter.cut()
        ratio = cutter.ratio
        if head:
            pieces.append(head)
    return pieces or [""]


class _Cutter:
    """Where to cut one piece off the front of `text`, found with few measures.

    The search takes a longer head to measure no less than a shorter one (near
    enough true of every renderer): it guesses the cut from the heads measured so
    far (at first from `ratio`, the characters per unit of measure of the last
    piece), then measures the guess and its neighbour; bisection steps keep the
    worst case logarithmic. Each head is measured at most once, and the cut
    returned is one whose head was measured and fits.
    """

    def __init__(self, text: str, limit: int, measure: Measure, ratio: float) -> None:
        self.text, self.limit, self.measure = text, limit, measure
        self.ratio = ratio
        self.measured: dict[int, int] = {}
        # The shortest head known not to fit, and its measure (None: not measured).
        self.too_long = len(text) + 1
        self.too_long_measure: int | None = None
        self.fences: list[str | None] = []
        self.fenced_to = 0

    def whole_fits(self) -> bool:
        """Whether all of the text fits. Heads of growing length are measured first,
        so a long text is found too long without rendering all of it."""
        size = int(self.limit * self.ratio * 1.25) + 64
        while size < len(self.text):
            if not self.fits(size):
                return False
            size *= 2
        whole = self.measure(self.text)
        if whole <= self.limit:
            return True
        self.too_long, self.too_long_measure = len(self.text), whole
        return False

    def cut(self) -> tuple[str, str]:
        for pattern in _BREAKS:
            best = self.largest_fitting(self.breaks(pattern))
            if best is not None and self.measured[best] >= self.limit // 2:
                return self.finish(best)
        return self.finish(self.largest_fitting(range(1, self.too_long)) or 1)

    def breaks(self, pattern: re.Pattern[str]) -> list[int]:
        """Positions just after each `pattern` in the part of the text that may fit."""
        return [match.end() for match in pattern.finditer(self.text, 0, self.too_long)]

    def largest_fitting(self, positions: Sequence[int]) -> int | None:
        low, high = -1, len(positions)  # positions[low] fits; positions[high] does not
        step = 0
        while high - low > 1:
            guessing = step < 2 or step % 2 == 1
            middle = self.guess(positions, low, high) if guessing else (low + high) // 2
            if self.fits(positions[middle]):
                low = middle
            else:
                high = middle
            step += 1
        return positions[low] if low >= 0 else None

    def guess(self, positions: Sequence[int], low: int, high: int) -> int:
        """The index between `low` and `high` where the head should just fit, by
        interpolating between the nearest heads measured."""
        low_at, low_measure = 0, 0
        if low >= 0:
            low_at, low_measure = positions[low], self.measured[positions[low]]
        if high < len(positions):
            high_at, high_measure = positions[high], self.measured.get(positions[high])
        else:
            high_at, high_measure = self.too_long, self.too_long_measure
        if high_measure is not None and high_measure > low_measure:
            per_unit = (high_at - low_at) / (high_measure - low_measure)
        else:
            per_unit = self.ratio
        index = bisect.bisect_right(positions, low_at + (self.limit - low_measure) * per_unit) - 1
        return min(max(index, low + 1), high - 1)

    def fits(self, position: int) -> bool:
        if position >= self.too_long:
            return False
        if position not in self.measured:
            head = _head(self.text, position, self.fences_to(position))
            self.measured[position] = self.measure(head)
        if self.measured[position] <= self.limit:
            return True
        self.too_long, self.too_long_measure = position, self.measured[position]
        return False

    def finish(self, position: int) -> tuple[str, str]:
        fences = self.fences_to(position)
        head, tail = _head(self.text, position, fences), _tail(self.text, position, fences)
        if len(tail) >= len(self.text):  # a reopened fence longer than the cut: cut plainly
            head, tail = self.text[:position].rstrip(), self.text[position:]
        if position in self.measured:
            self.ratio = min(max(position / max(self.measured[position], 1), 0.05), 20.0)
        return (head if head.strip() else ""), tail

    def fences_to(self, position: int) -> list[str | None]:
        """Fence states of the lines up to `position` (a line's state depends only on
        the lines before it, so the text past `position` need not be read)."""
        if position > self.fenced_to:
            self.fenced_to = max(position, 2 * self.fenced_to)
            self.fences = _fence_states(self.text[: self.fenced_to])
        return self.fences


def _head(text: str, position: int, fences: list[str | None]) -> str:
    """The piece before a cut at `position`, closing a code block that spans it."""
    fence = fences[text.count("\n", 0, position)]
    if fence is None:
        return text[:position].rstrip()
    marker = _FENCE.match(fence)
    closing = marker.group(1) if marker else "```"
    return f"{text[:position].rstrip()}\n{closing}"


def _tail(text: str, position: int, fences: list[str | None]) -> str:
    """The text after a cut at `position`, reopening a code block that spans it."""
    fence = fences[text.count("\n", 0, position)]
    tail = text[position:].lstrip("\n")
    return tail if fence is None else f"{fence}\n{tail}"


def _fence_states(text: str) -> list[str | None]:
    """For each line, the opening fence line of the code block it lies inside (or None)."""
    states: list[str | None] = []
    open_fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if match and open_fence is None:
            states.append(None)
            open_fence = line.strip()
            continue
        if match and open_fence is not None and not match.group(2).strip():
            states.append(open_fence)
            open_fence = None
            continue
        states.append(open_fence)
    # position at the very end of a line belongs to that line; one extra slot for safety
    states.append(open_fence)
    return states
