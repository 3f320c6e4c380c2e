"""Markdown shapes that make careless converters slow: what the renderers must survive.

Each shape is a unit repeated to the wanted length. The units are the ones that
make regex-based converters quadratic: an opening delimiter whose closing one
never comes (every opening scans to the end of the line), long runs of one
delimiter, and whitespace between optional parts of a line pattern; and some
that are merely heavy (a span every few characters).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
BOUND = 1.0  # seconds of this thread's CPU time: other processes on the machine do not count

UNITS: dict[str, str] = {
    "link-open": "[a](",
    "image-open": "![a](",
    "star-word": "*a ",
    "double-star": "**a ",
    "star-run": "*",
    "triple-star": "***a ",
    "underscore-word": "_a ",
    "underscore-run": "_",
    "double-underscore": "__a ",
    "tilde-pair": "~~a ",
    "tilde-run": "~",
    "backtick-run": "`",
    "backtick-mixed": "``a`",
    "nested-brackets": "[",
    "bracket-word": "[a",
    "angle-run": "<",
    "quote-run": ">",
    "autolink-open": "<http:",
    "no-spaces": "abcdefghij",
    "fences": "```\n",
    "tilde-fences": "~~~ x\n",
    "tables": "| a | b |\n|---|---|\n",
    "rule-dashes": "- ",
    "escapes": "\\*",
    "link-target": "[a](x",
    "link-title": '[a](x "',
    "angle-link": "[a](<",
    "emphasis-mix": "**a *b ~~c __d _e ",
    "code-in-links": "[`a`](",
    "long-target": "[a](https://e.io/",
    "astral": "😀*",
    "word-escape": "a\\*",
    "code-spans": "`a` ",
    "bold-spans": "**a** ",
    "link-spans": "[a](https://e.io) ",
}

SPECIAL = ("heading-spaces", "fence-spaces", "table-spaces", "mix")
SHAPES = (*UNITS, *SPECIAL)


def adversarial(shape: str, size: int) -> str:
    """`size` characters of the named shape."""
    if shape in UNITS:
        return _repeat(UNITS[shape], size)
    if shape == "heading-spaces":  # a heading's closing-hash pattern, with nothing to close
        return "#### a" + " " * (size - 7) + "b"
    if shape == "fence-spaces":  # a fence's info string: spaces, then a backtick
        return "```" + " " * (size - 4) + "`"
    if shape == "table-spaces":  # a table's separator line: spaces between optional parts
        return "|\n" + " " * (size - 3) + "x"
    if shape == "mix":
        return _mix(size)
    raise ValueError(f"unknown shape {shape!r}")


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _mix(size: int) -> str:
    """Every unit, in a fixed random order, with plain words and line breaks between.

    Fences come in pairs here, and no unit starts a line: a fence left open would
    turn the rest into plain code."""
    rng = random.Random(7)
    inline = [unit for unit in UNITS.values() if "\n" not in unit]
    units = [
        *inline,
        "\n",
        "\n\n",
        "**b** ",
        "[ok](https://e.io) ",
        "\n```\nx\n```\n",
        "\n| a | b |\n|---|---|\n",
    ]
    parts: list[str] = []
    length = 0
    while length < size:
        unit = "word " + rng.choice(units) * rng.randint(1, 40)
        parts.append(unit)
        length += len(unit)
    return "".join(parts)[:size]


def within_a_second(work: Callable[[], T]) -> T:
    """Run `work` and fail when it takes more than `BOUND` seconds of CPU time (a linear
    converter takes far less; the quadratic ones took 10 s and more). CPU time, not the
    clock: a test run shares the machine's cores with others, whose work is not this
    one's. The best of three runs counts: a loaded machine slows a run, never speeds one."""
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        result = work()
        best = min(best, time.thread_time() - started)
        if best < BOUND:
            return result
    raise AssertionError(f"took {best:.2f} s at best, more than {BOUND} s")
