"""Documents: text files inlined, PDFs' text extracted, anything else named and not read.

Text (plain, Markdown, CSV, JSON, source code...) is recognised by its type or
name and must decode as UTF-8 without NUL bytes; a PDF must start as one. The
text is cut at a character cap (and a PDF at a page cap) with a marker that
says how much was left out, so the model knows it did not see everything.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath

from gateway.errors import UnreadableMedia

log = logging.getLogger(__name__)

TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
    }
)
TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .csv .tsv .json .jsonl .yaml .yml .toml .ini .cfg .conf .log "
    ".xml .html .htm .css .js .ts .tsx .jsx .py .rb .go .rs .java .kt .c .h .cc .cpp .hpp "
    ".cs .php .sh .bash .zsh .sql .swift .scala .lua .pl .r .m .tex .diff .patch .env".split()
)


# What a platform sends for a file the bot may not read: its sign-in page (Slack,
# without the files:read scope), with status 200.
SIGN_IN_PAGE = "the platform sent a web page instead of the file (can the bot read files?)"
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})


@dataclass(frozen=True, slots=True)
class Document:
    """A document's text for the model (None: not read), and what to say about it."""

    text: str | None
    note: str | None = None


def read_document(
    data: bytes, name: str, mime_type: str | None, max_chars: int, max_pages: int
) -> Document:
    """The text of `data`; UnreadableMedia for a PDF that is not one or is damaged."""
    suffix = PurePosixPath(name).suffix.lower()
    mime = (mime_type or "").split(";")[0].strip().lower()
    if mime == "application/pdf" or suffix == ".pdf":
        return _pdf(data, max_chars, max_pages)
    if mime.startswith("text/") or mime in TEXT_TYPES or suffix in TEXT_SUFFIXES or not mime:
        text = _decoded(data)
        if text is not None and _web_page_instead(text, suffix, mime):
            raise UnreadableMedia(SIGN_IN_PAGE)
        if text is not None:
            return Document(cut(text, max_chars))
    return Document(None, f"not read ({mime or suffix.lstrip('.') or 'binary'})")


def cut(text: str, max_chars: int) -> str:
    """`text` kept to `max_chars` characters, the rest replaced by a marker saying how much."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[… cut: {len(text) - max_chars:,} more characters]"


def _web_page_instead(text: str, suffix: str, mime: str) -> bool:
    """A whole HTML page where the file is not declared HTML."""
    if suffix in HTML_SUFFIXES or mime in ("text/html", "application/xhtml+xml"):
        return False
    head = text[:512].lstrip().lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


def _decoded(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _pdf(data: bytes, max_chars: int, max_pages: int) -> Document:
    if not data.lstrip()[:5] == b"%PDF-":
        raise UnreadableMedia("not a PDF")
    # Imported by the first PDF: pypdf adds about 16 MB to a worker that never reads one.
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableMedia("a password-protected PDF")
        pages = reader.pages
        count = len(pages)
        texts = [(pages[i].extract_text() or "").strip() for i in range(min(count, max_pages))]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        log.info("a PDF could not be read: %s", type(exc).__name__)
        raise UnreadableMedia("a damaged PDF") from None
    text = "\n\n".join(t for t in texts if t)
    if count > max_pages:
        text += f"\n[… cut: {count - max_pages} more pages]"
    if not text.strip():
        return Document(None, "a PDF without text (scanned pages are not read)")
    return Document(cut(text, max_chars))
