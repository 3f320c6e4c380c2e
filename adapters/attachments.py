"""A file a platform event describes, as the core's `Attachment`."""

from __future__ import annotations

from gateway.messages import Attachment


def attachment(
    *,
    url: object,
    name: object,
    mime_type: object,
    size: object = None,
    file_id: object = None,
    voice: bool = False,
) -> Attachment:
    """A file the platform describes, as the core's Attachment: "voice" when the platform
    marks it so (`voice`) or its type is audio, "image" when its type says so, else "file".

    The values are the platform's JSON as it came: one of the wrong type is left out
    (the file is still named), never turned into a conversion error.
    """
    mime = _text(mime_type)
    kind = "file"
    if voice or (mime or "").lower().startswith("audio/"):
        kind = "voice"
    elif (mime or "").lower().startswith("image/"):
        kind = "image"
    declared = size if type(size) is int and size >= 0 else None
    return Attachment(
        kind=kind,
        url=_text(url),
        name=_text(name),
        mime_type=mime,
        size=declared,
        file_id=_text(file_id),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
