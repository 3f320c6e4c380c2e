"""Which mechanism a reply is shown with, decided per call: the platform's own streaming
surface where its sender has one for the address (`NativeStreams`), edit-in-place
everywhere else, and for a while in a chat whose platform refused the surface.

A refusal that holds for the channel (`StreamRefused.for_channel`: a channel type, a
missing scope, a policy) is remembered in Redis for `REMEMBER` seconds, so every
worker's next reply there starts edited in place instead of paying for the refusal
again. What Redis said of a chat is trusted here for `LOOK_AGAIN` seconds (a round
trip less for each reply in a chat that is talking): a refusal another worker met
reaches this one that much later at most, and costs it one more refused call
meanwhile. Each fallback is one log line and a count; each reply is counted by
platform and the mechanism it ended with.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.errors import StreamRefused
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.ports import NativeStreams, Sender
from gateway.state.keys import Keys

log = logging.getLogger(__name__)

EDIT = "edit"  # edit-in-place: a message posted, then edited as the text grows
REMEMBER = 3600  # seconds a chat's refusal is kept
LOOK_AGAIN = 60.0  # seconds what Redis said of a chat's refusal is trusted in this process
KNOWN_CHATS = 10_000  # chats whose answer this process keeps, the most recent
# Mechanisms whose replies end with feedback buttons whatever GATEWAY_FEEDBACK says:
# Slack's streams (chat.stopStream's feedback_buttons).
FEEDBACK_ALWAYS = frozenset({"stream"})


class Mechanisms:
    """The one place a reply's mechanism is chosen, and refusals remembered."""

    def __init__(self, redis: Redis, metrics: Metrics, look_again: float = LOOK_AGAIN) -> None:
        self.redis, self.metrics, self.look_again = redis, metrics, look_again
        # chat -> (until when it is trusted, whether it refused)
        self._known: OrderedDict[str, tuple[float, bool]] = OrderedDict()

    async def choose(self, sender: Sender, address: Address, *, rerun: bool) -> str:
        """The mechanism for a reply at `address`: the sender's native one, unless the
        chat refused it lately; edit-in-place for a re-run (it continues, or closes and
        completes, the message its predecessor left) and when Redis cannot say."""
        if rerun or not isinstance(sender, NativeStreams) or address.side:
            return EDIT
        native = sender.native_mechanism(address)
        if native is None:
            return EDIT
        refused = self._recalled(address.chat_key)
        if refused is None:
            try:
                refused = bool(await self.redis.exists(Keys.native_refused(address.chat_key)))
            except RedisError as exc:
                log.warning("%s: no refusal look-up (%s); edited in place", address.chat_key, exc)
                return EDIT
            self._remember(address.chat_key, refused)
        return EDIT if refused else native

    def _recalled(self, chat_key: str) -> bool | None:
        """What Redis said of the chat lately; None when it is to be asked again."""
        known = self._known.get(chat_key)
        if known is None or known[0] <= time.monotonic():
            return None
        self._known.move_to_end(chat_key)
        return known[1]

    def _remember(self, chat_key: str, refused: bool) -> None:
        self._known[chat_key] = (time.monotonic() + self.look_again, refused)
        self._known.move_to_end(chat_key)
        if len(self._known) > KNOWN_CHATS:
            self._known.popitem(last=False)

    async def refused(self, address: Address, mechanism: str, error: StreamRefused) -> None:
        """A reply's native mechanism was refused: one log line, a count, and (when it holds
        for the channel) the chat remembered, here at once and for every worker in Redis;
        a Redis failure loses it for the others only."""
        held = "the channel, for a while" if error.for_channel else "this reply"
        log.warning(
            "%s: %s refused (%s); edited in place for %s",
            address.chat_key,
            mechanism,
            error.code,
            held,
        )
        if error.for_channel:
            self._remember(address.chat_key, True)  # here at once, whatever Redis does
        try:
            await self.metrics.count("stream_fallbacks", f"{address.platform}|{error.code}")
            if error.for_channel:
                key = Keys.native_refused(address.chat_key)
                await self.redis.set(key, error.code, ex=REMEMBER)
        except RedisError as exc:
            log.warning("%s: the refusal was not stored (%s)", address.chat_key, exc)

    async def delivered(self, address: Address, mechanism: str) -> None:
        """A reply delivered, counted by platform and the mechanism it ended with."""
        try:
            await self.metrics.count(*delivered_count(address, mechanism))
        except RedisError as exc:
            log.warning("%s: the reply was not counted (%s)", address.chat_key, exc)


def delivered_count(address: Address, mechanism: str) -> tuple[str, str]:
    """The `/metrics` counter of a reply delivered (`Metrics.count`'s name and label)."""
    return "replies", f"{address.platform}|{mechanism}"
