"""A loopback fake of the Slack Web API and of Socket Mode, driven by the real slack-sdk.

`SLACK_API_URL` (slack-sdk's `base_url`) points at `http://127.0.0.1:<port>/api/`.
It answers the methods the gateway uses (auth.test, chat.postMessage,
chat.update, chat.postEphemeral, the streaming methods, users.info, reactions.add /
reactions.remove, assistant.threads.setStatus, apps.connections.open;
assistant.threads.setSuggestedPrompts and .setTitle in tests/fakes/slack_assistant.py)
the way Slack does where the gateway depends on it: `ok: false` with Slack's error codes, a 429 with
`Retry-After` when rate limiting, messages kept so an edit can be checked
against the final text. Every call is recorded (answered or refused).

Streams (chat.startStream / appendStream / stopStream, as the methods' reference pages
document them): a stream is a message of a thread (`thread_ts` required) whose text is
what its calls appended (`markdown_text`, or `markdown_text` chunks; a stream keeps the
mode it started with, `streaming_mode_mismatch` otherwise, and never both in one call);
a channel other than a DM needs `recipient_user_id` and `recipient_team_id`; a markdown
text over MAX_MARKDOWN characters is `msg_too_long`; appending to or stopping a message
that is not streaming answers `message_not_in_streaming_state` (a stopped, expired or
posted one; an unknown ts `message_not_found`); chat.update of a message still streaming
answers `streaming_state_conflict` (the code other Slack clients report, as for
`msg_too_long` here: the reference pages list neither). A stream lapses `stream_expiry`
seconds after its last call (None: never), or at once with `expire(ts)`;
`refuse_streams[channel]` makes chat.startStream there answer that error (a channel type
Slack does not stream in); a block of a type in `refused_blocks` is `invalid_blocks` in any
call. Each message keeps its `tasks` (the last task_update of each
id), and its stop's `blocks`.

Socket Mode: apps.connections.open hands out a websocket URL on the same
server; `push()` sends an envelope to the live connection and `acks` records
the acknowledgements. `drop_connections()` closes every socket (Slack
restarting), `black_hole` stops answering pings and envelopes (a half-open
connection), `refuse_connections` makes apps.connections.open fail.

Files: `files` is Slack's file host on the same origin (tests/fakes/slack_files.py),
serving shared files at their private URLs to the bot token (`BOT_TOKEN`) only.

Installs (OAuth v2): `GET /oauth/v2/authorize` is Slack's authorize page (each
visit recorded in `authorize_visits`); `consent()` is an installer approving
it in a workspace (or org-wide in an Enterprise Grid org) and returns the
one-time code Slack would hand the redirect; `oauth.v2.access` exchanges it,
with the app's client id and secret, for that workspace's own bot token,
which auth.test then answers for. `uninstall()` makes a workspace's token
dead (`invalid_auth`), as Slack does once the app is removed.

Token rotation (https://api.slack.com/authentication/rotation): with
`token_lifetime` set, an install's bot token expires that many seconds after it
was issued and comes with a refresh token; a call with an expired token answers
`token_expired`. oauth.v2.access with `grant_type=refresh_token` exchanges a
refresh token for a new access token, refresh token and `expires_in`; the
refresh token used is revoked at once, so a second use answers
`invalid_refresh_token` (as an unknown one does). `refreshes()` lists those calls;
`refresh_latency` makes each take that long (refreshes that overlap), and
`refresh_gate` holds each answer until it is set.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.server import CallLog, LoopbackServer
from tests.fakes.slack_assistant import AssistantThreadsApi
from tests.fakes.slack_files import SlackFileHost

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T0001"
BOT_TOKEN = "xoxb-test-bot-token"
MAX_TEXT = 40_000
MAX_MARKDOWN = 12_000  # a stream call's markdown_text (or one markdown chunk)
TASK_STATES = ("pending", "in_progress", "complete", "error")
CLIENT_ID = "1111.2222"
CLIENT_SECRET = "test-client-secret-0123456789"


@dataclass(frozen=True)
class Install:
    """One workspace's (or one org's) installation of the app, as Slack issues it."""

    team_id: str | None
    team_name: str | None
    bot_token: str
    bot_user_id: str
    bot_id: str
    enterprise_id: str | None = None
    org_wide: bool = False
    refresh_token: str | None = None  # with token rotation only
    expires_in: int | None = None

    def oauth_answer(self) -> dict[str, Any]:
        """oauth.v2.access's answer for this install (and for each refresh of its token)."""
        team = {"id": self.team_id, "name": self.team_name} if self.team_id else None
        enterprise = {"id": self.enterprise_id, "name": "Org"} if self.enterprise_id else None
        rotation = {"refresh_token": self.refresh_token, "expires_in": self.expires_in}
        return {
            **(rotation if self.refresh_token else {}),
            "app_id": "A0001",
            "authed_user": {"id": "U1"},
            "scope": "chat:write,app_mentions:read",
            "token_type": "bot",
            "access_token": self.bot_token,
            "bot_user_id": self.bot_user_id,
            "team": team,
            "enterprise": enterprise,
            "is_enterprise_install": self.org_wide,
        }


@dataclass
class Call:
    """One request the fake received."""

    method: str
    args: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.monotonic)
    status: int = 200
    error: str | None = None
    peer: str = ""  # the caller's end of the connection it came on ("host:port")


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    thread_ts: str | None = None
    edits: int = 0
    blocks: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    streaming: bool = False
    stream_mode: str | None = None  # "markdown_text" or "chunks", once a call set it
    stream_touched: float = 0.0  # when its stream last took a call (monotonic)
    recipient: tuple[str, str] | None = None  # (user, team) a stream was started for
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    streamed: str | None = None  # a stream's text, what it shows until an edit's blocks

    @property
    def shown(self) -> str:
        """The text the message shows: its markdown blocks', or sections', else (a stream)
        what it streamed, else its text. A stream's text is in its blocks, which Slack
        keeps when chat.update sends none: an edit of its text alone does not show."""
        markdown = [b["text"] for b in self.blocks if b.get("type") == "markdown"]
        sections = [b["text"]["text"] for b in self.blocks if b.get("type") == "section"]
        shown = "".join(markdown) or "\n".join(sections)
        return shown or (self.text if self.streamed is None else self.streamed)

    def payload(self, with_metadata: bool) -> dict[str, Any]:
        """The message as conversations.history and .replies show it."""
        shown: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text}
        if self.thread_ts:
            shown["thread_ts"] = self.thread_ts
        if with_metadata and self.metadata:
            shown["metadata"] = self.metadata
        return shown


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: float | None
    times: int


class FakeSlack(AssistantThreadsApi, LoopbackServer):
    """The fake server; use as a context manager or `start()` / `stop()`."""

    thread_name = "fake-slack"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.calls: CallLog[Call] = CallLog()
        self.messages: dict[str, Message] = {}
        self.reactions: set[tuple[str, str, str]] = set()
        self.users: dict[str, dict[str, Any]] = {}
        self.roles: dict[str, dict[str, bool]] = {}  # user id -> is_admin, is_owner
        self.assistant_enabled = False
        # Slack's cap on a page of conversations.history/.replies (15 for apps outside
        # the Marketplace since 2025, whatever `limit` asks); None: `limit` as asked.
        self.page_cap: int | None = None
        self.refuse_connections = False
        self.black_hole = False
        self.acks: list[dict[str, Any]] = []
        self.ephemeral: list[dict[str, Any]] = []  # chat.postEphemeral's arguments
        self.connections_opened = 0
        self.files = SlackFileHost(self, TEAM_ID, BOT_TOKEN)
        self.authorize_visits: list[dict[str, str]] = []
        self.installs: dict[str, Install] = {}  # bot token -> its install
        self.dead_tokens: set[str] = set()
        self.token_lifetime: int | None = None  # seconds; None: tokens do not expire
        self.refresh_latency = 0.0  # seconds a refresh takes to answer (a slow Slack)
        self.refresh_gate: threading.Event | None = None  # set: refreshes are answered
        self.expiries: dict[str, float] = {}  # an expiring token -> when it expires (epoch)
        self._refresh_tokens: dict[str, Install] = {}  # refresh tokens not yet used
        self._token_numbers = itertools.count(1)
        self._codes: dict[str, Install] = {}  # one-time codes not yet exchanged
        self._sign_in_codes: dict[str, dict[str, Any]] = {}  # Sign in with Slack's codes
        self._code_numbers = itertools.count(1)
        self._failures: dict[str, list[_Failure]] = {}
        self.stream_expiry: float | None = None  # seconds a stream lives without a call
        self.refuse_streams: dict[str, str] = {}  # channel -> chat.startStream's error there
        self.refused_blocks: set[str] = set()  # block types answered with invalid_blocks
        self._ts = itertools.count(1)
        self.clock = 1700000000  # the seconds of the next message's `ts`; tests move it on
        self._envelopes = itertools.count(1)
        self._sockets: list[web.WebSocketResponse] = []
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    def start(self) -> FakeSlack:
        self.serve_in_thread()
        return self

    def stop(self) -> None:
        self.close_thread()

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/oauth/v2/authorize", self._authorize)
        app.router.add_get("/openid/connect/authorize", self._authorize)
        self.files.install(app)
        return app

    async def _before_close(self) -> None:
        for socket in list(self._sockets):
            await socket.close()

    # -- scripting ---------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        display_name: str,
        real_name: str = "",
        *,
        admin: bool = False,
        owner: bool = False,
    ) -> None:
        self.users[user_id] = {"display_name": display_name, "real_name": real_name or display_name}
        self.roles[user_id] = {"is_admin": admin, "is_owner": owner}

    def consent(
        self,
        team_id: str | None,
        team_name: str | None = None,
        *,
        enterprise_id: str | None = None,
        org_wide: bool = False,
    ) -> str:
        """An installer approves the app on the authorize page; the code Slack would
        send to the redirect URL."""
        owner = enterprise_id if org_wide else team_id
        assert owner is not None
        install = Install(
            team_id=None if org_wide else team_id,
            team_name=team_name,
            bot_token=f"xoxb-{owner}-{len(self.installs) + 1}-secret",
            bot_user_id=f"UB{owner}",
            bot_id=f"BB{owner}",
            enterprise_id=enterprise_id,
            org_wide=org_wide,
        )
        if self.token_lifetime is not None:
            install = self._rotated(install)
        code = f"code-{owner}-{next(self._code_numbers)}"
        with self._lock:
            self._codes[code] = install
        return code

    def sign_in_consent(self, user_id: str, team_id: str, name: str = "") -> str:
        """A user agrees on Sign in with Slack's page (the latest visit to it): the code
        Slack would send to that visit's redirect URL, standing for the user, with its nonce."""
        visit = self.authorize_visits[-1]
        code = f"oidc-{user_id}-{next(self._code_numbers)}"
        claims = {
            "https://slack.com/user_id": user_id,
            "https://slack.com/team_id": team_id,
            "name": name or user_id,
            "nonce": visit.get("nonce"),
        }
        with self._lock:
            self._sign_in_codes[code] = {"claims": claims, "redirect": visit.get("redirect_uri")}
        return code

    def uninstall(self, team_or_org: str) -> None:
        """The app is removed: the install's token answers invalid_auth from now on."""
        with self._lock:
            for token, install in self.installs.items():
                if team_or_org in (install.team_id, install.enterprise_id):
                    self.dead_tokens.add(token)

    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        *,
        status: int = 200,
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` calls of `method` with `error` (429 + Retry-After if given)."""
        if retry_after is not None:
            status = 429
        with self._lock:
            self._failures.setdefault(method, []).append(
                _Failure(error, status, retry_after, times)
            )

    def calls_to(self, method: str) -> list[Call]:
        return self.calls.where(lambda c: c.method == method)

    def refreshes(self) -> list[Call]:
        """oauth.v2.access calls that exchanged (or tried to) a refresh token."""
        return self.calls.where(
            lambda c: c.method == "oauth.v2.access" and c.args.get("grant_type") == "refresh_token"
        )

    def current_install(self, team_or_org: str) -> Install:
        """The newest tokens Slack issued for a workspace or an org."""
        with self._lock:
            issued = [
                i for i in self.installs.values() if team_or_org in (i.team_id, i.enterprise_id)
            ]
        return issued[-1]

    def answered(self, method: str) -> list[Call]:
        return [c for c in self.calls_to(method) if c.error is None]

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        """Poll `condition` until it holds; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not met in {timeout}s; calls: "
                    f"{[(c.method, c.error) for c in self.calls]}"
                )
            time.sleep(0.02)

    def thread_messages(self, channel: str, thread_ts: str) -> list[Message]:
        with self._lock:
            return [
                m
                for m in self.messages.values()
                if m.channel == channel and m.thread_ts == thread_ts
            ]

    # -- Socket Mode ---------------------------------------------------------

    def push(self, body: dict[str, Any], kind: str = "events_api") -> str:
        """Send one envelope to the newest live connection; returns its envelope id."""
        envelope_id = f"env-{next(self._envelopes)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": body,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": 0,
            "retry_reason": "",
        }
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._send(envelope), self._loop).result(timeout=10)
        return envelope_id

    async def _send(self, envelope: dict[str, Any]) -> None:
        live = [s for s in self._sockets if not s.closed]
        if not live:
            raise AssertionError("no live Socket Mode connection")
        await live[-1].send_str(json.dumps(envelope))

    def drop_connections(self) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._drop(), self._loop).result(timeout=10)

    async def _drop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()

    @property
    def live_connections(self) -> int:
        return sum(1 for s in self._sockets if not s.closed)

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        # autoping off: pings are answered by hand, so a black hole can ignore them.
        socket = web.WebSocketResponse(autoping=False)
        await socket.prepare(request)
        self._sockets.append(socket)
        await socket.send_str(
            json.dumps(
                {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0001"}}
            )
        )
        async for message in socket:
            if self.black_hole:
                continue
            if message.type == WSMsgType.PING:
                await socket.pong(message.data)
            elif message.type == WSMsgType.TEXT:
                with self._lock:
                    self.acks.append(json.loads(message.data))
        self._sockets.remove(socket)
        return socket

    # -- Web API -------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update(dict(await request.post()))
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth else args.pop("token", None)
        call = Call(method, args, token, peer=_peer(request))
        with self._lock:
            self.calls.record(call)
            failure = self._take_failure(method)
        if failure is not None:
            return self._refuse(call, failure.error, failure.status, failure.retry_after)
        if not token:
            return self._refuse(call, "not_authed")
        if token in self.dead_tokens:
            return self._refuse(call, "invalid_auth")
        if self.expiries.get(token, float("inf")) <= time.time():
            return self._refuse(call, "token_expired")
        if method == "oauth.v2.access" and args.get("grant_type") == "refresh_token":
            await self._refresh_delay()
        if any(block.get("type") in self.refused_blocks for block in _blocks(args)):
            return self._refuse(call, "invalid_blocks")
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return self._refuse(call, "unknown_method", 404)
        result: dict[str, Any] | str = handler(args, token)
        if isinstance(result, str):
            return self._refuse(call, result)
        return web.json_response({"ok": True, **result})

    async def _refresh_delay(self) -> None:
        """A refresh answered after `refresh_latency`, and once `refresh_gate` is set."""
        await asyncio.sleep(self.refresh_latency)
        while self.refresh_gate is not None and not self.refresh_gate.is_set():
            await asyncio.sleep(0.01)

    def _take_failure(self, method: str) -> _Failure | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.times -= 1
        if failure.times <= 0:
            queue.pop(0)
        return failure

    def _refuse(
        self, call: Call, error: str, status: int = 200, retry_after: float | None = None
    ) -> web.Response:
        call.status, call.error = status, error
        headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else None
        body: dict[str, Any] = {"ok": False, "error": error}
        if error == "missing_scope":
            body["needed"] = "assistant:write"
        return web.json_response(body, status=status, headers=headers)

    def _new_ts(self) -> str:
        return f"{self.clock}.{next(self._ts):06d}"

    async def _authorize(self, request: web.Request) -> web.Response:
        with self._lock:
            self.authorize_visits.append(dict(request.query))
        return web.Response(text="<html>Allow the app?</html>", content_type="text/html")

    def _oauth_v2_access(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if token != f"Basic {basic}":
            return "invalid_client_id"
        if args.get("grant_type") == "refresh_token":
            return self._refresh(str(args.get("refresh_token")))
        with self._lock:
            install = self._codes.pop(str(args.get("code")), None)
            if install is None:
                return "invalid_code"
            self._issue(install)
        return install.oauth_answer()

    def _openid_connect_token(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if token != f"Basic {basic}":
            return "invalid_client_id"
        with self._lock:
            found = self._sign_in_codes.pop(str(args.get("code")), None)
        if found is None:
            return "invalid_code"
        if args.get("redirect_uri") != found["redirect"]:
            return "bad_redirect_uri"

        def part(value: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

        id_token = f"{part({'alg': 'RS256'})}.{part(found['claims'])}.c2lnbmF0dXJl"
        return {"access_token": "xoxp-sign-in", "token_type": "Bearer", "id_token": id_token}

    def _refresh(self, refresh_token: str) -> dict[str, Any] | str:
        """A refresh token exchanged once: new tokens, the used one revoked. The access
        token it replaces keeps working until it expires, as Slack's does."""
        with self._lock:
            install = self._refresh_tokens.pop(refresh_token, None)
            if install is None or install.bot_token in self.dead_tokens:
                return "invalid_refresh_token"
            renewed = self._rotated(install)
            self._issue(renewed)
        return renewed.oauth_answer()

    def _rotated(self, install: Install) -> Install:
        """`install` with a new expiring access token and a new refresh token."""
        owner = install.enterprise_id if install.org_wide else install.team_id
        number = next(self._token_numbers)
        return replace(
            install,
            bot_token=f"xoxe.xoxb-{owner}-{number}-secret",
            refresh_token=f"xoxe-1-{owner}-{number}-refresh-secret",
            expires_in=self.token_lifetime,
        )

    def _issue(self, install: Install) -> None:
        """Called with the lock held: the install's tokens start working."""
        self.installs[install.bot_token] = install
        if install.refresh_token is not None and install.expires_in is not None:
            self.expiries[install.bot_token] = time.time() + install.expires_in
            self._refresh_tokens[install.refresh_token] = install

    def _auth_test(self, args: dict[str, Any], token: str) -> dict[str, Any]:
        install = self.installs.get(token)
        if install is not None:
            return {
                "url": "https://test.slack.com/",
                "team": install.team_name,
                "user": "gateway",
                "team_id": install.team_id,
                "enterprise_id": install.enterprise_id,
                "user_id": install.bot_user_id,
                "bot_id": install.bot_id,
                "is_enterprise_install": install.org_wide,
            }
        return {
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "gateway",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
        }

    def _chat_postMessage(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        channel, text = args.get("channel"), args.get("text")
        if not channel:
            return "channel_not_found"
        if not text:
            return "no_text"
        if len(text) > MAX_TEXT:
            return "msg_too_long"
        ts = self._new_ts()
        thread = args.get("thread_ts") or None
        metadata = args.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        with self._lock:
            self.messages[ts] = Message(
                channel, ts, text, thread, blocks=_blocks(args), metadata=metadata or None
            )
        return {"channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _conversations_history(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        """A channel's top-level messages between `oldest` and `latest`, newest first, in
        pages: `response_metadata.next_cursor` names the next (older) one (the bot's messages
        only: users' messages arrive as events, not through this fake's Web API)."""
        channel, limit = str(args.get("channel")), self._page(args, 100)
        with self._lock:
            top = [
                m
                for m in self.messages.values()
                if m.channel == channel and not m.thread_ts and _within(m.ts, args)
            ]
        newest = sorted(top, key=lambda m: m.ts, reverse=True)
        start = _cursor_start(args.get("cursor"))
        if start is None:
            return "invalid_cursor"
        page, more = newest[start : start + limit], len(newest) > start + limit
        shown = [m.payload(_flag(args.get("include_all_metadata"))) for m in page]
        cursor = _cursor(start + limit) if more else ""
        return {"messages": shown, "has_more": more, "response_metadata": {"next_cursor": cursor}}

    def _conversations_replies(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        """A thread's messages, oldest first (its parent first, when the bot posted it)."""
        channel, thread = str(args.get("channel")), str(args.get("ts"))
        limit = self._page(args, 1000)
        with self._lock:
            found = [
                m
                for m in self.messages.values()
                if m.channel == channel and thread in (m.ts, m.thread_ts) and _after(m.ts, args)
            ]
        oldest = sorted(found, key=lambda m: m.ts)[:limit]
        shown = [m.payload(_flag(args.get("include_all_metadata"))) for m in oldest]
        return {"messages": shown, "has_more": len(found) > limit}

    def _page(self, args: dict[str, Any], default: int) -> int:
        asked = int(args.get("limit") or default)
        return asked if self.page_cap is None else min(asked, self.page_cap)

    def expire(self, ts: str) -> None:
        """The stream `ts` lapses now, as an idle one does."""
        with self._lock:
            self.messages[ts].streaming = False

    def _chat_startStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        channel, thread = args.get("channel"), args.get("thread_ts")
        if not channel:
            return "channel_not_found"
        if not thread:
            return "invalid_arguments"
        if channel in self.refuse_streams:
            return self.refuse_streams[channel]
        user, team = args.get("recipient_user_id"), args.get("recipient_team_id")
        if not str(channel).startswith("D") and not user:
            return "missing_recipient_user_id"
        if not str(channel).startswith("D") and not team:
            return "missing_recipient_team_id"
        ts = self._new_ts()
        message = Message(
            str(channel), ts, "", str(thread), streaming=True, stream_touched=time.monotonic()
        )
        message.recipient = (str(user), str(team)) if user else None
        message.metadata = _metadata(args) or None  # kept, as chat.postMessage keeps it
        refused = self._stream_text(message, args)
        if refused is not None:
            return refused
        with self._lock:
            self.messages[ts] = message
        return {"channel": channel, "ts": ts}

    def _chat_appendStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        message = self._streaming(args)
        if isinstance(message, str):
            return message
        if "markdown_text" not in args and "chunks" not in args:
            return "markdown_text_or_chunks_required"
        refused = self._stream_text(message, args)
        if refused is not None:
            return refused
        return {"channel": message.channel, "ts": message.ts}

    def _chat_stopStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        message = self._streaming(args)
        if isinstance(message, str):
            return message
        refused = self._stream_text(message, args)
        if refused is not None:
            return refused
        with self._lock:
            message.streaming = False
            message.blocks = _blocks(args)
            message.metadata = _metadata(args) or message.metadata
        return {"channel": message.channel, "ts": message.ts, "message": {"text": message.text}}

    def _streaming(self, args: dict[str, Any]) -> Message | str:
        """The stream a call names, or Slack's error for it."""
        message = self.messages.get(str(args.get("ts")))
        if message is None or message.channel != args.get("channel"):
            return "message_not_found"
        with self._lock:
            self._lapse(message)
            return message if message.streaming else "message_not_in_streaming_state"

    def _lapse(self, message: Message) -> None:
        """Called with the lock held: a stream idle past `stream_expiry` stops streaming."""
        idle = time.monotonic() - message.stream_touched
        if message.streaming and self.stream_expiry is not None and idle > self.stream_expiry:
            message.streaming = False

    def _stream_text(self, message: Message, args: dict[str, Any]) -> str | None:
        """Append a stream call's text and tasks to `message`; Slack's error instead."""
        mode = next((m for m in ("markdown_text", "chunks") if m in args), None)
        if "markdown_text" in args and "chunks" in args:
            return "cannot_provide_both_markdown_text_and_chunks"
        if mode is not None and message.stream_mode not in (None, mode):
            return "streaming_mode_mismatch"
        chunks = args.get("chunks") or []
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        texts = [str(args["markdown_text"])] if "markdown_text" in args else []
        tasks: list[dict[str, Any]] = []
        for chunk in chunks:
            if not isinstance(chunk, dict):
                return "invalid_chunks"
            if chunk.get("type") == "markdown_text" and isinstance(chunk.get("text"), str):
                texts.append(chunk["text"])
            elif chunk.get("type") == "task_update" and _valid_task(chunk):
                tasks.append(chunk)
            else:
                return "invalid_chunks"
        if any(len(text) > MAX_MARKDOWN for text in texts):
            return "msg_too_long"
        with self._lock:
            message.stream_mode = message.stream_mode or mode
            message.text += "".join(texts)
            message.streamed = message.text
            message.tasks.update({str(task["id"]): task for task in tasks})
            message.stream_touched = time.monotonic()
        return None

    def _chat_update(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        message = self.messages.get(str(args.get("ts")))
        if message is None or message.channel != args.get("channel"):
            return "message_not_found"
        with self._lock:
            self._lapse(message)
            if message.streaming:
                return "streaming_state_conflict"
        text = args.get("text") or ""
        if len(text) > MAX_TEXT:
            return "msg_too_long"
        with self._lock:
            message.text, message.edits = text, message.edits + 1
            if "blocks" in args:
                message.blocks = _blocks(args)
        return {"channel": message.channel, "ts": message.ts, "text": text}

    def _chat_postEphemeral(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        if not args.get("user") or not args.get("channel"):
            return "user_not_in_channel"
        with self._lock:
            self.ephemeral.append(dict(args))
        return {"message_ts": self._new_ts()}

    def _users_info(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        user_id = str(args.get("user"))
        profile = self.users.get(user_id)
        if profile is None:
            return "user_not_found"
        return {
            "user": {
                "id": user_id,
                "name": profile["display_name"].lower(),
                "real_name": profile["real_name"],
                "profile": dict(profile),
                **self.roles.get(user_id, {"is_admin": False, "is_owner": False}),
            }
        }

    def _reactions_add(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        key = (str(args.get("channel")), str(args.get("timestamp")), str(args.get("name")))
        with self._lock:
            if key in self.reactions:
                return "already_reacted"
            self.reactions.add(key)
        return {}

    def _reactions_remove(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        key = (str(args.get("channel")), str(args.get("timestamp")), str(args.get("name")))
        with self._lock:
            if key not in self.reactions:
                return "no_reaction"
            self.reactions.discard(key)
        return {}

    def _assistant_threads_setStatus(
        self, args: dict[str, Any], token: str
    ) -> dict[str, Any] | str:
        if not self.assistant_enabled:
            return "missing_scope"
        return {}

    def _apps_connections_open(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        if not token.startswith("xapp-"):
            return "not_allowed_token_type"
        if self.refuse_connections:
            return "internal_error"
        self.connections_opened += 1
        return {"url": f"ws://{self.host}:{self.port}/link/?ticket={self.connections_opened}"}


def _metadata(args: dict[str, Any]) -> dict[str, Any]:
    metadata = args.get("metadata") or {}
    return dict(json.loads(metadata) if isinstance(metadata, str) else metadata)


def _valid_task(chunk: dict[str, Any]) -> bool:
    return (
        bool(chunk.get("id"))
        and isinstance(chunk.get("title"), str)
        and chunk.get("status") in TASK_STATES
    )


def _blocks(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The blocks of a call: a JSON body holds a list, a form a JSON string."""
    blocks = args.get("blocks") or []
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks)


def _after(ts: str, args: dict[str, Any]) -> bool:
    """Whether a message's `ts` is within `oldest` (exclusive unless `inclusive`)."""
    oldest = args.get("oldest")
    if not oldest:
        return True
    return float(ts) > float(oldest) or (_flag(args.get("inclusive")) and ts == str(oldest))


def _within(ts: str, args: dict[str, Any]) -> bool:
    """Whether a message's `ts` is between `oldest` and `latest` (each exclusive unless
    `inclusive`), as conversations.history reads them."""
    latest = args.get("latest")
    before = not latest or float(ts) < float(latest)
    before = before or (_flag(args.get("inclusive")) and ts == str(latest))
    return before and _after(ts, args)


def _cursor(start: int) -> str:
    return base64.b64encode(f"next:{start}".encode()).decode()


def _cursor_start(cursor: Any) -> int | None:
    """Where the page a cursor names starts (0 without one); None for a cursor this fake
    did not give."""
    if not cursor:
        return 0
    try:
        kind, _, start = base64.b64decode(str(cursor)).decode().partition(":")
        return int(start) if kind == "next" else None
    except ValueError:
        return None


def _flag(value: Any) -> bool:
    """A boolean argument as slack-sdk sends it in a form ("1"/"0") or JSON."""
    return str(value).lower() in ("1", "true")


def _peer(request: web.Request) -> str:
    """The caller's address and port: calls with the same one came on one connection."""
    found = request.transport.get_extra_info("peername") if request.transport else None
    return f"{found[0]}:{found[1]}" if found else ""
