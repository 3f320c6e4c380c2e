"""Which bot token speaks in which workspace, when the app is installed in many.

A reply's address names its workspace (the Slack team id); the token is that
workspace's installation, or, for a workspace of an Enterprise Grid org that
installed the app org-wide, the org's (the web process notes which org serves
a workspace as its events arrive). Each process keeps what it found for a
minute, so a busy conversation costs no Redis read per call, and forgets it at
once when Slack says the token is dead (uninstalled, revoked, deactivated,
expired): the next call reads the store again. An expiring token (token
rotation) is kept only until it is due for its refresh, which the store's next
read performs (`rotation.py`).
"""

from __future__ import annotations

import time

from redis.asyncio import Redis
from slack_sdk.oauth.installation_store import Bot
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.client import web_client
from adapters.slack.installations import PLATFORM, RedisInstallationStore
from gateway.errors import PlatformError
from gateway.state.keys import Keys

CACHE_TTL = 60.0  # seconds
ORG_TTL = 30 * 86_400  # a workspace -> org note, renewed by each of its events
# Slack's answers that mean the token will never work again.
DEAD_TOKEN = frozenset(
    {"invalid_auth", "token_revoked", "account_inactive", "not_authed", "token_expired"}
)


class NotInstalled(PlatformError):
    """No installation holds a token for the workspace (never installed, or removed)."""


class Workspaces:
    """Tokens and Web API clients per workspace, from the installation store."""

    def __init__(self, store: RedisInstallationStore, api_url: str, ttl: float = CACHE_TTL) -> None:
        self.store = store
        self.api_url = api_url
        self.ttl = ttl
        self._found: dict[str, tuple[float, str, AsyncWebClient]] = {}

    @property
    def redis(self) -> Redis:
        return self.store.redis

    async def token(self, workspace: str) -> str:
        return (await self._entry(workspace))[0]

    async def client(self, workspace: str) -> AsyncWebClient:
        return (await self._entry(workspace))[1]

    def forget(self, workspace: str) -> None:
        """Drop what this process holds for `workspace` (its token was refused)."""
        self._found.pop(workspace, None)

    def forget_if_dead(self, workspace: str, error: str) -> None:
        if error in DEAD_TOKEN:
            self.forget(workspace)

    async def note_org(self, workspace: str, enterprise_id: str) -> None:
        """Remember that `workspace` is served by its org's org-wide install."""
        await self.redis.set(Keys.workspace_org(PLATFORM, workspace), enterprise_id, ex=ORG_TTL)

    async def _entry(self, workspace: str) -> tuple[str, AsyncWebClient]:
        found = self._found.get(workspace)
        if found is not None and found[0] > time.monotonic():
            return found[1], found[2]
        bot = await self._lookup(workspace)
        token = str(bot.bot_token)
        client = web_client(token, self.api_url)
        self._found[workspace] = (time.monotonic() + self._keep_for(bot), token, client)
        return token, client

    def _keep_for(self, bot: Bot) -> float:
        """A minute, or less when the token is due for its refresh sooner."""
        due = self.store.refresh_due(bot)
        return self.ttl if due is None else max(0.0, min(self.ttl, due - time.time()))

    async def _lookup(self, workspace: str) -> Bot:
        bot = await self.store.async_find_bot(enterprise_id=None, team_id=workspace)
        if bot is None:
            org = await self.redis.get(Keys.workspace_org(PLATFORM, workspace))
            if org:
                bot = await self.store.async_find_bot(
                    enterprise_id=str(org), team_id=None, is_enterprise_install=True
                )
        if bot is None or not bot.bot_token:
            raise NotInstalled(f"Slack: the app is not installed in workspace {workspace}")
        return bot
