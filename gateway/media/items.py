"""A processed attachment: what the compiler reads, as it is stored.

An image's bytes are stored beside its item, not in it (`store.py`): a turn
reads every item of its view, but the images of the last few turns only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

Kind = Literal["image", "document", "voice"]


@dataclass(frozen=True, slots=True)
class MediaItem:
    """One attachment after processing.

    `text` is a document's text or a voice note's transcript (cut markers
    kept); `note` says why there is no text (a type not read, transcription
    off) or, with `failed`, why the file could not be used at all.
    `image` is the re-encoded image as a data URL (`image_mime`), when loaded: the one
    copy a turn holds, which every compile of the turn's request refers to.
    """

    kind: Kind
    name: str
    text: str | None = None
    note: str | None = None
    failed: bool = False
    image_mime: str | None = None
    image: str | None = None

    def dump(self) -> str:
        """The stored form, without the image's bytes."""
        fields = {k: v for k, v in asdict(self).items() if v is not None and k != "image"}
        return json.dumps(fields, ensure_ascii=False)

    @classmethod
    def load(cls, raw: str) -> MediaItem:
        fields: dict[str, Any] = json.loads(raw)
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    def with_image(self, image: str | None) -> MediaItem:
        return replace(self, image=image)

    @property
    def notice(self) -> str | None:
        """The line the user reads about this file, when it could not be used."""
        return f"{self.name}: {self.note}" if self.failed and self.note else None


def image_entry_ids(entries: Sequence[Mapping[str, Any]], turns: int) -> set[str]:
    """The ids of the last `turns` user entries: the ones whose images are sent as images
    (older ones reach the model by name, so a long conversation does not resend them all)."""
    users = [e for e in entries if e.get("role") == "user"]
    return {str(e.get("id")) for e in users[-turns:]} if turns > 0 else set()
