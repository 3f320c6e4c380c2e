"""Clicks on our buttons (`block_actions`): acknowledged, taken by the core, answered.

bolt calls `Clicks.handle` for both approval buttons' action ids and
`Clicks.feedback` for a reply's feedback buttons, over HTTP and Socket Mode alike
(`app.py` wires them). A click that does not count (someone else's, on a request no
longer open, a stranger's feedback or on a reply that takes none) is answered with
an ephemeral message, which only the clicker sees; one that counts with nothing
(Slack's feedback buttons show what was chosen).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.buttons import refusal_text
from adapters.slack.errors import core_error
from adapters.slack.inbound import to_decision, to_feedback
from gateway.messages import Address

if TYPE_CHECKING:
    from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)

Ack = Callable[..., Awaitable[Any]]


class Clicks:
    """Hands a button click's Decision to the core and tells a refused clicker why."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    async def handle(self, ack: Ack, body: dict[str, Any], client: AsyncWebClient) -> None:
        """Acknowledged first; raises what `Ingest.decide` raises (bolt answers 5xx, and
        Slack delivers the click again). `client` is bolt's for the request."""
        await ack()
        decision = to_decision(body)
        if decision is None:
            return
        refusal = refusal_text(await self.ingest.decide(decision))
        if refusal is not None:
            await _tell(client, decision.user_id, decision.address, refusal)

    async def feedback(self, ack: Ack, body: dict[str, Any], client: AsyncWebClient) -> None:
        """Acknowledged first, as `handle` is; a thumbs up or down on a reply."""
        await ack()
        click = to_feedback(body)
        if click is None:
            return
        verdict = await self.ingest.feedback(click)
        if not verdict.counted:
            await _tell(client, click.user_id, click.address, verdict.text)


async def _tell(client: AsyncWebClient, user: str, address: Address, text: str) -> None:
    """An ephemeral message through the Web API (as every reply is, so its errors and
    rate limits read alike) rather than the payload's response_url."""
    try:
        await client.chat_postEphemeral(
            channel=address.channel, user=user, thread_ts=address.thread, text=text
        )
    except SlackApiError as exc:
        log.warning("slack: could not tell %s: %s", user, core_error(exc))
