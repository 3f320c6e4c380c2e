"""Inline spans between delimiters (`**b**`, `` `code` ``), found in linear time.

The renderers used regexes such as `\\*\\*(?=\\S)(.+?)(?<=\\S)\\*\\*`: from every
opening delimiter the engine scans to the end of the line for a closing one,
so a line of `**a ` repeated without a closer costs quadratic time (seconds at
16,000 characters, on the event loop that streams every reply). The finders
here return exactly what those regexes return (the same leftmost match, the
same lazy content; `tests/adapters/test_spans.py` compares them), without the
rescanning: a closing delimiter once found is remembered for every opener
before it, and when the first opener has no closer after it, no later one has.

A finder is made for one text and answers `search(pos)`, like
`pattern.search(text, pos)`: the delimiters' lookarounds see the text before
`pos`, as a regex's do. Searches must move forward (`sub` and the renderers'
loops do): what a finder remembers holds only for later positions.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A found span, read like a regex match: `group(0)` is the whole, `group(1)` the inside."""

    begin: int
    finish: int
    parts: tuple[str, ...]

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish

    def group(self, index: int = 0) -> str:
        return self.parts[index]


class Finder:
    """What every finder answers: the leftmost span starting at or after `pos`."""

    def search(self, pos: int) -> Span | None:
        raise NotImplementedError


def sub(finder: Finder, text: str, replace: Callable[[Span], str]) -> str:
    """`pattern.sub(replace, text)` for a finder made on `text`."""
    if finder is NOTHING:
        return text
    out: list[str] = []
    pos = 0
    while (span := finder.search(pos)) is not None:
        out.append(text[pos : span.start()])
        out.append(replace(span))
        pos = span.end()
    out.append(text[pos:])
    return "".join(out)


class Delimited:
    """`opener(.+?)closer` where both delimiters are fixed strings with local lookarounds.

    `opener` and `closer` are regexes that each match one fixed-length delimiter
    (lookbehinds and lookaheads allowed); the inside is at least one character
    and never crosses a line break, as `.+?` does. `mark` is a character every
    opener holds: most lines hold none, and are passed over at once.
    """

    def __init__(self, mark: str, opener: str, closer: str) -> None:
        self._mark = mark
        self._opener = re.compile(opener)
        self._closer = re.compile(closer)

    def finder(self, text: str) -> Finder:
        if self._mark not in text:
            return NOTHING
        return _DelimitedFinder(text, self._opener, self._closer)


class _Nothing(Finder):
    """The finder for a text that holds no span at all."""

    def search(self, pos: int) -> Span | None:
        return None


NOTHING = _Nothing()


class _DelimitedFinder(Finder):
    """Each part of the text is read once: by the search for the next opener, for the
    next closer (remembered: openers on one line share it) or for a line break."""

    def __init__(self, text: str, opener: re.Pattern[str], closer: re.Pattern[str]) -> None:
        self._text = text
        self._opener, self._closer = opener, closer
        self._closer_from = -1
        self._closing: re.Match[str] | None = None
        self._exhausted = False

    def search(self, pos: int) -> Span | None:
        text = self._text
        while not self._exhausted and (opening := self._opener.search(text, pos)):
            inside = opening.end()
            closing = self._first_closer(inside + 1)
            if closing is None:
                self._exhausted = True  # no closer after this opener, so none after later ones
                break
            line_break = text.find("\n", inside, closing.start())
            if line_break >= 0:
                pos = line_break + 1
                continue
            begin, finish = opening.start(), closing.end()
            return Span(begin, finish, (text[begin:finish], text[inside : closing.start()]))
        return None

    def _first_closer(self, start: int) -> re.Match[str] | None:
        remembered = self._closing
        if remembered is None or not self._closer_from <= start <= remembered.start():
            remembered = self._closing = self._closer.search(self._text, start)
            self._closer_from = start
        return remembered


class Searched(Finder):
    """A regex that is linear on its own (no lazy scan to the end of the line), as a finder."""

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self._pattern = pattern
        self._text = text

    def search(self, pos: int) -> Span | None:
        match = self._pattern.search(self._text, pos)
        if match is None:
            return None
        return Span(match.start(), match.end(), (match.group(0), *match.groups("")))


class Alternatives(Finder):
    """`a|b|...` over finders: the leftmost span, the earlier alternative on a tie."""

    def __init__(self, finders: Sequence[Finder]) -> None:
        self._finders = finders

    def search(self, pos: int) -> Span | None:
        best: Span | None = None
        for finder in self._finders:
            span = finder.search(pos)
            if span is not None and (best is None or span.start() < best.start()):
                best = span
        return best


class _Runs:
    """The maximal runs of backticks of a text: where each starts, how long it is, where it ends."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.lengths: list[int] = []
        for match in re.finditer("`+", text):
            self.starts.append(match.start())
            self.lengths.append(match.end() - match.start())
        self.ends = [
            start + length for start, length in zip(self.starts, self.lengths, strict=True)
        ]

    def at(self, pos: int) -> int:
        """Index of the first run that ends after `pos`."""
        return bisect_right(self.ends, pos)


class ExactCodeSpans(Finder):
    """`` (`+)(.+?)(?<!`)\\1(?!`) `` with DOTALL: a code span closes on a run of exactly as
    many backticks as it opened with (CommonMark's rule).

    Only maximal runs can close, so a run of `r` backticks opens the longest span
    `k <= r` for which some later run is exactly `k` long, closing on the first one.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._runs = _Runs(text)
        self._by_length: dict[int, list[int]] = {}
        for index, length in enumerate(self._runs.lengths):
            self._by_length.setdefault(length, []).append(index)

    def search(self, pos: int) -> Span | None:
        runs = self._runs
        for current in range(runs.at(pos), len(runs.starts)):
            begin = max(runs.starts[current], pos)
            for length in range(runs.ends[current] - begin, 0, -1):
                closing = self._first_later(current, length)
                if closing is not None:
                    return _code_span(self._text, begin, length, runs.starts[closing])
        return None

    def _first_later(self, current: int, length: int) -> int | None:
        indexes = self._by_length.get(length, [])
        found = bisect_right(indexes, current)
        return indexes[found] if found < len(indexes) else None


class LooseCodeSpans(Finder):
    """`` (`+)(.+?)\\1 `` with DOTALL: any `k` backticks close a span opened with `k`, even
    inside a longer run. Meant for `sub` (searches move past each span found).

    From a run with `r` backticks left, the longest `k` that can close is the
    larger of: `(r - 1) // 2` (the span closes inside the same run) and the longest
    later run, capped at `r`.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._runs = _Runs(text)
        lengths = self._runs.lengths
        self._longest_after = [0] * (len(lengths) + 1)
        for index in range(len(lengths) - 1, -1, -1):
            self._longest_after[index] = max(self._longest_after[index + 1], lengths[index])

    def search(self, pos: int) -> Span | None:
        runs = self._runs
        current = runs.at(pos)
        if current == len(runs.starts):
            return None
        begin = max(runs.starts[current], pos)
        left = runs.ends[current] - begin
        within = (left - 1) // 2
        later = min(left, self._longest_after[current + 1])
        if later > within:
            return _code_span(self._text, begin, later, self._first_at_least(current, later))
        if within > 0:
            return _code_span(self._text, begin, within, begin + within + 1)
        return None  # a run of one or two backticks with no run after it

    def _first_at_least(self, current: int, length: int) -> int:
        """Start of the first run after `current` with at least `length` backticks (one
        exists). The runs walked over lie inside the span found, so `sub` walks each once."""
        index = current + 1
        while self._runs.lengths[index] < length:
            index += 1
        return self._runs.starts[index]


class Links(Finder):
    """`!?\\[([^\\]]*)\\]\\(\\s*<?([^)\\s>]+)>?(?:\\s+"[^"]*")?\\s*\\)`: a Markdown link or
    image, `group(1)` its label and `group(2)` its target.

    As a regex this is quadratic on `[a](` repeated: the label runs on over later
    `[`s and the target over later `](`s, so every opening rescans the rest. Here
    an opening that fails is passed over with every `[` before its `]` (they all
    end their label on it), and where a target ends is found once per stretch of
    text: searches only move forward, as `sub` makes them.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._target_from, self._target_end = -1, -1
        self._tails: dict[int, int | None] = {}

    def search(self, pos: int) -> Span | None:
        text = self._text
        opening = text.find("[", pos)
        while opening >= 0:
            closing = text.find("]", opening + 1)
            if closing < 0:
                return None
            span = self._link(opening, closing, pos)
            if span is not None:
                return span
            opening = text.find("[", closing + 1)
        return None

    def _link(self, opening: int, closing: int, pos: int) -> Span | None:
        text = self._text
        if not text.startswith("(", closing + 1):
            return None
        spaces = _SPACES.match(text, closing + 2)
        assert spaces is not None  # `\s*` always matches
        target = spaces.end()
        target_end = self._ends_target(target)
        if target_end == target:
            return None
        if text.startswith("<", target) and target_end > target + 1:
            target += 1  # `<url>`; a lone `<` is the target itself
        end = self._tail(target_end)
        if end is None:
            return None
        begin = opening - 1 if opening > pos and text[opening - 1] == "!" else opening
        return Span(
            begin, end, (text[begin:end], text[opening + 1 : closing], text[target:target_end])
        )

    def _ends_target(self, start: int) -> int:
        """Where a target starting at `start` ends: the next `)`, `>` or whitespace."""
        if not self._target_from <= start <= self._target_end:
            found = _TARGET_END.search(self._text, start)
            self._target_from = start
            self._target_end = found.start() if found else len(self._text)
        return self._target_end

    def _tail(self, target_end: int) -> int | None:
        """The end of `>?(?:\\s+"[^"]*")?\\s*\\)` after a target, or None (remembered:
        openings that share a target share its tail)."""
        if target_end not in self._tails:
            text = self._text
            after = target_end + 1 if text.startswith(">", target_end) else target_end
            title = _TITLE.match(text, after)
            close = _CLOSE.match(text, title.end()) if title else None
            close = close or _CLOSE.match(text, after)
            self._tails[target_end] = close.end() if close else None
        return self._tails[target_end]


_SPACES = re.compile(r"\s*")
_TARGET_END = re.compile(r"[)\s>]")
_TITLE = re.compile(r'\s+"[^"]*"')
_CLOSE = re.compile(r"\s*\)")


def _code_span(text: str, begin: int, length: int, close: int) -> Span:
    finish = close + length
    return Span(
        begin,
        finish,
        (text[begin:finish], text[begin : begin + length], text[begin + length : close]),
    )
