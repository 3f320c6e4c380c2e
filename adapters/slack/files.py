"""Where a Slack file's bytes are: its private URL, fetched with the bot token.

Slack serves a shared file at its `url_private_download` (or `url_private`) on
files.slack.com to a request that carries `Authorization: Bearer <bot token>`
from an app with the `files:read` scope. The token is handed out only for
Slack's file host and the origin of the configured Web API (`SLACK_API_URL`:
GovSlack, a test's loopback server), in the scheme Slack uses there: a file
address anywhere else, however it got into the event, is refused before any
request, so a forged or odd URL never receives the token. A redirect to another
origin loses the header on the way (the downloader's HTTP client drops it).

Installed in many workspaces, a file is fetched with the token of the
session's workspace (`WorkspaceFileSource`).

Without a valid token or the scope, Slack answers with its sign-in page (HTML,
status 200) instead of the file: an image then reads as "not an image", a PDF as
"not a PDF", each one line to the user.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from adapters.slack.workspaces import NotInstalled, Workspaces
from gateway.errors import DownloadFailed
from gateway.messages import Attachment
from gateway.ports import Download, FileSource

log = logging.getLogger(__name__)

Origin = tuple[str, str, int]  # scheme, host, port
FILE_HOST = "files.slack.com"
NO_ADDRESS = "Slack gave no address for it (deleted, hidden, or not shared with the app)"
FOREIGN = "its address is not on Slack's file host, so it was not fetched"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class SlackFileSource:
    """A Slack file's private URL with the bot token, for Slack's own hosts only."""

    def __init__(self, token: str, api_url: str) -> None:
        self._headers = {"Authorization": f"Bearer {token}"}
        self._trusted = trusted_origins(api_url)

    async def locate(self, attachment: Attachment) -> Download:
        return Download(checked_url(attachment, self._trusted), self._headers)


class WorkspaceFileSource:
    """Installed in many workspaces: each workspace's files with its own bot token."""

    def __init__(self, workspaces: Workspaces, api_url: str) -> None:
        self.workspaces = workspaces
        self._trusted = trusted_origins(api_url)

    def in_workspace(self, workspace: str) -> FileSource:
        return _InWorkspace(self.workspaces, workspace, self._trusted)

    async def locate(self, attachment: Attachment) -> Download:
        raise DownloadFailed("it is not known which workspace it belongs to")


class _InWorkspace:
    def __init__(self, workspaces: Workspaces, workspace: str, trusted: frozenset[Origin]) -> None:
        self.workspaces = workspaces
        self.workspace = workspace
        self._trusted = trusted

    async def locate(self, attachment: Attachment) -> Download:
        url = checked_url(attachment, self._trusted)
        try:
            token = await self.workspaces.token(self.workspace)
        except NotInstalled:
            raise DownloadFailed("the app is no longer installed in this workspace") from None
        return Download(url, {"Authorization": f"Bearer {token}"})


def checked_url(attachment: Attachment, trusted: frozenset[Origin]) -> str:
    """The attachment's address, when the bot token may be sent there."""
    if not attachment.url:
        raise DownloadFailed(NO_ADDRESS)
    if origin(attachment.url) not in trusted:
        log.warning("slack: a file whose address is not on Slack's file host was not fetched")
        raise DownloadFailed(FOREIGN)
    return attachment.url


def trusted_origins(api_url: str) -> frozenset[Origin]:
    """Slack's file host, the Web API's origin, and its `files.` host in the same scheme."""
    found: set[Origin] = {("https", FILE_HOST, 443)}
    api = origin(api_url)
    if api is not None:
        scheme, host, _ = api
        found |= {api, (scheme, f"files.{host}", _DEFAULT_PORTS[scheme])}
    return frozenset(found)


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL; None for any other, or one naming a user
    (`https://files.slack.com@elsewhere/` is elsewhere, and not worth telling apart)."""
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:  # a port out of range, a malformed IPv6 host
        return None
    if scheme not in _DEFAULT_PORTS or not host or "@" in parts.netloc:
        return None
    return scheme, host.lower().rstrip("."), port or _DEFAULT_PORTS[scheme]
