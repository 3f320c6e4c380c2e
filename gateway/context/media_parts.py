"""How processed attachments appear in a model request (pure: no Redis, no model).

    [image: photo.png]                      and, for a model that sees, an image part
    [file: notes.md]\n<its text>            a document (cut markers kept)
    [voice message, transcribed]: <text>    a voice note
    [file: scan.pdf, not used: not a PDF]   a file that could not be used

Only the images of the last few user turns go as images (`image_ids`); older
ones, and every image for a model that cannot see, go by name. What users
wrote (names, a document's text, a transcript) has its reminder tags escaped,
and a name stays on one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.context import reminders
from gateway.media.items import MediaItem

Part = dict[str, Any]


@dataclass(frozen=True, slots=True)
class MediaView:
    """The processed attachments a request is compiled with."""

    items: Mapping[str, Mapping[int, MediaItem]] = field(default_factory=dict)
    vision: bool = False
    image_ids: frozenset[str] = frozenset()  # entries whose images are sent as images

    def render(self, entry: Mapping[str, Any]) -> tuple[list[str], list[Part]]:
        """The text blocks and image parts of one user entry's attachments."""
        entry_id = str(entry.get("id", ""))
        found = self.items.get(entry_id, {})
        blocks: list[str] = []
        images: list[Part] = []
        for index, attachment in enumerate(entry.get("attachments") or []):
            item = found.get(index)
            if item is None:
                blocks.append(unprocessed_label(attachment))
                continue
            blocks.append(item_text(item))
            if self.vision and entry_id in self.image_ids and item.image:
                images.append({"type": "image_url", "image_url": {"url": item.image}})
        return blocks, images


def item_text(item: MediaItem) -> str:
    """One processed attachment as the model reads it in text."""
    name = inline(item.name)
    if item.failed:
        label = "image" if item.kind == "image" else "file"
        return f"[{label}: {name}, not used: {item.note}]"
    if item.kind == "image":
        return f"[image: {name}]" if not item.note else f"[image: {name}, {item.note}]"
    if item.kind == "voice":
        if item.text is None:
            return f"[voice message: {name}, not transcribed]"
        return f"[voice message, transcribed]: {reminders.escape_tags(item.text)}"
    if item.text is None:
        return f"[file: {name}, {item.note or 'not read'}]"
    return f"[file: {name}]\n{reminders.escape_tags(item.text)}"


def unprocessed_label(attachment: object) -> str:
    """An attachment with no processed item (media off, expired, or from before)."""
    fields = attachment if isinstance(attachment, Mapping) else {}
    label = str(fields.get("name") or fields.get("url") or "unnamed")
    return f"[attachment: {fields.get('kind', 'file')} {inline(label)}]"


def inline(name: str) -> str:
    """A user-written name on one line (its line breaks as spaces), its reminder tags escaped."""
    return reminders.escape_tags(" ".join(name.splitlines()))
