"""A turn's request: compiled from the claimed snapshot, compressed first only when it must."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.context.compiler import CompiledRequest, MessageCompiler, ReplyTarget, TurnContext
from gateway.context.compression import Compressor
from gateway.context.media_parts import MediaView
from gateway.context.tokens import RequestShape, window_share
from gateway.media.items import image_entry_ids
from gateway.media.pipeline import MediaPipeline
from gateway.messages import Address
from gateway.settings.env import Settings
from gateway.settings.scoped import SessionSettings
from gateway.state.session import Entry, HistoryView, SessionStore
from gateway.turn.chains import Chains

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """A turn's compiled request, the model it goes to, the tokens of history it may
    carry (`allowance`), and what it was compiled from."""

    compiler: MessageCompiler
    context: TurnContext
    request: CompiledRequest
    view: HistoryView
    model: str
    allowance: int

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
        self,
        key: str,
        view: HistoryView,
        user: Entry,
        address: Address,
        injections: list[str],
        chained: bool = True,
    ) -> TurnContext:
        """What the turn answering `user` (the last user entry of `view`, replied to at
        `address`) compiles from; without `chained` (a model other than the one whose
        provider holds the chain), in full."""
        target = _target(user, address)
        group = bool(user.get("group"))
        cursor = self.chains.cursor(view) if chained else None
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

    def compile(
        self, context: TurnContext, view: HistoryView, settings: SessionSettings | None = None
    ) -> PreparedTurn:
        """The request for the session's model and system prompt (the environment's
        unless `settings`, the session's by scope, say otherwise)."""
        prompt = settings.system_prompt if settings else self.settings.system_prompt
        model = settings.model if settings else self.settings.model
        compiler = MessageCompiler(context.session_key, prompt)
        request = compiler.compile(context)
        return PreparedTurn(compiler, context, request, view, model, self.allowance(settings))

    @property
    def ready(self) -> bool:
        """Whether the models' windows are known, so a request's allowance is known
        without waiting (the tokenizer loads at the first count, in a thread)."""
        return self.compressor.warmed

    def allowance(self, settings: SessionSettings | None = None) -> int:
        """Tokens of history a turn may send: the session's token allowance, else the
        environment's, else a share of its model's window."""
        if settings is None or settings.model == self.settings.model:
            found = settings.token_budget if settings else None
            return found or self.compressor.allowance
        return settings.token_budget or window_share(self.compressor.models, settings.model)

    def known_over_budget(self, prepared: PreparedTurn) -> bool:
        """Whether the turn is known, without counting anything new, to need compressing."""
        return self.compressor.known_within(prepared.allowance, self.shape(prepared)) is False

    async def fits(self, prepared: PreparedTurn) -> bool:
        await self.compressor.warm()
        return await self.compressor.within(prepared.allowance, self.shape(prepared))

    def sent(self, prepared: PreparedTurn, prompt_tokens: int) -> dict[str, Any] | None:
        """What the reply to `prepared` records of its request, as the provider counted it
        (`prompt_tokens`), so that the next turn's request is known to fit without a count.
        Only for a request sent in full: of a delta, some providers count what they hold,
        others only what was sent."""
        if prepared.context.cursor is not None:
            return None
        return self.compressor.counter.sent(self.shape(prepared), prompt_tokens)

    async def compressed(
        self,
        key: str,
        prepared: PreparedTurn,
        limit: int,
        settings: SessionSettings | None = None,
    ) -> PreparedTurn:
        """Compress the session (up to entry `limit`) until it fits, and compile again."""
        view, group = prepared.view, prepared.context.group
        reminder, allowance = prepared.request.reminder, prepared.allowance
        log.info(
            "%s is over its allowance (%d > %d tokens); compressing first",
            key,
            await self.compressor.tokens(view, group, reminder),
            allowance,
        )
        # Reload even when this worker wrote nothing: another one may have compressed.
        await self.compressor.fit(
            key, group, reminder, limit, allowance, prepared.compiler.system_prompt
        )
        view = await self.sessions.view(key)
        context = replace(
            prepared.context,
            entries=view.entries,
            segments=view.segments,
            cursor=self.chains.cursor(view) if prepared.context.cursor is not None else None,
        )
        return self.compile(context, view, settings)

    def shape(self, prepared: PreparedTurn) -> RequestShape:
        return RequestShape(
            prepared.compiler.system_prompt,
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
