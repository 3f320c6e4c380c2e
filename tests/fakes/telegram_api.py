"""A loopback fake of the Telegram Bot API, driven by the real python-telegram-bot client.

It serves `POST /bot<token>/<method>` on 127.0.0.1 for the methods the gateway
uses (getMe, sendMessage, sendMessageDraft, editMessageText, sendChatAction,
setMyCommands, setWebhook, deleteWebhook, getUpdates, answerCallbackQuery), records
every call (answered or refused) with its time, and behaves like Telegram where the
gateway depends on it: HTML is validated the way Telegram's parser refuses it ("can't
parse entities"), the rendered length is counted in UTF-16 code units, an edit that
changes neither the text nor the inline keyboard is "message is not modified",
getUpdates long-polls, confirms updates by offset, delivers only the kinds of update
`allowed_updates` names and refuses to run while a webhook is set. A draft
(sendMessageDraft, kept in `drafts`) is shown in private chats only (a group's is
"TEXTDRAFT_PEER_INVALID", as is one into a chat `refuse_drafts` names), needs a
non-zero `draft_id`, takes 0 to 4,096 characters after entity parsing (Bot API 10.0,
python-telegram-bot 22.8's: an empty text is the "Thinking…" placeholder), lapses
`draft_lifetime` seconds after its last update (an update after that is counted in
`Draft.lapses`: the user saw it vanish) and ends when the bot sends a message into the
chat. A message keeps its inline keyboard (`reply_markup`) until an edit without one
removes it; the answers to callback queries are kept in `callback_answers`. Files users
sent are added with `add_file` (its `file_id` goes into an update): getFile answers
with the file's path, or "file is too big" past the Bot API's 20 MB, and
`GET /file/bot<token>/<file_path>` serves the bytes (401 with another token, 404 for
an unknown path); each download is kept in `downloads`. Failures are scripted:
`fail_next` answers a method with an error (a 429 carries `parameters.retry_after`),
`ban` refuses every call into a chat until a deadline, the way a flood ban does.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

from tests.fakes.server import CallLog, LoopbackServer

STRING_FIELDS = frozenset(
    {"text", "parse_mode", "secret_token", "url", "action", "caption", "callback_query_id"}
)
ALLOWED_TAGS = frozenset(
    {
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
        "tg-emoji",
    }
)
MAX_LENGTH = 4096
DOWNLOAD_LIMIT = 20 * 1024 * 1024  # getFile refuses larger files on Telegram's own servers


# The rights every ChatMemberAdministrator carries (Bot API 7.x); the fake grants none.
ADMIN_RIGHTS = (
    "can_be_edited",
    "can_manage_chat",
    "can_delete_messages",
    "can_manage_video_chats",
    "can_restrict_members",
    "can_promote_members",
    "can_change_info",
    "can_invite_users",
    "can_post_stories",
    "can_edit_stories",
    "can_delete_stories",
)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class EntityError(ValueError):
    """The text is not HTML Telegram accepts."""


class _TelegramHtml(HTMLParser):
    """Telegram's HTML rules: known tags only, balanced, every `<` and `&` escaped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.visible: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            raise EntityError(f'Unsupported start tag "{tag}"')
        if tag == "a" and not dict(attrs).get("href"):
            raise EntityError("Can't find end of the entity: link without href")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            raise EntityError(f'Unmatched end tag "{tag}"')
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "<" in data or "&" in data:
            raise EntityError("Unsupported character: unescaped < or &")
        self.visible.append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in {"lt", "gt", "amp", "quot"}:
            raise EntityError(f'Unsupported HTML entity "&{name};"')
        self.visible.append(html.unescape(f"&{name};"))

    def handle_charref(self, name: str) -> None:
        self.visible.append(html.unescape(f"&#{name};"))


def parse_html(text: str) -> str:
    """The visible text of Telegram HTML, or EntityError the way Telegram refuses it."""
    parser = _TelegramHtml()
    parser.feed(text)
    parser.close()
    if parser.rawdata:
        raise EntityError("Unclosed start tag")
    if parser.stack:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"')
    return "".join(parser.visible)


@dataclass
class Call:
    """One request the fake received."""

    method: str
    params: dict[str, Any]
    at: float
    status: int = 200


@dataclass
class Message:
    """A message the bot posted, with every text it has had."""

    chat_id: int
    message_id: int
    text: str
    html: str
    parse_mode: str | None
    thread_id: int | None
    reply_to: int | None
    history: list[str] = field(default_factory=list)
    reply_markup: dict[str, Any] | None = None


@dataclass
class Draft:
    """A draft the bot streamed into a private chat: every text it showed, and when."""

    chat_id: int
    draft_id: int
    text: str = ""
    html: str = ""
    parse_mode: str | None = None
    updated_at: float = 0.0
    history: list[str] = field(default_factory=list)
    lapses: int = 0  # updates that came after the draft had lapsed (the user saw it vanish)
    ended_by: int | None = None  # the message that took its place

    def alive(self, lifetime: float, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.ended_by is None and now - self.updated_at <= lifetime


@dataclass
class StoredFile:
    """A file a user sent, as the Bot API keeps it."""

    file_id: str
    path: str  # `photos/file_3.jpg`
    data: bytes
    expired: bool = False


@dataclass
class _Failure:
    status: int
    description: str
    retry_after: int | None


class _ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


class FakeTelegram(LoopbackServer):
    """The fake Bot API server. `await start()`, point `base_url` at it, `await stop()`."""

    def __init__(self, token: str = "123456:TEST-token", username: str = "gw_test_bot") -> None:
        super().__init__()
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.calls: CallLog[Call] = CallLog()
        self.messages: dict[tuple[int, int], Message] = {}
        self.commands: list[dict[str, str]] = []
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        self.callback_answers: list[dict[str, Any]] = []
        self.files: dict[str, StoredFile] = {}
        self.member_status: dict[tuple[int, int], str] = {}  # (chat, user) -> getChatMember's
        self.downloads: CallLog[str] = CallLog()  # the file paths fetched
        self.drafts: dict[tuple[int, int], Draft] = {}
        self.draft_lifetime = 30.0  # seconds a draft shows after its last update
        self.drafts_refused: set[int] = set()  # chats whose drafts are TEXTDRAFT_PEER_INVALID
        self._allowed_updates: list[str] | None = None
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(5000)
        self._failures: dict[str, list[_Failure]] = {}
        self._bans: dict[int, float] = {}
        self._changed = asyncio.Condition()
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.serve()

    async def stop(self) -> None:
        await self.close()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        return app

    async def _before_close(self) -> None:
        self._stopping = True
        async with self._changed:
            self._changed.notify_all()

    @property
    def base_url(self) -> str:
        """What TELEGRAM_API_URL should be (python-telegram-bot appends the token)."""
        return f"{self.url}/bot"

    @property
    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Gateway",
            "username": self.username,
        }

    # -- scripting ------------------------------------------------------------------------

    def queue_update(self, update: dict[str, Any]) -> int:
        """Offer an update to getUpdates; gives it an update_id unless it has one."""
        update = dict(update)
        update.setdefault("update_id", next(self._update_ids))
        self._updates.append(update)
        asyncio.get_running_loop().create_task(self._notify())
        return int(update["update_id"])

    def add_file(self, data: bytes, folder: str = "photos", suffix: str = ".jpg") -> str:
        """Keep a file a user sent; returns its file_id (for the update's photo, voice...)."""
        number = len(self.files)
        file_id = f"AgAC{folder[:3]}{number:04d}"
        self.files[file_id] = StoredFile(file_id, f"{folder}/file_{number}{suffix}", data)
        return file_id

    def expire(self, file_id: str) -> None:
        """The file's download URL answers 404 from now on (getFile still names it)."""
        self.files[file_id].expired = True

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = None,
        description: str | None = None,
        count: int = 1,
    ) -> None:
        """Answer the next `count` calls of `method` with an error."""
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else "Bad Request: can't parse entities: scripted failure"
            )
        failure = _Failure(status, description, retry_after)
        self._failures.setdefault(method, []).extend([failure] * count)

    def reject_entities_next(self, method: str = "sendMessage", count: int = 1) -> None:
        """The next `count` calls of `method` that carry a parse_mode get "can't parse entities"."""
        self.fail_next(
            method,
            status=400,
            count=count,
            description="Bad Request: can't parse entities: Unsupported start tag",
        )

    def refuse_drafts(self, chat_id: int) -> None:
        """sendMessageDraft into `chat_id` is refused from now on, as in a group."""
        self.drafts_refused.add(chat_id)

    def ban(self, chat_id: int, seconds: int) -> None:
        """Refuse every call into `chat_id` with 429 until `seconds` from now."""
        self._bans[chat_id] = time.monotonic() + seconds

    # -- reading what happened ------------------------------------------------------------

    @property
    def pending_updates(self) -> list[int]:
        """Ids of the updates Telegram still holds (not yet confirmed by an offset)."""
        return [int(u["update_id"]) for u in self._updates]

    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return self.calls.where(lambda c: c.method == method and (c.status == 200 or not ok_only))

    def drafts_in(self, chat_id: int) -> list[Draft]:
        """The chat's drafts, in the order they were first shown."""
        return [d for (chat, _), d in self.drafts.items() if chat == chat_id]

    def draft_shown(self, chat_id: int) -> str | None:
        """The text of the draft the user sees in the chat now, or None."""
        live = [d for d in self.drafts_in(chat_id) if d.alive(self.draft_lifetime)]
        return max(live, key=lambda d: d.updated_at).text if live else None

    def messages_in(self, chat_id: int) -> list[Message]:
        found = [m for (chat, _), m in self.messages.items() if chat == chat_id]
        return sorted(found, key=lambda m: m.message_id)

    async def wait_for(self, condition: Callable[[], object], within: float = 20.0) -> None:
        """Wait until `condition()` is true, re-checking after every call the fake answers."""
        deadline = time.monotonic() + within
        async with self._changed:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError("the fake Telegram never saw the expected calls")
                try:
                    await asyncio.wait_for(self._changed.wait(), min(remaining, 0.25))
                except TimeoutError:
                    pass

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- the API --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        call = Call(method, params, time.monotonic())
        self.calls.record(call)
        try:
            if request.match_info["token"] != self.token:
                raise _ApiError(401, "Unauthorized")
            self._scripted_failure(method, params)
            result = await self._dispatch(method, params)
        except _ApiError as exc:
            call.status = exc.status
            await self._notify()
            body: dict[str, Any] = {
                "ok": False,
                "error_code": exc.status,
                "description": exc.description,
            }
            if exc.retry_after is not None:
                body["parameters"] = {"retry_after": exc.retry_after}
            return web.json_response(body, status=exc.status)
        await self._notify()
        return web.json_response({"ok": True, "result": result})

    def _scripted_failure(self, method: str, params: dict[str, Any]) -> None:
        chat_id = params.get("chat_id")
        banned_until = self._bans.get(chat_id) if isinstance(chat_id, int) else None
        if banned_until is not None:
            remaining = banned_until - time.monotonic()
            if remaining > 0:
                wait = max(1, int(remaining + 0.999))
                raise _ApiError(429, f"Too Many Requests: retry after {wait}", wait)
        queue = self._failures.get(method)
        if not queue:
            return
        failure = queue[0]
        if (
            failure.status == 400
            and "parse entities" in failure.description
            and not params.get("parse_mode")
        ):
            return  # a plain-text send has no entities to reject
        queue.pop(0)
        raise _ApiError(failure.status, failure.description, failure.retry_after)

    async def _dispatch(self, method: str, params: dict[str, Any]) -> Any:
        handler = {
            "getMe": lambda p: self.bot_user,
            "sendMessage": self._send_message,
            "sendMessageDraft": self._send_message_draft,
            "editMessageText": self._edit_message_text,
            "sendChatAction": lambda p: True,
            "setMyCommands": self._set_my_commands,
            "setWebhook": self._set_webhook,
            "deleteWebhook": self._delete_webhook,
            "answerCallbackQuery": self._answer_callback_query,
            "getFile": self._get_file,
            "getChatMember": self._get_chat_member,
        }.get(method)
        if method == "getUpdates":
            return await self._get_updates(params)
        if handler is None:
            raise _ApiError(404, "Not Found: method not found")
        return handler(params)

    def _render(self, params: dict[str, Any], *, blank: bool = False) -> tuple[str, str]:
        raw = str(params.get("text", ""))
        if params.get("parse_mode") == "HTML":
            try:
                visible = parse_html(raw)
            except EntityError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        else:
            visible = raw
        if not visible.strip() and not blank:
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_len(visible.strip()) > MAX_LENGTH:
            raise _ApiError(400, "Bad Request: message is too long")
        return raw, visible

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        raw, visible = self._render(params)
        chat_id = int(params["chat_id"])
        reply = params.get("reply_parameters") or {}
        message = Message(
            chat_id=chat_id,
            message_id=next(self._message_ids),
            text=visible,
            html=raw,
            parse_mode=params.get("parse_mode"),
            thread_id=params.get("message_thread_id"),
            reply_to=reply.get("message_id") or params.get("reply_to_message_id"),
            history=[visible],
            reply_markup=params.get("reply_markup"),
        )
        self.messages[(chat_id, message.message_id)] = message
        for draft in self.drafts.values():
            if draft.chat_id == chat_id and draft.ended_by is None:
                draft.ended_by = message.message_id  # the client shows the message instead
        return self._message_json(message)

    def _send_message_draft(self, params: dict[str, Any]) -> bool:
        chat_id = int(params["chat_id"])
        if chat_id < 0 or chat_id in self.drafts_refused:
            raise _ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        draft_id = params.get("draft_id")
        if not isinstance(draft_id, int) or draft_id == 0:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        raw, visible = self._render(params, blank=True)
        now = time.monotonic()
        draft = self.drafts.setdefault((chat_id, draft_id), Draft(chat_id, draft_id))
        if draft.history and not draft.alive(self.draft_lifetime, now):
            draft.lapses += 1
        draft.text, draft.html, draft.parse_mode = visible, raw, params.get("parse_mode")
        draft.updated_at, draft.ended_by = now, None
        draft.history.append(visible)
        return True

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (int(params["chat_id"]), int(params["message_id"]))
        message = self.messages.get(key)
        if message is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        raw, visible = self._render(params)
        markup = params.get("reply_markup")
        if (raw, params.get("parse_mode"), markup) == (
            message.html,
            message.parse_mode,
            message.reply_markup,
        ):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message "
                "content and reply markup are exactly the same as a current "
                "content and reply markup of the message",
            )
        message.text, message.html, message.parse_mode = visible, raw, params.get("parse_mode")
        message.reply_markup = markup  # an edit without one removes it
        message.history.append(visible)
        return self._message_json(message)

    def _message_json(self, message: Message) -> dict[str, Any]:
        chat_type = "private" if message.chat_id > 0 else "supergroup"
        body: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": {"id": message.chat_id, "type": chat_type},
            "from": self.bot_user,
            "text": message.text,
        }
        if message.thread_id is not None:
            body["message_thread_id"] = message.thread_id
            body["is_topic_message"] = True
        return body

    def _get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        stored = self.files.get(str(params.get("file_id")))
        if stored is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        if len(stored.data) > DOWNLOAD_LIMIT:
            raise _ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": stored.file_id,
            "file_unique_id": f"u{stored.file_id}",
            "file_size": len(stored.data),
            "file_path": stored.path,
        }

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        path = request.match_info["path"]
        self.downloads.record(path)
        stored = next((f for f in self.files.values() if f.path == path), None)
        if stored is None or stored.expired:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
            )
        return web.Response(body=stored.data, content_type="application/octet-stream")

    def _get_chat_member(self, params: dict[str, Any]) -> dict[str, Any]:
        """A member as the Bot API has it: `member` unless scripted in `member_status`."""
        user_id = int(params["user_id"])
        status = self.member_status.get((int(params["chat_id"]), user_id), "member")
        member: dict[str, Any] = {
            "status": status,
            "user": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
        }
        if status in ("administrator", "creator"):
            member["is_anonymous"] = False
        if status == "administrator":
            member |= dict.fromkeys(ADMIN_RIGHTS, False) | {"can_manage_chat": True}
        return member

    def _answer_callback_query(self, params: dict[str, Any]) -> bool:
        self.callback_answers.append(dict(params))
        return True

    def _set_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = list(params.get("commands") or [])
        return True

    def _set_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = str(params["url"])
        self.webhook_secret = params.get("secret_token")
        return True

    def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook_url = self.webhook_secret = None
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook_url:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is "
                "active; use deleteWebhook to delete the webhook first",
            )
        if isinstance(params.get("allowed_updates"), list):
            self._allowed_updates = list(params["allowed_updates"])
        offset = params.get("offset")
        if isinstance(offset, int) and offset > 0:
            # Telegram forgets every update below the offset: they count as confirmed.
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while not self._deliverable() and not self._stopping and time.monotonic() < deadline:
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
                except TimeoutError:
                    break
        limit = int(params.get("limit") or 100)
        return list(self._deliverable()[:limit])

    def _deliverable(self) -> list[dict[str, Any]]:
        """The held updates, less those of a kind not allowed (Telegram never sends them)."""
        self._updates = [u for u in self._updates if self._allowed(u)]
        return self._updates

    def _allowed(self, update: dict[str, Any]) -> bool:
        """Whether the update is of a kind the last `allowed_updates` asked for (the
        setting persists, as Telegram keeps it; an empty list means the default)."""
        kinds = [kind for kind in update if kind != "update_id"]
        return not self._allowed_updates or any(k in self._allowed_updates for k in kinds)


async def _read_params(request: web.Request) -> dict[str, Any]:
    """python-telegram-bot posts a form whose non-string values are JSON; JSON bodies work too."""
    if request.content_type == "application/json":
        body = await request.json()
        return dict(body) if isinstance(body, dict) else {}
    form = await request.post()
    params: dict[str, Any] = {}
    for name, value in form.items():
        text = str(value)
        if name in STRING_FIELDS:
            params[name] = text
            continue
        try:
            params[name] = json.loads(text)
        except ValueError:
            params[name] = text
    return params


@contextlib.asynccontextmanager
async def running(
    token: str = "123456:TEST-token", username: str = "gw_test_bot"
) -> AsyncIterator[FakeTelegram]:
    """A started fake, stopped on exit."""
    fake = FakeTelegram(token, username)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()
