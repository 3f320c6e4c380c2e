"""Who may talk to the bot (the README's Access), and what a refused user is told.

A user in GATEWAY_ALLOWED_USERS always may; a Slack Connect outsider only where the
platform's opt-in says so; everyone else on Slack and the console, and on an open
network (Telegram, Discord) only with its allow-all switch or once an operator
approved their pairing code (GATEWAY_PAIRING). A refused user is told once per
window (`REFUSAL_WINDOW`), with a pairing code when pairing is on.
"""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.inbound.pairing import PLATFORMS as PAIRING_PLATFORMS
from gateway.inbound.pairing import Pairing
from gateway.messages import Inbound
from gateway.settings.env import Settings
from gateway.state.keys import Keys

OPEN_PLATFORMS = frozenset({"slack", "console"})
REFUSAL_WINDOW = 3600


class Access:
    """The access rules over the settings and the paired users in Redis."""

    def __init__(self, settings: Settings, redis: Redis) -> None:
        self.settings = settings
        self.redis = redis
        self.pairing = Pairing(redis)

    async def admits(self, inbound: Inbound) -> bool:
        """Whether the speaker may use the bot: the rules, then a paired user."""
        return self.allowed(inbound) or await self.paired(inbound.platform, inbound.user_key)

    async def admits_user(self, platform: str, user_id: str, *, external: bool = False) -> bool:
        """The same for someone known only by platform and id (a click), and whether they
        are of another organisation."""
        user_key = f"{platform}:{user_id}"
        if external and user_key not in self.settings.allowed_user_set:
            return self._external_allowed(platform)
        return self.may_use(platform, user_id) or await self.paired(platform, user_key)

    def allowed(self, inbound: Inbound) -> bool:
        """Whether the rules let the speaker in, pairing aside.

        A member of another organisation (a Slack Connect guest) only where the
        platform's opt-in says so: shared channels and Connect DMs otherwise open the
        bot to strangers.
        """
        if inbound.speaker.external and inbound.user_key not in self.settings.allowed_user_set:
            return self._external_allowed(inbound.platform)
        return self.may_use(inbound.platform, inbound.speaker.id)

    def may_use(self, platform: str, user_id: str) -> bool:
        """The access rule for someone known only by platform and id (no external flag)."""
        if f"{platform}:{user_id}" in self.settings.allowed_user_set:
            return True
        return platform in OPEN_PLATFORMS or self._allow_all(platform)

    async def paired(self, platform: str, user_key: str) -> bool:
        """Whether an operator approved this user's pairing code (GATEWAY_PAIRING)."""
        if not self.settings.pairing or platform not in PAIRING_PLATFORMS:
            return False
        return await self.pairing.is_paired(user_key)

    def is_admin(self, inbound: Inbound) -> bool:
        """An admin: a user the operator named in GATEWAY_ALLOWED_USERS, or the console's."""
        return inbound.platform == "console" or inbound.user_key in self.settings.allowed_user_set

    async def first_refusal(self, user_key: str) -> bool:
        """Whether this refusal is the user's first in its window (and marks it)."""
        first = await self.redis.set(Keys.refused(user_key), "1", nx=True, ex=REFUSAL_WINDOW)
        return bool(first)

    async def refusal_text(self, inbound: Inbound) -> str:
        """What a refused user is told: a pairing code to give the operator where
        pairing is on, else the key to add to GATEWAY_ALLOWED_USERS."""
        if self.settings.pairing and inbound.platform in PAIRING_PLATFORMS:
            code = await self.pairing.request(inbound.user_key)
            if code is None:
                return "Sorry, too many people are waiting to be let in here; try again later."
            return (
                f"To use this bot, give its operator the pairing code `{code}` "
                f"(valid for an hour). They approve it with `gateway users approve {code}`, "
                f"or with `/approve {code}` in a direct message with the bot."
            )
        return (
            f"Sorry, you are not allowed to use this bot. Ask its operator to add "
            f"`{inbound.user_key}` to GATEWAY_ALLOWED_USERS."
        )

    def _external_allowed(self, platform: str) -> bool:
        return {"slack": self.settings.slack_allow_external}.get(platform, False)

    def _allow_all(self, platform: str) -> bool:
        return {
            "telegram": self.settings.telegram_allow_all,
            "discord": self.settings.discord_allow_all,
        }.get(platform, False)
