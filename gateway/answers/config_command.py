"""`/config` in chat: the settings that apply here and where each comes from; an admin
of the place changes the channel's (`/config set KEY VALUE`, `/config unset KEY`).

Who is an admin is the platform's to say (`AdminCheck`, implemented by each adapter's
sender); everyone else gets one short refusal and nothing changes. A change goes
through `ScopedSettings`, like `gateway settings`, so every worker uses it from its
next turn on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.errors import ConfigError, PlatformError
from gateway.messages import Address
from gateway.ports import AdminCheck
from gateway.settings.scoped import ENVIRONMENT, KEYS, ScopedSettings, SessionSettings, shorten

log = logging.getLogger(__name__)

USAGE = (
    "Usage: `/config` shows the settings here; an admin changes this channel's with "
    f"`/config set KEY VALUE` or `/config unset KEY` (KEY: {', '.join(KEYS)})."
)
REFUSED = "Only an admin of this workspace can change its settings."
UNCHECKED = "I could not check whether you are an admin here; nothing was changed. Try again later."
SCOPE_NAMES = {1: "the platform", 2: "the workspace", 3: "the channel", 4: "this conversation"}
SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class ConfigRequest:
    """What `/config`'s argument asks: `show`, `set` (key, value) or `unset` (key);
    `usage` when it asks nothing this command does."""

    action: str
    key: str = ""
    value: str = ""


def parse(argument: str) -> ConfigRequest:
    words = argument.split(maxsplit=2)
    if not words or words == ["show"]:
        return ConfigRequest("show")
    action = words[0].lower()
    if action == "set" and len(words) == 3:
        return ConfigRequest("set", words[1], words[2])
    if action == "unset" and len(words) == 2:
        return ConfigRequest("unset", words[1])
    return ConfigRequest("usage")


@dataclass(frozen=True, slots=True)
class ConfigAsk:
    """One `/config`: who asked, where (the session and the address to answer), with what."""

    session_key: str
    address: Address
    user_id: str
    dm: bool
    argument: str

    @property
    def channel_scope(self) -> str:
        return f"{self.address.platform}:{self.address.workspace}:{self.address.channel}"


async def answer(scoped: ScopedSettings, admins: AdminCheck | None, ask: ConfigAsk) -> str:
    """The reply to a `/config`, after the change it asks for, if its asker may make it."""
    request = parse(ask.argument)
    await scoped.fresh()
    if request.action == "show":
        return settings_text(scoped.resolve(ask.session_key))
    if request.action == "usage":
        return USAGE
    try:
        allowed = admins is not None and await admins.is_admin(ask.address, ask.user_id, dm=ask.dm)
    except PlatformError as exc:
        log.warning("admin check for /config in %s failed: %s", ask.session_key, exc)
        return UNCHECKED
    if not allowed:
        log.info("/config %s refused to %s in %s", request.action, ask.user_id, ask.session_key)
        return REFUSED
    return await _change(scoped, ask, request)


async def _change(scoped: ScopedSettings, ask: ConfigAsk, request: ConfigRequest) -> str:
    scope = ask.channel_scope
    try:
        if request.action == "set":
            stored = await scoped.set(scope, request.key, request.value)
            log.info("/config: %s set %s at %s", ask.user_id, request.key, scope)
            return f"Set `{request.key}` for this channel to `{_short(stored)}`."
        removed = await scoped.unset(scope, request.key)
    except ConfigError as exc:
        return f"Not changed: {exc}"
    log.info("/config: %s unset %s at %s", ask.user_id, request.key, scope)
    if not removed:
        return f"This channel does not set `{request.key}`."
    return f"`{request.key}` is no longer set for this channel."


def settings_text(effective: SessionSettings) -> str:
    """Each setting that applies here, and where it comes from."""
    lines = ["Settings here:"]
    for key in KEYS:
        lines.append(f"• {key}: `{_short(effective.shown(key))}` ({_from(effective, key)})")
    return "\n".join(lines)


def _from(effective: SessionSettings, key: str) -> str:
    source = effective.source(key)
    if source == ENVIRONMENT:
        return "the gateway's default"
    return f"set for {SCOPE_NAMES[source.count(':') + 1]}"


def _short(value: str) -> str:
    """Shortened, and without backticks: it is shown inside a code span."""
    return shorten(value, SHOWN_CHARS).replace("`", "'")
