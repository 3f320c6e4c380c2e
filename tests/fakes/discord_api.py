"""A loopback fake of Discord: the REST API and the gateway websocket, on one aiohttp server.

The real discord.py client connects to it (REST base `api_url`, gateway
`gateway_url`). Every REST call is recorded in `calls`; every message the bot
posts or edits is kept in `messages`, and, as Discord does, its creation is
dispatched back over the gateway as MESSAGE_CREATE. Tests script the far end:
`dispatch()` user messages and interactions (`interaction()` builds `/btw`,
`invoke()` any registered command where Discord would offer it, in a server, a DM
or through the user's own install, `click()` a click on a button of a bot's message;
`callbacks` holds the answers, by interaction token; `expire()` lets a token run
out; an interaction through a user install alone takes 5 follow-ups), `rate_limit()`
a route with 429s,
`message_content_enabled=False` to have IDENTIFY refused with close code 4014,
`forbid_threads` to answer thread creation with 403. `cdn` serves attachments
(tests/fakes/discord_files.py), which `message(..., attachments=...)` carries.
Command registrations and message components are checked as Discord checks them
(tests/fakes/discord_rules.py); a refused body is answered with Discord's error.
Commands and interactions are `FakeInteractions`' (tests/fakes/discord_interactions.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_files import DiscordCdn
from tests.fakes.discord_interactions import FakeInteractions
from tests.fakes.discord_responses import (
    components_refused,
    error,
    json_response,
    public,
    too_long,
)
from tests.fakes.server import CallLog, LoopbackServer

MESSAGE_CONTENT_INTENT = 1 << 15
MANAGE_GUILD = 1 << 5  # the permission `/config` asks of a member
_EPOCH_MS = 1420070400000
NONCE_WINDOW = 300.0  # seconds an enforced nonce is remembered ("a few minutes")


@dataclass
class Call:
    """One REST request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    authorized: bool


@dataclass
class _Fault:
    """A scripted answer (a 429, or a lost answer) to the next `remaining` matching calls."""

    method: str
    pattern: re.Pattern[str]
    retry_after: float
    remaining: int
    via: bool


@dataclass
class _Session:
    ws: web.WebSocketResponse
    shard: tuple[int, int] = (0, 1)
    session_id: str = ""
    seq: int = 0
    identified: bool = False


@dataclass
class FakeGuild:
    """A guild the bot is in, with text channels (ids as strings)."""

    id: str
    name: str = "Guild"
    channels: tuple[str, ...] = ()
    threads: list[dict[str, Any]] = field(default_factory=list)
    managers: tuple[str, ...] = ()  # user ids holding a role with Manage Server


class FakeDiscord(FakeInteractions, LoopbackServer):
    """Discord's REST API and gateway on 127.0.0.1, recording every call."""

    def __init__(
        self,
        *,
        bot_id: str = "1100000000000000001",
        token: str = "bot-token",
        guilds: tuple[FakeGuild, ...] = (),
    ) -> None:
        super().__init__()
        self.bot = {
            "id": bot_id,
            "username": "gatewaybot",
            "global_name": None,
            "discriminator": "0",
            "avatar": None,
            "bot": True,
        }
        self.application_id = bot_id
        self.token = token
        self.guilds = {g.id: g for g in guilds}
        self.calls: CallLog[Call] = CallLog()
        self.messages: dict[str, dict[str, Any]] = {}
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.callbacks: dict[str, dict[str, Any]] = {}
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self.message_content_enabled = True
        self.forbid_threads = False
        self.heartbeat_interval_ms = 41250
        self._limits: list[_Fault] = []
        self._lost: list[_Fault] = []  # calls done, then answered 502
        self._nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self._sessions: list[_Session] = []
        self._interactions: dict[str, dict[str, Any]] = {}
        self._expired: set[str] = set()
        self._ids = itertools.count(1)
        self.cdn = DiscordCdn(self, self.snowflake)

    # lifecycle ---------------------------------------------------------

    async def start(self) -> FakeDiscord:
        await self.serve()
        return self

    async def stop(self) -> None:
        await self.close()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/gateway/ws", self._gateway)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._rest)
        self.cdn.install(app)
        return app

    async def _before_close(self) -> None:
        for session in list(self._sessions):
            await session.ws.close()

    async def __aenter__(self) -> FakeDiscord:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway/ws"

    # scripting ---------------------------------------------------------

    def snowflake(self) -> str:
        """A fresh id whose timestamp part is now (so discord.py dates parse)."""
        return str(((int(time.time() * 1000) - _EPOCH_MS) << 22) | next(self._ids))

    def rate_limit(
        self, method: str, path_regex: str, retry_after: float, *, times: int = 1, via: bool = True
    ) -> None:
        """Answer the next `times` matching calls with 429. `via=False` drops the Via
        header, which discord.py reads as a Cloudflare ban and does not retry."""
        self._limits.append(_Fault(method, re.compile(path_regex), retry_after, times, via))

    def lose_answers(self, method: str, path_regex: str, *, times: int = 1) -> None:
        """Carry out the next `times` matching calls, then answer them 502 (as a proxy
        does when the connection behind it broke): the client cannot tell it was done."""
        self._lost.append(_Fault(method, re.compile(path_regex), 0.0, times, False))

    @staticmethod
    def bot_role_id(guild_id: str) -> str:
        """The id of the role Discord gives the bot in a guild (its managed role)."""
        return str(int(guild_id) + 1)

    @staticmethod
    def manager_role_id(guild_id: str) -> str:
        """The id of the guild's role with Manage Server (its `managers` hold it)."""
        return str(int(guild_id) + 2)

    def limits_left(self) -> int:
        """How many scripted 429s have not been answered yet."""
        return sum(limit.remaining for limit in self._limits)

    def user(self, user_id: str, name: str = "alice", *, bot: bool = False) -> dict[str, Any]:
        return {
            "id": user_id,
            "username": name,
            "global_name": name.title(),
            "discriminator": "0",
            "avatar": None,
            "bot": bot,
        }

    def message(
        self,
        channel_id: str,
        content: str,
        author: dict[str, Any],
        *,
        guild_id: str | None = None,
        mentions: tuple[dict[str, Any], ...] = (),
        reply_to: dict[str, Any] | None = None,
        kind: int = 0,
        webhook_id: str | None = None,
        attachments: tuple[dict[str, Any], ...] = (),
        flags: int = 0,
    ) -> dict[str, Any]:
        """A full message object as Discord sends it in MESSAGE_CREATE."""
        message_id = self.snowflake()
        payload: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": "2026-01-01T00:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": list(mentions),
            "mention_roles": [],
            "attachments": list(attachments),
            "embeds": [],
            "pinned": False,
            "type": 19 if reply_to else kind,
            "flags": flags,
            "components": [],
        }
        if guild_id:
            payload["guild_id"] = guild_id
            payload["member"] = {
                "roles": [],
                "joined_at": "2025-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        if reply_to:
            payload["message_reference"] = {
                "message_id": reply_to["id"],
                "channel_id": channel_id,
                "type": 0,
            }
            payload["referenced_message"] = reply_to
        if webhook_id:
            payload["webhook_id"] = webhook_id
        return payload

    def role_mention(
        self, channel_id: str, guild_id: str, text: str, author: dict[str, Any]
    ) -> dict[str, Any]:
        """A message that mentions the bot's managed role instead of the bot user."""
        role = self.bot_role_id(guild_id)
        message = self.message(channel_id, f"<@&{role}> {text}", author, guild_id=guild_id)
        message["mention_roles"] = [role]
        return message

    def add_thread(self, guild_id: str, parent_id: str, *, owner_id: str = "42") -> str:
        """A public thread under `parent_id` that the gateway will announce in GUILD_CREATE."""
        thread_id = self.snowflake()
        self.guilds[guild_id].threads.append(
            self._thread(thread_id, guild_id, parent_id, owner_id, "a thread", 1440)
        )
        return thread_id

    def _thread(
        self,
        thread_id: str,
        guild_id: str,
        parent_id: str,
        owner_id: str,
        name: str,
        archive_after: int,
    ) -> dict[str, Any]:
        return {
            "id": thread_id,
            "guild_id": guild_id,
            "parent_id": parent_id,
            "owner_id": owner_id,
            "name": name,
            "type": 11,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": archive_after,
                "archive_timestamp": "2026-01-01T00:00:00+00:00",
                "locked": False,
            },
        }

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a DISPATCH to every identified gateway session."""
        for session in list(self._sessions):
            if session.identified:
                await self._send_dispatch(session, event, data)

    async def close_sessions(self, code: int = 4000) -> None:
        """Drop every gateway connection (the client should RESUME)."""
        for session in list(self._sessions):
            await session.ws.close(code=code)

    async def wait_for(self, condition: Callable[[], Any], within: float = 15.0) -> Any:
        """Poll `condition` until it returns something truthy; fail after `within` seconds."""
        deadline = time.monotonic() + within
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("condition not met before the deadline")
            await asyncio.sleep(0.02)

    def calls_to(self, method: str, path_regex: str) -> list[Call]:
        pattern = re.compile(path_regex)
        return self.calls.where(lambda c: c.method == method and bool(pattern.fullmatch(c.path)))

    def channel_messages(self, channel_id: str) -> list[dict[str, Any]]:
        """Messages the bot posted in a channel (including interaction follow-ups), in order."""
        return [m for m in self.messages.values() if m["channel_id"] == channel_id]

    # gateway -----------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        session = _Session(ws)
        self._sessions.append(session)
        try:
            await ws.send_json(
                {
                    "op": 10,
                    "d": {"heartbeat_interval": self.heartbeat_interval_ms},
                    "s": None,
                    "t": None,
                }
            )
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    break
                await self._on_gateway_message(session, json.loads(msg.data))
        finally:
            self._sessions.remove(session)
        return ws

    async def _on_gateway_message(self, session: _Session, msg: dict[str, Any]) -> None:
        op, data = msg.get("op"), msg.get("d")
        if op == 1:
            self.heartbeats += 1
            await session.ws.send_json({"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            await self._identify(session, data)
        elif op == 6:
            self.resumes.append(data)
            session.identified, session.session_id = True, data["session_id"]
            session.seq = int(data.get("seq") or 0)
            await self._send_dispatch(session, "RESUMED", {})

    async def _identify(self, session: _Session, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            await session.ws.close(code=4004, message=b"Authentication failed.")
            return
        if data["intents"] & MESSAGE_CONTENT_INTENT and not self.message_content_enabled:
            await session.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard_id, shard_count = data.get("shard") or [0, 1]
        session.shard, session.identified = (shard_id, shard_count), True
        session.session_id = f"session-{len(self.identifies)}"
        mine = [g for g in self.guilds.values() if (int(g.id) >> 22) % shard_count == shard_id]
        await self._send_dispatch(
            session,
            "READY",
            {
                "v": 10,
                "user": self.bot,
                "session_id": session.session_id,
                "resume_gateway_url": self.gateway_url,
                "shard": [shard_id, shard_count],
                "guilds": [{"id": g.id, "unavailable": True} for g in mine],
                "application": {"id": self.application_id, "flags": 0},
                "private_channels": [],
                "relationships": [],
            },
        )
        for guild in mine:
            await self._send_dispatch(session, "GUILD_CREATE", self._guild_payload(guild))

    async def _send_dispatch(self, session: _Session, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        if not session.ws.closed:
            await session.ws.send_json({"op": 0, "t": event, "s": session.seq, "d": data})

    def _guild_payload(self, guild: FakeGuild) -> dict[str, Any]:
        channels = [
            {
                "id": c,
                "type": 0,
                "name": f"chan-{c[-4:]}",
                "position": i,
                "guild_id": guild.id,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
            }
            for i, c in enumerate(guild.channels)
        ]
        everyone = {
            "id": guild.id,
            "name": "@everyone",
            "permissions": "2248473465835073",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        bot_role = {
            **everyone,
            "id": self.bot_role_id(guild.id),
            "name": "gatewaybot",
            "managed": True,
            "position": 1,
            "tags": {"bot_id": self.bot["id"]},
        }
        manager_role = {
            **everyone,
            "id": self.manager_role_id(guild.id),
            "name": "managers",
            "permissions": str(MANAGE_GUILD),
            "position": 2,
        }
        return {
            "id": guild.id,
            "name": guild.name,
            "owner_id": "1",
            "unavailable": False,
            "member_count": 2,
            "large": False,
            "channels": channels,
            "threads": guild.threads,
            "roles": [everyone, bot_role, manager_role],
            "emojis": [],
            "stickers": [],
            "features": [],
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "joined_at": "2025-01-01T00:00:00+00:00",
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "system_channel_flags": 0,
        }

    # REST --------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        raw = await request.read()
        body = json.loads(raw) if raw else None
        authorized = request.headers.get("Authorization") == f"Bot {self.token}"
        self.calls.record(Call(request.method, path, dict(request.query), body, authorized))
        limited = self._take_limit(request.method, path)
        if limited is not None:
            return limited
        for method, pattern, handler in self._routes():
            match = re.fullmatch(pattern, path)
            if method == request.method and match:
                response: web.StreamResponse = await handler(request, body, *match.groups())
                if _take(self._lost, request.method, path):
                    return error(502, 0, "502: Bad Gateway")
                return response
        return error(404, 0, f"no fake route for {request.method} {path}")

    def _take_limit(self, method: str, path: str) -> web.Response | None:
        limit = _take(self._limits, method, path)
        if limit is None:
            return None
        headers = {"Retry-After": str(limit.retry_after), "X-RateLimit-Scope": "user"}
        if limit.via:
            headers["Via"] = "1.1 google"
        body = {
            "message": "You are being rate limited.",
            "retry_after": limit.retry_after,
            "global": False,
        }
        return json_response(body, status=429, headers=headers)

    def _routes(self) -> list[tuple[str, str, Callable[..., Any]]]:
        return [
            ("GET", r"/users/@me", self._me),
            ("GET", r"/oauth2/applications/@me", self._application),
            ("GET", r"/gateway", self._gateway_info),
            ("GET", r"/gateway/bot", self._gateway_bot),
            ("POST", r"/channels/(\d+)/messages", self._create_message),
            ("PATCH", r"/channels/(\d+)/messages/(\d+)", self._edit_message),
            ("DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message),
            ("POST", r"/channels/(\d+)/typing", self._typing),
            ("POST", r"/channels/(\d+)/messages/(\d+)/threads", self._create_thread),
            ("GET", r"/guilds/(\d+)", self._get_guild),
            ("GET", r"/guilds/(\d+)/members/(\d+)", self._get_member),
            *self.interaction_routes(),
        ]

    async def _get_guild(self, request: web.Request, body: Any, guild_id: str) -> web.Response:
        guild = self.guilds.get(guild_id)
        if guild is None:
            return error(404, 10004, "Unknown Guild")
        return json_response(self._guild_payload(guild))

    async def _get_member(
        self, request: web.Request, body: Any, guild_id: str, user_id: str
    ) -> web.Response:
        guild = self.guilds.get(guild_id)
        if guild is None:
            return error(404, 10004, "Unknown Guild")
        roles = [self.manager_role_id(guild_id)] if user_id in guild.managers else []
        return json_response(
            {
                "user": self.user(user_id),
                "roles": roles,
                "joined_at": "2025-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        )

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def _me(self, request: web.Request, body: Any) -> web.Response:
        if not self._authorized(request):
            return error(401, 0, "401: Unauthorized")
        return json_response({**self.bot, "flags": 0, "mfa_enabled": False})

    async def _application(self, request: web.Request, body: Any) -> web.Response:
        if not self._authorized(request):
            return error(401, 0, "401: Unauthorized")
        return json_response(
            {
                "id": self.application_id,
                "name": "gatewaybot",
                "icon": None,
                "description": "",
                "bot_public": True,
                "bot_require_code_grant": False,
                "verify_key": "00",
                "flags": 0,
                "owner": self.user("1", "owner"),
                "team": None,
                "rpc_origins": [],
            }
        )

    async def _gateway_info(self, request: web.Request, body: Any) -> web.Response:
        return json_response({"url": self.gateway_url})

    async def _gateway_bot(self, request: web.Request, body: Any) -> web.Response:
        if not self._authorized(request):
            return error(401, 0, "401: Unauthorized")
        return json_response(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _create_message(
        self, request: web.Request, body: Any, channel_id: str
    ) -> web.Response:
        if not self._authorized(request):
            return error(401, 0, "401: Unauthorized")
        content = (body or {}).get("content") or ""
        if not content.strip():
            return error(400, 50006, "Cannot send an empty message")
        if len(content) > 2000:
            return too_long()
        refused = components_refused(body.get("components"))
        if refused is not None:
            return refused
        nonce = body.get("nonce") if body.get("enforce_nonce") else None
        known = self._by_nonce(nonce)
        if known is not None:
            return json_response(public(known))
        message = self._bot_message(channel_id, body)
        if nonce is not None:
            message["nonce"] = nonce
            self._nonces[(self.bot["id"], str(nonce))] = (message["id"], time.monotonic())
        await self.dispatch("MESSAGE_CREATE", public(message))
        return json_response(public(message))

    def _by_nonce(self, nonce: Any) -> dict[str, Any] | None:
        """Discord's `enforce_nonce`: the bot's message created with this nonce in the last
        few minutes, which a second post gets back instead of a copy."""
        seen = None if nonce is None else self._nonces.get((self.bot["id"], str(nonce)))
        if seen is None or time.monotonic() - seen[1] > NONCE_WINDOW:
            return None
        return self.messages.get(seen[0])

    def _bot_message(
        self, channel_id: str, body: dict[str, Any], *, webhook_id: str | None = None
    ) -> dict[str, Any]:
        message = self.message(
            channel_id,
            body.get("content") or "",
            self.bot,
            guild_id=self._guild_of(channel_id),
            webhook_id=webhook_id,
        )
        message["allowed_mentions"] = body.get("allowed_mentions")
        if body.get("message_reference"):
            message["message_reference"] = body["message_reference"]
        message["type"] = 19 if body.get("message_reference") else 0
        message["components"] = list(body.get("components") or [])
        message["edits"] = 0
        self.messages[message["id"]] = message
        return message

    def _guild_of(self, channel_id: str) -> str | None:
        for guild in self.guilds.values():
            if channel_id in guild.channels or any(t["id"] == channel_id for t in guild.threads):
                return guild.id
        return None

    async def _edit_message(
        self, request: web.Request, body: Any, channel_id: str, message_id: str
    ) -> web.Response:
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            return error(404, 10008, "Unknown Message")
        content = (body or {}).get("content")
        if content is not None and len(content) > 2000:
            return too_long()
        refused = components_refused((body or {}).get("components"))
        if refused is not None:
            return refused
        if content is not None:
            message["content"] = content
        if "components" in (body or {}):  # an empty list takes the buttons away
            message["components"] = list(body["components"])
        message["edits"] += 1
        message["allowed_mentions"] = (body or {}).get("allowed_mentions")
        return json_response(public(message))

    async def _delete_message(
        self, request: web.Request, body: Any, channel_id: str, message_id: str
    ) -> web.Response:
        if self.messages.pop(message_id, None) is None:
            return error(404, 10008, "Unknown Message")
        return web.Response(status=204)

    async def _typing(self, request: web.Request, body: Any, channel_id: str) -> web.Response:
        return web.Response(status=204)

    async def _create_thread(
        self, request: web.Request, body: Any, channel_id: str, message_id: str
    ) -> web.Response:
        guild_id = self._guild_of(channel_id)
        if self.forbid_threads or guild_id is None:
            return error(403, 50013, "Missing Permissions")
        thread = self._thread(
            message_id,
            guild_id,
            channel_id,
            self.bot["id"],
            body["name"],
            body.get("auto_archive_duration", 1440),
        )
        self.guilds[guild_id].threads.append(thread)
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return json_response(thread, status=201)


def _take(scripted: list[_Fault], method: str, path: str) -> _Fault | None:
    """The first scripted fault still due for this call, counted down; None if none."""
    for fault in scripted:
        if fault.remaining > 0 and fault.method == method and fault.pattern.fullmatch(path):
            fault.remaining -= 1
            return fault
    return None
