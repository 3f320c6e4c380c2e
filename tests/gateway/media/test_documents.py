"""Documents: text inlined with a cut marker, PDFs' text page-capped, other types named."""

from __future__ import annotations

import pytest

from gateway.errors import UnreadableMedia
from gateway.media.documents import read_document
from tests.support.media_files import pdf, png


def test_markdown_is_inlined_and_cut_with_a_marker_saying_how_much() -> None:
    doc = read_document(("# Notes\n" + "a" * 500).encode(), "notes.md", "text/markdown", 100, 5)
    assert doc.text is not None
    assert doc.text.startswith("# Notes\n")
    assert doc.text.endswith("[… cut: 408 more characters]")


def test_json_and_source_code_are_read_by_type_or_name() -> None:
    assert read_document(b'{"a": 1}', "x", "application/json", 100, 5).text == '{"a": 1}'
    assert read_document(b"print(1)\n", "main.py", None, 100, 5).text == "print(1)\n"


def test_a_pdfs_text_is_extracted_up_to_the_page_cap() -> None:
    doc = read_document(pdf("First page", "Second page", "Third page"), "r.pdf", None, 1000, 2)
    assert doc.text == "First page\n\nSecond page\n[… cut: 1 more pages]"


def test_a_pdf_that_is_not_one_is_an_error() -> None:
    with pytest.raises(UnreadableMedia, match="not a PDF"):
        read_document(b"hello, I am text", "scan.pdf", "application/pdf", 100, 5)


def test_a_binary_file_is_named_not_read() -> None:
    doc = read_document(png(), "archive.zip", "application/zip", 100, 5)
    assert doc.text is None
    assert doc.note == "not read (application/zip)"


SIGN_IN = b"<!DOCTYPE html>\n<html><head><title>Sign in | Slack</title></head><body></body></html>"


@pytest.mark.parametrize(
    ("name", "mime"), [("notes.txt", "text/plain"), ("data.csv", None), ("x", None)]
)
def test_a_sign_in_page_where_a_text_file_was_expected_is_an_error(
    name: str, mime: str | None
) -> None:
    """Slack answers a file the bot may not read with its sign-in page (status 200)."""
    with pytest.raises(UnreadableMedia, match="web page instead of the file"):
        read_document(SIGN_IN, name, mime, 1000, 5)


def test_an_html_file_is_read_as_the_text_it_is() -> None:
    assert read_document(SIGN_IN, "page.html", "text/html", 1000, 5).text == SIGN_IN.decode()
