"""Installing the app into many workspaces: slack-bolt's OAuth v2 flow, its state in Redis.

`GET /slack/install` answers with a redirect to Slack's authorize page (a
one-time state in Redis and in a cookie of the installer's browser);
`GET /slack/oauth_redirect` is where Slack sends the installer back with a
code, which bolt exchanges (oauth.v2.access) for the workspace's bot token and
saves in the installation store. A state is good once, for ten minutes, and
only in the browser it was issued to; a refused state, a failed exchange or a
store that cannot save shows bolt's error page and saves nothing.

Slack's authorize page lives beside its Web API (`https://slack.com/oauth/v2/
authorize` beside `https://slack.com/api/`), so it follows SLACK_API_URL:
GovSlack and a test's loopback server need no setting of their own.
"""

from __future__ import annotations

import logging
import secrets
from urllib.parse import urlsplit

from redis.asyncio import Redis
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from gateway.settings.env import Settings
from gateway.state.keys import Keys

log = logging.getLogger(__name__)

PLATFORM = "slack"
INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
STATE_TTL = 600  # seconds, bolt's default for the browser's cookie too
MAX_STATE = 128  # an issued state is 32 characters; anything far longer is not ours


class RedisStateStore(AsyncOAuthStateStore):
    """One-time OAuth states: issued with an expiry, consumed by deleting them (so of two
    redirects carrying one state, one wins)."""

    def __init__(self, redis: Redis, expiration_seconds: int = STATE_TTL) -> None:
        self.redis = redis
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: object, **kwargs: object) -> str:
        state = secrets.token_urlsafe(24)
        await self.redis.set(Keys.oauth_state(PLATFORM, state), "1", ex=self.expiration_seconds)
        return state

    async def async_consume(self, state: str) -> bool:
        if not state or len(state) > MAX_STATE:
            return False
        consumed = await self.redis.delete(Keys.oauth_state(PLATFORM, state)) == 1
        if not consumed:
            log.info("slack: an install came back with an unknown, used or expired state")
        return consumed


def authorize_url(api_url: str) -> str:
    """Slack's authorize page on the Web API's origin."""
    parts = urlsplit(api_url)
    return f"{parts.scheme}://{parts.netloc}/oauth/v2/authorize"


def oauth_settings(
    settings: Settings, redis: Redis, installations: AsyncInstallationStore
) -> AsyncOAuthSettings:
    """bolt's OAuth settings from ours: every value given, none left for bolt to read from
    the environment."""
    secret = settings.slack_client_secret
    assert settings.slack_client_id is not None and secret is not None
    return AsyncOAuthSettings(
        client_id=settings.slack_client_id,
        client_secret=secret.get_secret_value(),
        scopes=list(settings.slack_scopes),
        user_scopes=[],
        redirect_uri=settings.slack_redirect_uri,
        install_path=INSTALL_PATH,
        install_page_rendering_enabled=False,  # straight to Slack's own page
        redirect_uri_path=REDIRECT_PATH,
        authorization_url=authorize_url(settings.slack_api_url),
        installation_store=installations,
        state_store=RedisStateStore(redis),
        state_expiration_seconds=STATE_TTL,
        logger=logging.getLogger("adapters.slack.bolt"),
    )
