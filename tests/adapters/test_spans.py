"""The linear-time span finders return exactly what the regexes they replace return."""

from __future__ import annotations

import random
import re

import pytest

from adapters import spans

# (mark, opener, closer) of every delimited span the renderers look for.
DELIMITED = [
    ("*", r"(?<![*\w])\*\*\*(?=\S)", r"(?<=\S)\*\*\*(?![*\w])"),
    ("*", r"(?<![*\\])\*\*(?=\S)", r"(?<=\S)\*\*(?!\*)"),
    ("_", r"(?<![\w_])__(?=\S)", r"(?<=\S)__(?![\w_])"),
    ("*", r"(?<![*\w])\*(?=[^\s*])", r"(?<=[^\s*])\*(?![*\w])"),
    ("~", r"(?<!~)~~(?=\S)", r"(?<=\S)~~(?!~)"),
    ("*", r"\*\*(?=\S)", r"(?<=\S)\*\*"),
    ("~", r"~~(?=\S)", r"(?<=\S)~~"),
    ("_", r"(?<![\w_])_(?=[^\s_])", r"(?<=[^\s_])_(?![\w_])"),
    ("_", r"(?<!\w)__(?=\S)", r"(?<=\S)__(?!\w)"),
    ("*", r"(?<![\w*])\*(?=[^\s*])", r"(?<=[^\s*])\*(?![\w*])"),
]


def texts(alphabet: str, count: int = 3000, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(count)]


def found_by_regex(pattern: re.Pattern[str], text: str) -> list[tuple[int, int, tuple[str, ...]]]:
    return [(m.start(), m.end(), (m.group(0), *m.groups())) for m in pattern.finditer(text)]


def found_by_finder(finder: spans.Finder, text: str) -> list[tuple[int, int, tuple[str, ...]]]:
    found, pos = [], 0
    while (span := finder.search(pos)) is not None:
        found.append((span.start(), span.end(), span.parts))
        pos = span.end()
    return found


@pytest.mark.parametrize(("mark", "opener", "closer"), DELIMITED)
def test_delimited_spans_match_their_regex(mark: str, opener: str, closer: str) -> None:
    pattern = re.compile(f"{opener}(.+?){closer}")
    delimited = spans.Delimited(mark, opener, closer)
    for text in texts("*_~ a\\\n"):
        assert found_by_finder(delimited.finder(text), text) == found_by_regex(pattern, text), text


def test_exact_code_spans_match_their_regex() -> None:
    pattern = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
    for text in texts("``a \n"):
        assert found_by_finder(spans.ExactCodeSpans(text), text) == found_by_regex(pattern, text)


def test_loose_code_spans_match_their_regex() -> None:
    pattern = re.compile(r"(`+)(.+?)\1", re.DOTALL)
    for text in texts("``a \n"):
        assert found_by_finder(spans.LooseCodeSpans(text), text) == found_by_regex(pattern, text)


def test_links_match_their_regex() -> None:
    pattern = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
    for text in texts('[]()<>!" a\n', count=20000):
        assert found_by_finder(spans.Links(text), text) == found_by_regex(pattern, text), text


def test_a_search_from_the_middle_sees_the_text_before_it() -> None:
    pattern = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
    for text in texts("[]()! a"):
        for pos in range(len(text) + 1):
            match = pattern.search(text, pos)
            span = spans.Links(text).search(pos)
            assert (span and (span.start(), span.end())) == (match and match.span()), (text, pos)
