"""A platform's file as the core's attachment."""

from __future__ import annotations

from adapters.attachments import attachment


def test_an_attachment_takes_its_kind_from_its_type_and_drops_wrong_typed_values() -> None:
    voice = attachment(url="https://x/a.ogg", name="a.ogg", mime_type="AUDIO/ogg", size=10)
    assert voice.kind == "voice" and voice.size == 10
    image = attachment(url="https://x/b.png", name=5, mime_type="image/png", size=-1)
    assert image.kind == "image" and image.name is None and image.size is None
    marked = attachment(url=None, name="note", mime_type=None, voice=True, file_id="F1")
    assert marked.kind == "voice" and marked.url is None and marked.file_id == "F1"
    assert attachment(url="u", name="c.pdf", mime_type="application/pdf").kind == "file"
