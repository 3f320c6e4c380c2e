"""A turn's request: compiled from the claimed snapshot, compressed first only when it must."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.chains import Chains
from gateway.compiler import CompiledRequest, MessageCompiler, ReplyTarget, TurnContext
from gateway.compression import Compressor
from gateway.config import Settings
from gateway.media.items import image_entry_ids
from gateway.media.parts import MediaView
from gateway.media.pipeline import MediaPipeline
from gateway.model import Address
from gateway.session import Entry, HistoryView, SessionStore
from gateway.tokens import RequestShape

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """A turn's compiled request and what it was compiled from."""

    compiler: MessageCompiler
    context: TurnContext
    request: CompiledRequest
    view: HistoryView

    def in_full(self) -> PreparedTurn:
        """The same turn compiled without its cursor (for a provider that lost the chain)."""
        context = replace(self.context, cursor=None)
        return replace(self, context=context, request=self.compiler.compile(context))


class Preparer:
    """Builds turns' requests; shared by all of one worker's turns."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        compressor: Compressor,
        chains: Chains,
        media: MediaPipeline | None = None,
    ) -> None:
        self.settings, self.sessions = settings, sessions
        self.compressor, self.chains, self.media = compressor, chains, media

    def context(
        self, key: str, view: HistoryView, user: Entry, address: Address, injections: list[str]
    ) -> TurnContext:
        """What the turn answering `user` (the last user entry of `view`, replied to at
        `address`) compiles from."""
        target = _target(user, address)
        group = bool(user.get("group"))
        cursor = self.chains.cursor(view)
        return TurnContext(key, view.entries, target, injections, group, view.segments, cursor)

    async def with_media(
        self, context: TurnContext, new: Sequence[Entry]
    ) -> tuple[TurnContext, tuple[str, ...]]:
        """The context with the session's attachments processed (those of `new` first), and
        the lines the user is to read first: what was heard, files that could not be used."""
        if self.media is None or not any(e.get("attachments") for e in context.entries):
            return context, ()
        vision = await self.media.sees()
        found = await self.media.prepare(context.session_key, context.entries, new, vision=vision)
        recent = image_entry_ids(context.entries, self.settings.image_turns)
        media = MediaView(found.items, vision, frozenset(recent))
        injections = [*context.injections, *found.notes]
        return replace(context, media=media, injections=injections), found.lines()

    def compile(self, context: TurnContext, view: HistoryView) -> PreparedTurn:
        compiler = MessageCompiler(context.session_key, self.settings.system_prompt)
        return PreparedTurn(compiler, context, compiler.compile(context), view)

    @property
    def ready(self) -> bool:
        """Whether the tokenizer is loaded, so a request can be measured without waiting."""
        return self.compressor.warmed

    def known_over_budget(self, prepared: PreparedTurn) -> bool:
        """Whether the turn is known, without counting anything new, to need compressing."""
        return self.compressor.known_within(self.compressor.budget, self._shape(prepared)) is False

    async def fits(self, prepared: PreparedTurn) -> bool:
        await self.compressor.warm()
        return await self.compressor.within(self.compressor.budget, self._shape(prepared))

    async def compressed(self, key: str, prepared: PreparedTurn, limit: int) -> PreparedTurn:
        """Compress the session (up to entry `limit`) until it fits, and compile again."""
        view, group = prepared.view, prepared.context.group
        reminder, budget = prepared.request.reminder, self.compressor.budget
        log.info(
            "%s is over its budget (%d > %d tokens); compressing first",
            key,
            await self.compressor.tokens(view, group, reminder),
            budget,
        )
        # Reload even when this worker wrote nothing: another one may have compressed.
        await self.compressor.fit(key, group, reminder, limit)
        view = await self.sessions.view(key)
        context = replace(
            prepared.context,
            entries=view.entries,
            segments=view.segments,
            cursor=self.chains.cursor(view),
        )
        return self.compile(context, view)

    def _shape(self, prepared: PreparedTurn) -> RequestShape:
        return RequestShape(
            self.settings.system_prompt,
            prepared.view,
            prepared.context.group,
            prepared.request.reminder,
        )


def _target(user: Entry, address: Address) -> ReplyTarget:
    speaker = user.get("speaker") or {}
    place = f"{address.platform} channel {address.channel}"
    if address.thread:
        place += f", thread {address.thread}"
    return ReplyTarget(str(speaker.get("name", "the user")), str(speaker.get("id", "")), place)
