"""Clicks on our buttons (component interactions): taken by the core, then answered.

A component interaction whose custom_id is ours (an approval's `a:...`, a reply's
feedback `f:...`) is answered either way: a deferred update when the click counted
(the message stays as it is until the sender edits it), an ephemeral refusal, which
only the clicker sees, when it did not. Other interactions (the `/btw` command,
components that are not ours) are left to the gateway client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import discord
from redis.exceptions import RedisError

from adapters.buttons import is_approval_payload, refusal_text, valid_feedback_payload
from adapters.discord.inbound import to_decision, to_feedback
from gateway.errors import GatewayError
from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)


class Clicks:
    """Hands a component interaction's Decision or FeedbackClick to the core and answers
    the interaction."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    async def handle(self, interaction: discord.Interaction) -> None:
        """Every interaction may pass here; only clicks on our buttons are taken."""
        if interaction.type != discord.InteractionType.component:
            return
        data: Mapping[str, Any] = interaction.data or {}
        custom_id = data.get("custom_id")
        if is_approval_payload(custom_id):
            take = self._decide
        elif valid_feedback_payload(custom_id):
            take = self._feedback
        else:
            return
        try:
            taken, refusal = await take(interaction, custom_id)
        except (GatewayError, RedisError) as exc:
            log.error("could not take click %s: %s", interaction.id, exc)
            return
        if taken:
            await self._answer(interaction, refusal)

    async def _decide(
        self, interaction: discord.Interaction, custom_id: object
    ) -> tuple[bool, str | None]:
        """(whether the click was ours and well formed, the refusal it gets)."""
        decision = to_decision(custom_id=custom_id, **_ids(interaction))
        if decision is None:
            return False, None
        return True, refusal_text(await self.ingest.decide(decision))

    async def _feedback(
        self, interaction: discord.Interaction, custom_id: object
    ) -> tuple[bool, str | None]:
        message = interaction.message
        message_id = str(message.id) if message is not None else ""
        click = to_feedback(custom_id=custom_id, message_id=message_id, **_ids(interaction))
        if click is None:
            return False, None
        verdict = await self.ingest.feedback(click)
        return True, None if verdict.counted else verdict.text

    async def _answer(self, interaction: discord.Interaction, refusal: str | None) -> None:
        try:
            if refusal is None:
                await interaction.response.defer()  # a deferred update: the message stays
            else:
                await interaction.response.send_message(refusal, ephemeral=True)
        except discord.HTTPException as exc:
            log.warning("could not answer click %s: %s %s", interaction.id, exc.status, exc.text)


def _ids(interaction: discord.Interaction) -> dict[str, Any]:
    """The ids every click is checked by: its own, its channel's, guild's and clicker's."""
    user = interaction.user
    return {
        "interaction_id": str(interaction.id),
        "channel_id": str(interaction.channel_id),
        "guild_id": str(interaction.guild_id) if interaction.guild_id else None,
        "user": {"id": str(user.id), "bot": user.bot},
    }
