"""Sign in with Slack (OpenID Connect) for the operator console.

Slack's page (`/openid/connect/authorize` on SLACK_API_URL's origin) sends the
operator back with a one-time code; `openid.connect.token` exchanges it, with the
app's client id and secret, for an ID token. That token comes straight from Slack
over TLS in answer to our own secret, so its claims are read without checking its
signature (OpenID Connect Core 3.1.3.7); its nonce must be the one this sign-in
sent. The operator may sign in when they are an admin or owner of their workspace
(users.info, through the sender's `is_admin`) or named in GATEWAY_ADMIN_USERS.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.sender import SlackSender
from gateway.errors import PlatformError
from gateway.messages import Address
from gateway.ports import Operator

log = logging.getLogger(__name__)

SCOPES = "openid profile"
USER_CLAIM = "https://slack.com/user_id"
TEAM_CLAIM = "https://slack.com/team_id"


def authorize_page(api_url: str) -> str:
    """Slack's OpenID Connect authorize page on the Web API's origin."""
    parts = urlsplit(api_url)
    return f"{parts.scheme}://{parts.netloc}/openid/connect/authorize"


def claims(id_token: str) -> dict[str, Any]:
    """An ID token's claims (its middle part), unverified: see the module's docstring."""
    parts = id_token.split(".")
    if len(parts) != 3:
        return {}
    body = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        found = json.loads(base64.urlsafe_b64decode(body))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class SlackSignIn:
    """The console's "Sign in with Slack" (the core's OperatorSignIn)."""

    platform = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        sender: SlackSender,
        client_id: str,
        client_secret: str,
        api_url: str,
        admin_users: frozenset[str],
    ) -> None:
        self.client, self.sender = client, sender
        self._id, self._secret = client_id, client_secret
        self._page = authorize_page(api_url)
        self.admin_users = admin_users

    def authorize_url(self, state: str, nonce: str, redirect_uri: str) -> str:
        query = {
            "response_type": "code",
            "scope": SCOPES,
            "client_id": self._id,
            "state": state,
            "nonce": nonce,
            "redirect_uri": redirect_uri,
        }
        return f"{self._page}?{urlencode(query)}"

    async def identify(self, code: str, nonce: str, redirect_uri: str) -> Operator | None:
        try:
            answer = await self.client.openid_connect_token(
                client_id=self._id, client_secret=self._secret, code=code, redirect_uri=redirect_uri
            )
        except SlackApiError as exc:
            log.info("slack sign-in refused: %s", exc.response.get("error"))
            return None
        found = claims(str(answer.get("id_token") or ""))
        user, team = found.get(USER_CLAIM), found.get(TEAM_CLAIM)
        if found.get("nonce") != nonce or not isinstance(user, str) or not isinstance(team, str):
            log.warning("slack sign-in: an ID token without this sign-in's nonce or user")
            return None
        user_key = f"slack:{user}"
        name = str(found.get("name") or user)
        return Operator(user_key, name, await self._admin(user_key, team, user))

    async def _admin(self, user_key: str, team: str, user: str) -> bool:
        if user_key in self.admin_users:
            return True
        address = Address(platform="slack", workspace=team, channel="console")
        try:
            return await self.sender.is_admin(address, user, dm=True)
        except PlatformError as exc:
            log.info("slack sign-in: cannot tell whether %s is an admin (%s)", user_key, exc)
            return False
