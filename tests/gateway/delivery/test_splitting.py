"""Splitting a reply: where it is cut, code blocks closed and reopened, every piece fits."""

from __future__ import annotations

import pytest

from gateway.delivery.splitting import split_markdown


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def balanced(piece: str) -> bool:
    return sum(1 for line in piece.split("\n") if line.strip().startswith("```")) % 2 == 0


def test_short_text_is_one_piece() -> None:
    assert split_markdown("hello", 10) == ["hello"]


def test_split_prefers_paragraphs_then_lines_then_words() -> None:
    text = "a" * 40 + "\n\n" + "b" * 40
    assert split_markdown(text, 60) == ["a" * 40, "b" * 40]
    text = "a" * 40 + "\n" + "b" * 40
    assert split_markdown(text, 60) == ["a" * 40, "b" * 40]
    text = " ".join(["word"] * 30)
    pieces = split_markdown(text, 50)
    assert all(len(p) <= 50 for p in pieces)
    assert " ".join(pieces) == text


def test_unbreakable_text_is_cut_hard() -> None:
    pieces = split_markdown("x" * 250, 100)
    assert pieces == ["x" * 100, "x" * 100, "x" * 50]


def test_code_block_cut_is_closed_and_reopened() -> None:
    code = "\n".join(f"line {i} = {i * i}" for i in range(200))
    text = f"Intro paragraph.\n\n```python\n{code}\n```\n\nOutro."
    pieces = split_markdown(text, 500)
    assert len(pieces) > 3
    assert all(len(p) <= 500 and balanced(p) for p in pieces)
    assert pieces[1].startswith("```python\n")
    rejoined = "".join(pieces).replace("```\n```python\n", "\n").replace("\n``````python", "")
    for i in range(200):
        assert f"line {i} = {i * i}" in rejoined


def test_measure_in_utf16_never_splits_a_surrogate_pair() -> None:
    text = "😀" * 3000  # 2 UTF-16 units each
    pieces = split_markdown(text, 4096, utf16)
    assert all(utf16(p) <= 4096 for p in pieces)
    assert "".join(pieces) == text
    assert all("\ud83d" not in p for p in pieces)


def test_a_long_reply_is_measured_a_few_times_over_not_once_per_cut() -> None:
    measured: list[int] = []

    def counting(text: str) -> int:
        measured.append(len(text))
        return len(text)

    text = ("A sentence of prose, long enough. " * 30 + "\n\n") * 100  # 102,200 characters
    pieces = split_markdown(text, 4000, counting)
    assert len(pieces) > 25 and all(len(piece) <= 4000 for piece in pieces)
    assert sum(measured) < 6 * len(text)


def test_blank_runs_never_become_empty_pieces() -> None:
    assert split_markdown("\n" * 300 + "word", 100) == ["word"]
    assert split_markdown("a" + "\n" * 300 + "b", 100) == ["a", "b"]
    assert len(split_markdown(" " * 500, 100)) == 1


@pytest.mark.parametrize("limit", [30, 64, 200])
def test_every_piece_fits_for_many_limits(limit: int) -> None:
    text = ("Some *markdown* text with `code` and\n\n```js\nconst x = 1;\n" * 20) + "```"
    assert all(len(p) <= limit for p in split_markdown(text, limit))
