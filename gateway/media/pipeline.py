"""The media step of a turn: each new attachment downloaded, converted and stored, once.

    prepare(session_key, entries, new, vision)
        stored items of every entry with attachments (one round trip)
        -> the attachments of `new` not processed yet: concurrently, at most
           GATEWAY_MEDIA_CONCURRENCY at once per worker, each within its limits
        -> the images of the last GATEWAY_IMAGE_TURNS user turns, for a model that sees
        -> PreparedMedia: items by entry, notices for the user, notes for the model

A file that cannot be used becomes an item that says why, and one line for the
user ("photo.png: over the 20 MB limit"); the rest of the message is answered.
A re-run of the turn finds the items stored and tells nobody twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TypeVar

from pydantic import ValidationError
from redis.asyncio import Redis

from gateway.errors import DownloadTimeout, MediaError, MediaTooLarge
from gateway.media.audio import NOT_ENABLED, Transcriber
from gateway.media.documents import read_document
from gateway.media.download import Downloader, megabytes, over_limit
from gateway.media.images import convert
from gateway.media.items import Kind, MediaItem, image_entry_ids
from gateway.media.memory import return_large_buffers
from gateway.media.store import MediaStore, item_field
from gateway.messages import Attachment
from gateway.metrics import Metrics
from gateway.models import Charge, Models
from gateway.ports import FileSource, PlainSource, WorkspaceFiles
from gateway.settings.env import Settings

log = logging.getLogger(__name__)

Entry = Mapping[str, object]
T = TypeVar("T")
IMAGE_SUFFIXES = frozenset(".png .jpg .jpeg .gif .webp .bmp .tif .tiff .heic".split())
HEARD_CHARS = 200  # of a transcript quoted back to the user
NO_VISION_NOTICE = "This model cannot see images: it reads their names only."
NO_VISION_NOTE = (
    "The current model cannot see images: the user's images reach you by name only. "
    "Say so if the user asks about what they show."
)


@dataclass(frozen=True, slots=True)
class PreparedMedia:
    """What the compiler reads (`items[entry_id][index]`), what the user and model are told.

    `heard` holds this turn's new transcripts (the user sees what was heard, quoted);
    `notices` the files that could not be used and the one-time notes.
    """

    items: Mapping[str, Mapping[int, MediaItem]] = field(default_factory=dict)
    notices: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    heard: tuple[str, ...] = ()

    def lines(self) -> tuple[str, ...]:
        """The message the user reads before the answer, a line each (none: no message)."""
        return (*(f"🎤 {line}" for line in self.heard), *(f"⚠️ {line}" for line in self.notices))


class _MessageBytes:
    """What is left of one message's byte allowance (GATEWAY_MEDIA_MESSAGE_BYTES)."""

    def __init__(self, limit: int) -> None:
        self.limit = self.left = limit

    def take(self, size: int) -> None:
        if size > self.left:
            raise MediaTooLarge(f"over the {megabytes(self.limit)} one message may carry")
        self.left -= size


class MediaPipeline:
    """Shared by one worker's turns; `aclose` when the worker stops."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        models: Models,
        metrics: Metrics,
        sources: Mapping[str, FileSource] | None = None,
    ) -> None:
        self.settings, self.models, self.metrics = settings, models, metrics
        self.sources = dict(sources or {})
        self.store = MediaStore(redis, settings.media_ttl, settings.media_session_bytes)
        self.downloader = Downloader(settings.download_timeout, settings.download_deadline)
        self.transcriber = Transcriber(
            models,
            settings.transcription_model,
            settings.transcription_bytes,
            settings.document_chars,
            settings.model_timeout,
        )
        self.slots = asyncio.Semaphore(settings.media_concurrency)
        # Conversions use the CPU only: more threads than cores would not be faster, but
        # each would hold a decoded image (and a malloc arena) at once.
        threads = min(settings.media_concurrency, os.cpu_count() or 1)
        self.threads = ThreadPoolExecutor(threads, "media")
        return_large_buffers()

    async def prepare(
        self, session_key: str, entries: Sequence[Entry], new: Sequence[Entry], *, vision: bool
    ) -> PreparedMedia:
        """The processed attachments of `entries`, processing those of `new` first."""
        with_files = [e for e in entries if e.get("role") == "user" and _attachments(e)]
        if not with_files:
            return PreparedMedia()
        fields = [item_field(str(e["id"]), i) for e in with_files for i in _indexes(e)]
        stored = await self.store.items(session_key, fields)
        source = self._source(session_key)
        fresh: dict[str, MediaItem] = {}
        for entry in new:
            if entry.get("role") == "user" and _attachments(entry):
                fresh |= await self._process_entry(session_key, source, entry, stored)
        stored |= fresh
        if vision:
            await self._load_images(session_key, entries, stored)
        else:  # nothing will read the new images: they are let go now, not after the turn
            stored = {f: item.with_image(None) for f, item in stored.items()}
        notices, notes = await self._tell(session_key, list(fresh.values()), vision)
        heard = tuple(_heard(item) for item in fresh.values() if item.kind == "voice" and item.text)
        return PreparedMedia(_by_entry(stored), tuple(notices), tuple(notes), heard)

    async def stored(
        self, session_key: str, entries: Sequence[Entry]
    ) -> dict[str, dict[int, MediaItem]]:
        """The processed attachments of `entries` as stored (no image bytes, nothing new)."""
        with_files = [e for e in entries if e.get("role") == "user" and _attachments(e)]
        fields = [item_field(str(e["id"]), i) for e in with_files for i in _indexes(e)]
        return _by_entry(await self.store.items(session_key, fields))

    async def sees(self) -> bool:
        """Whether the main model reads images (litellm's model map, asked once)."""
        return await self.models.vision(self.settings.model)

    async def aclose(self) -> None:
        await self.downloader.aclose()
        self.threads.shutdown(wait=False, cancel_futures=True)

    def _source(self, session_key: str) -> FileSource:
        """The platform's source (the session key starts with the platform's name, then
        its workspace): the workspace's own where access differs by workspace."""
        platform, _, rest = session_key.partition(":")
        source = self.sources.get(platform) or PlainSource()
        if isinstance(source, WorkspaceFiles):
            return source.in_workspace(rest.partition(":")[0])
        return source

    async def _process_entry(
        self,
        session_key: str,
        source: FileSource,
        entry: Entry,
        stored: Mapping[str, MediaItem],
    ) -> dict[str, MediaItem]:
        entry_id, allowance = str(entry["id"]), _MessageBytes(self.settings.media_message_bytes)
        speaker = entry.get("speaker")
        asker = str(speaker.get("id") or "") if isinstance(speaker, dict) else ""
        charge = Charge(session_key, asker, "transcription")  # counted for the voice's sender
        work = []
        for index, raw in enumerate(_attachments(entry)):
            name_field = item_field(entry_id, index)
            if name_field not in stored:
                task = self._one(charge, source, name_field, (index, raw), allowance)
                work.append(task)
        return dict(await asyncio.gather(*work))

    async def _one(
        self,
        charge: Charge,
        source: FileSource,
        name_field: str,
        numbered: tuple[int, object],
        allowance: _MessageBytes,
    ) -> tuple[str, MediaItem]:
        index, attachment = numbered[0], _attachment(numbered[1])
        async with self.slots:  # the download too: a file's bytes are held in a slot only
            item = await self._processed(source, index, attachment, allowance, charge)
            return name_field, await self.store.save(charge.session_key, name_field, item)

    async def _processed(
        self,
        source: FileSource,
        index: int,
        attachment: Attachment,
        allowance: _MessageBytes,
        charge: Charge,
    ) -> MediaItem:
        """One attachment downloaded and converted; its bytes are let go on return."""
        kind, name = _kind(attachment), _name(attachment, index)
        try:
            if index >= self.settings.media_message_files:
                count = self.settings.media_message_files
                raise MediaTooLarge(f"over the {count} files one message may carry")
            data = b"" if _skips_download(kind, self.transcriber) else None
            if data is None:
                data = await self._download(source, attachment)
                allowance.take(len(data))
            return await self._convert(attachment, kind, name, data, charge)
        except MediaError as exc:
            return MediaItem(kind, name, note=str(exc), failed=True)

    async def _convert(
        self, attachment: Attachment, kind: Kind, name: str, data: bytes, charge: Charge
    ) -> MediaItem:
        if kind == "voice" and not self.transcriber.enabled:
            return MediaItem("voice", name, note=NOT_ENABLED)  # not downloaded at all
        settings = self.settings
        if kind == "image":
            mime, url = await self._in_thread(
                _picture, data, settings.image_max_pixels, settings.image_max_side
            )
            return MediaItem("image", name, image_mime=mime, image=url)
        if kind == "voice":
            text = await self.transcriber.transcribe(data, name, charge)
            return MediaItem("voice", name, text=text)
        document = await self._in_thread(
            read_document,
            data,
            name,
            attachment.mime_type,
            settings.document_chars,
            settings.pdf_max_pages,
        )
        return MediaItem("document", name, text=document.text, note=document.note)

    async def _in_thread(self, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.threads, function, *args)

    async def _download(self, source: FileSource, attachment: Attachment) -> bytes:
        """The file's bytes through its platform's source; counted by outcome."""
        limit = self.settings.media_file_bytes
        try:
            if attachment.size is not None and attachment.size > limit:
                raise over_limit(limit)
            download = await source.locate(attachment)
            data = await self.downloader.fetch(download, limit)
        except MediaError as exc:
            await self.metrics.download(_outcome(exc), 0)
            raise
        await self.metrics.download("ok", len(data))
        return data

    async def _load_images(
        self, session_key: str, entries: Sequence[Entry], items: dict[str, MediaItem]
    ) -> None:
        """Fill in the images of the recent user turns (the only ones sent as images)."""
        recent = image_entry_ids(entries, self.settings.image_turns)
        wanted = [
            f
            for f, item in items.items()
            if item.kind == "image" and item.image is None and f.split(":")[0] in recent
        ]
        found = await self.store.images(session_key, [f"{f}:image" for f in wanted])
        for f in wanted:
            image = found.get(f"{f}:image")
            if image is not None:
                items[f] = items[f].with_image(image)

    async def _tell(
        self, session_key: str, items: Sequence[MediaItem], vision: bool
    ) -> tuple[list[str], list[str]]:
        """The user's notices (one per failed file; the one-time ones once per session)
        and the model's notes, for the items processed in this turn."""
        notices = [item.notice for item in items if item.notice]
        notes: list[str] = []
        images = any(item.kind == "image" and not item.failed for item in items)
        if images and not vision:
            notes.append(NO_VISION_NOTE)
            if await self.store.first_time(session_key, "vision"):
                notices.append(NO_VISION_NOTICE)
        unheard = [i for i in items if i.kind == "voice" and i.note == NOT_ENABLED]
        if unheard and await self.store.first_time(session_key, "transcription"):
            notices.append(f"{unheard[0].name}: {NOT_ENABLED}")
        return notices, notes


def _heard(item: MediaItem, most: int = HEARD_CHARS) -> str:
    """A transcript as the user is shown it: one line, quoted, cut to `most` characters."""
    text = " ".join((item.text or "").split())
    return f"{item.name}: “{text if len(text) <= most else text[: most - 1] + '…'}”"


def _picture(data: bytes, max_pixels: int, max_side: int) -> tuple[str, str]:
    """An image's type and data URL (made in the converting thread, as one string)."""
    picture = convert(data, max_pixels, max_side)
    return picture.mime, picture.data_url()


def _attachments(entry: Entry) -> list[object]:
    found = entry.get("attachments")
    return list(found) if isinstance(found, list) else []


def _indexes(entry: Entry) -> range:
    return range(len(_attachments(entry)))


def _attachment(raw: object) -> Attachment:
    try:
        return Attachment.model_validate(raw)
    except ValidationError:
        return Attachment(kind="file")


def _kind(attachment: Attachment) -> Kind:
    mime = (attachment.mime_type or "").lower()
    suffix = PurePosixPath(attachment.name or "").suffix.lower()
    if attachment.kind in ("voice", "audio") or mime.startswith("audio/"):
        return "voice"
    if attachment.kind == "image" or mime.startswith("image/") or suffix in IMAGE_SUFFIXES:
        return "image"
    return "document"


def _name(attachment: Attachment, index: int) -> str:
    name = " ".join((attachment.name or "").split())[:120]
    return name or f"{attachment.kind} {index + 1}"


def _skips_download(kind: Kind, transcriber: Transcriber) -> bool:
    """A voice message that would not be transcribed is not fetched at all."""
    return kind == "voice" and not transcriber.enabled


def _outcome(exc: MediaError) -> str:
    if isinstance(exc, MediaTooLarge):
        return "too_large"
    if isinstance(exc, DownloadTimeout):
        return "timeout"
    return "failed"


def _by_entry(items: Mapping[str, MediaItem]) -> dict[str, dict[int, MediaItem]]:
    grouped: dict[str, dict[int, MediaItem]] = {}
    for name_field, item in items.items():
        entry_id, _, index = name_field.partition(":")
        grouped.setdefault(entry_id, {})[int(index)] = item
    return grouped
